package main

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/berkcansavur/relaybus/bench/protocol"
	"github.com/berkcansavur/relaybus/relaybus"
)

// backoffPolicy is relaybus's retry schedule (retryDelay, with
// relaybus's defaults and bounds) as a River client retry policy, so
// that a workload that sets retry delays fails and retries on the same
// schedule on both sides.
type backoffPolicy struct {
	base, max time.Duration
	jitter    float64
	now       func() time.Time
	rand      func() float64
}

var _ river.ClientRetryPolicy = (*backoffPolicy)(nil)

// NextRetry schedules the retry of the attempt that just failed
// (job.Attempt, 1-based; River's rescuer calls it for a rescued job too).
func (p *backoffPolicy) NextRetry(job *rivertype.JobRow) time.Time {
	return p.now().Add(retryDelay(job.Attempt, p.base, p.max, p.jitter, p.rand()))
}

// retryPolicyFor returns the client retry policy the workload asks for:
// relaybus's schedule when it sets a retry delay, nil (River's default,
// attempt^4 seconds) when it sets none.
func retryPolicyFor(wl *protocol.Workload) (river.ClientRetryPolicy, error) {
	if wl.RetryBaseDelayMs < 0 || wl.RetryMaxDelayMs < 0 {
		return nil, fmt.Errorf("river: workload retry delays must be >= 0, got base %d ms, max %d ms", wl.RetryBaseDelayMs, wl.RetryMaxDelayMs)
	}
	if wl.RetryBaseDelayMs == 0 && wl.RetryMaxDelayMs == 0 {
		return nil, nil
	}
	base := time.Duration(wl.RetryBaseDelayMs) * time.Millisecond
	if base == 0 {
		base = relaybus.DefaultRetryBaseDelay
	}
	maxDelay := time.Duration(wl.RetryMaxDelayMs) * time.Millisecond
	if maxDelay == 0 {
		maxDelay = max(relaybus.DefaultRetryMaxDelay, base)
	}
	if base > relaybus.MaxRetryDelay || maxDelay < base || maxDelay > relaybus.MaxRetryDelay {
		return nil, fmt.Errorf("river: workload retry delays out of range: base %v, max %v (want 0 < base <= max <= %v)", base, maxDelay, relaybus.MaxRetryDelay)
	}
	return &backoffPolicy{
		base: base, max: maxDelay, jitter: relaybus.DefaultRetryJitter,
		now: func() time.Time { return time.Now().UTC() }, rand: rand.Float64,
	}, nil
}

// retryDelay is a copy of relaybus's retryDelay (relaybus/backoff.go),
// the schedule its dispatcher retries failed attempts on: the wait before
// the retry of attempt (1-based) is min(base*2^(attempt-1), maxDelay),
// spread by ±jitter (r uniform in [0, 1)), and never above maxDelay. It
// is a copy because relaybus keeps its backoff internal and this module
// cannot import a package's internals. TestRetryDelayMatchesRelaybus
// checks it against relaybus/testdata/retry_delays.txt, the table
// relaybus's own test checks the original against, so the two cannot
// drift apart unnoticed.
func retryDelay(attempt int, base, maxDelay time.Duration, jitter, r float64) time.Duration {
	if attempt < 1 {
		attempt = 1
	}
	d := maxDelay
	// base << (attempt-1) without overflow: stop doubling once past maxDelay.
	if shift := attempt - 1; shift < 63 && base <= maxDelay>>shift {
		d = base << shift
	}
	if jitter > 0 {
		d = time.Duration(float64(d) * (1 + jitter*(2*r-1)))
	}
	return min(max(d, 0), maxDelay)
}
