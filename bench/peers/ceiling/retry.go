package main

import "github.com/berkcansavur/relaybus/bench/protocol"

// defaultMaxAttempts is relaybus's (relaybus.DefaultMaxAttempts), so
// that a workload that sets none gives up after as many attempts on both
// sides. The retry delays are relaybus's too (workerkit.RetrySchedule).
const defaultMaxAttempts = 10

// maxAttemptsOf is the attempt budget of every delivery.
func maxAttemptsOf(wl *protocol.Workload) int {
	if wl.MaxAttempts > 0 {
		return wl.MaxAttempts
	}
	return defaultMaxAttempts
}
