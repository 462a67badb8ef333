package main

import (
	"math/rand/v2"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/berkcansavur/relaybus/bench/protocol"
	"github.com/berkcansavur/relaybus/bench/worker/workerkit"
)

// backoffPolicy is relaybus's retry schedule (workerkit.RetrySchedule)
// as a River client retry policy, so that a workload that sets retry
// delays fails and retries on the same schedule on both sides.
type backoffPolicy struct {
	schedule workerkit.RetrySchedule
	now      func() time.Time
	rand     func() float64
}

var _ river.ClientRetryPolicy = (*backoffPolicy)(nil)

// NextRetry schedules the retry of the attempt that just failed
// (job.Attempt, 1-based; River's rescuer calls it for a rescued job too).
func (p *backoffPolicy) NextRetry(job *rivertype.JobRow) time.Time {
	return p.now().Add(p.schedule.Delay(job.Attempt, p.rand()))
}

// retryPolicyFor returns the client retry policy the workload asks for:
// relaybus's schedule when it sets a retry delay, nil (River's default,
// attempt^4 seconds) when it sets none.
func retryPolicyFor(wl *protocol.Workload) (river.ClientRetryPolicy, error) {
	s, err := checks.RetrySchedule(wl)
	if err != nil {
		return nil, err
	}
	if wl.RetryBaseDelayMs == 0 && wl.RetryMaxDelayMs == 0 {
		return nil, nil
	}
	return &backoffPolicy{schedule: s, now: func() time.Time { return time.Now().UTC() }, rand: rand.Float64}, nil
}
