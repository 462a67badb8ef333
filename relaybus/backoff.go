package relaybus

import (
	"math/rand/v2"
	"time"
)

// retryDelay is the wait before the retry of a failed attempt (attempt
// 1-based): min(base*2^(attempt-1), maxDelay), spread by ±jitter (a
// fraction), and never above maxDelay. The spread keeps failures that
// happened together from retrying together. r is a uniform random number
// in [0, 1). The dispatcher retries failed attempts on this schedule with
// Config's RetryBaseDelay, RetryMaxDelay and RetryJitter, and its final
// writes with writeRetryDelayMin, writeRetryDelayMax and
// writeRetryJitter.
//
// The benchmark's peers (River, the plain-SQL ceiling) retry on the same
// schedule, so that the two sides of a cell that fails and retries do the
// same work: they cannot import this package's internals (they are
// modules of their own), so bench/worker/workerkit/retry.go keeps a copy,
// and both this package's test and workerkit's check their function
// against the one table of testdata/retry_delays.txt. A change here changes that table, and the
// peer's test fails until its copy follows.
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

// retryPolicy is the backoff of failed attempts, from Config.
type retryPolicy struct {
	base, max time.Duration
	jitter    float64
}

func retryPolicyOf(cfg Config) retryPolicy {
	return retryPolicy{base: cfg.RetryBaseDelay, max: cfg.RetryMaxDelay, jitter: cfg.RetryJitter}
}

// delay is retryDelay with the policy's settings and a fresh random number.
func (p retryPolicy) delay(attempt int) time.Duration {
	return retryDelay(attempt, p.base, p.max, p.jitter, rand.Float64())
}

// claimErrorDelay is the wait after the n-th claim error in a row: the poll
// interval doubled per error, at most maxClaimErrorBackoffFactor times it, so
// a store that is down is not hammered and one that is back is found soon.
func claimErrorDelay(n int, poll time.Duration) time.Duration {
	f := 1
	for i := 1; i < n && f < maxClaimErrorBackoffFactor; i++ {
		f *= 2
	}
	return poll * time.Duration(f)
}
