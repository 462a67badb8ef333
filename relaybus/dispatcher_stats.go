package relaybus

import "sync/atomic"

// DispatcherStats are counters of a bus's dispatcher (which runs once).
type DispatcherStats struct {
	Claims      int64 // DeliveryClaim calls that succeeded
	Claimed     int64 // deliveries claimed
	Succeeded   int64 // handler calls that returned nil
	Completed   int64 // completions the store confirmed
	Failed      int64 // handler calls that failed (error, panic or timeout)
	Rescheduled int64 // failures the store rescheduled
	Buried      int64 // failures the store made dead letters
	Released    int64 // deliveries given back without spending an attempt
	LeasesLost  int64 // leases found lost (renewal, completion, or expiry)
	Panics      int64 // handler panics recovered
}

// DispatcherStats returns the dispatcher's counters (atomic reads, cheap):
// zero before Start, final once the dispatcher has stopped.
func (b *Bus[TTx]) DispatcherStats() DispatcherStats {
	b.mu.RLock()
	d := b.disp
	b.mu.RUnlock()
	if d == nil {
		return DispatcherStats{}
	}
	return d.stats.snapshot()
}

// dispatcherCounters are the dispatcher's own counters, updated atomically
// by its goroutines.
type dispatcherCounters struct {
	claims, claimed, succeeded, completed, failed, rescheduled, buried, released, leasesLost, panics atomic.Int64
}

func (s *dispatcherCounters) snapshot() DispatcherStats {
	return DispatcherStats{
		Claims: s.claims.Load(), Claimed: s.claimed.Load(), Succeeded: s.succeeded.Load(),
		Completed: s.completed.Load(), Failed: s.failed.Load(), Rescheduled: s.rescheduled.Load(),
		Buried: s.buried.Load(), Released: s.released.Load(), LeasesLost: s.leasesLost.Load(),
		Panics: s.panics.Load(),
	}
}
