package workerkit

import (
	"fmt"
	"time"

	"github.com/berkcansavur/relaybus/bench/protocol"
	"github.com/berkcansavur/relaybus/relaybus"
)

// RetrySchedule is relaybus's retry backoff, for a peer to retry failed
// attempts on, so that a workload fails and retries on the same schedule
// on both sides of a comparison: the wait after failed attempt n is
// min(Base * 2^(n-1), Max), spread by ±relaybus.DefaultRetryJitter.
type RetrySchedule struct {
	Base, Max time.Duration
}

// RetrySchedule reads the workload's retry delays and checks them: 0
// takes relaybus's default (relaybus.DefaultRetryBaseDelay; for the max,
// relaybus.DefaultRetryMaxDelay, or the base when that is longer), and
// both must lie in relaybus's bounds (0 < base <= max <=
// relaybus.MaxRetryDelay).
func (k *Checks) RetrySchedule(wl *protocol.Workload) (RetrySchedule, error) {
	if wl.RetryBaseDelayMs < 0 || wl.RetryMaxDelayMs < 0 {
		return RetrySchedule{}, fmt.Errorf("%s: workload retry delays must be >= 0, got base %d ms, max %d ms", k.Pkg, wl.RetryBaseDelayMs, wl.RetryMaxDelayMs)
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
		return RetrySchedule{}, fmt.Errorf("%s: workload retry delays out of range: base %v, max %v (want 0 < base <= max <= %v)", k.Pkg, base, maxDelay, relaybus.MaxRetryDelay)
	}
	return RetrySchedule{Base: base, Max: maxDelay}, nil
}

// Delay is the wait after failed attempt (1-based); r, uniform in
// [0, 1), spreads it.
func (s RetrySchedule) Delay(attempt int, r float64) time.Duration {
	return RetryDelay(attempt, s.Base, s.Max, relaybus.DefaultRetryJitter, r)
}

// RetryDelay is a copy of relaybus's retryDelay (relaybus/backoff.go),
// the schedule its dispatcher retries failed attempts on: the wait before
// the retry of attempt (1-based) is min(base*2^(attempt-1), maxDelay),
// spread by ±jitter (r uniform in [0, 1)), and never above maxDelay. It
// is a copy because relaybus keeps its backoff internal.
// TestRetryDelayMatchesRelaybus checks it against
// relaybus/testdata/retry_delays.txt, the table relaybus's own test
// checks the original against, so the two cannot drift apart unnoticed.
func RetryDelay(attempt int, base, maxDelay time.Duration, jitter, r float64) time.Duration {
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
