package main

import (
	"fmt"
	"time"

	"github.com/berkcansavur/relaybus/bench/protocol"
)

// The retry schedule's defaults and bounds: relaybus's
// (relaybus.DefaultMaxAttempts, DefaultRetryBaseDelay,
// DefaultRetryMaxDelay, DefaultRetryJitter, MaxRetryDelay), so that a
// workload fails and retries on the same schedule on both sides. This
// module does not import the library, so they are restated here.
const (
	defaultMaxAttempts    = 10
	defaultRetryBaseDelay = time.Second
	defaultRetryMaxDelay  = time.Hour
	retryJitter           = 0.1
	maxRetryDelay         = 30 * 24 * time.Hour
)

// retrySchedule is relaybus's backoff: the delay after failed attempt n
// is min(base * 2^(n-1), max), spread by ±jitter.
type retrySchedule struct {
	base, max time.Duration
}

// retryScheduleFor returns the schedule the workload asks for.
func retryScheduleFor(wl *protocol.Workload) (retrySchedule, error) {
	if wl.RetryBaseDelayMs < 0 || wl.RetryMaxDelayMs < 0 {
		return retrySchedule{}, fmt.Errorf("ceiling: workload retry delays must be >= 0, got base %d ms, max %d ms", wl.RetryBaseDelayMs, wl.RetryMaxDelayMs)
	}
	base := time.Duration(wl.RetryBaseDelayMs) * time.Millisecond
	if base == 0 {
		base = defaultRetryBaseDelay
	}
	maxDelay := time.Duration(wl.RetryMaxDelayMs) * time.Millisecond
	if maxDelay == 0 {
		maxDelay = max(defaultRetryMaxDelay, base)
	}
	if base > maxRetryDelay || maxDelay < base || maxDelay > maxRetryDelay {
		return retrySchedule{}, fmt.Errorf("ceiling: workload retry delays out of range: base %v, max %v (want 0 < base <= max <= %v)", base, maxDelay, maxRetryDelay)
	}
	return retrySchedule{base: base, max: maxDelay}, nil
}

// delay is the wait after failed attempt (1-based); r in [0, 1) spreads
// it.
func (s retrySchedule) delay(attempt int, r float64) time.Duration {
	if attempt < 1 {
		attempt = 1
	}
	d := s.max
	// base << (attempt-1) without overflow: stop doubling once past max.
	if shift := attempt - 1; shift < 63 && s.base <= s.max>>shift {
		d = s.base << shift
	}
	d = time.Duration(float64(d) * (1 + retryJitter*(2*r-1)))
	return min(max(d, 0), s.max)
}

// maxAttemptsOf is the attempt budget of every delivery.
func maxAttemptsOf(wl *protocol.Workload) int {
	if wl.MaxAttempts > 0 {
		return wl.MaxAttempts
	}
	return defaultMaxAttempts
}
