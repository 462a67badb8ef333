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
	HeldBack    int64 // of those, given back to fill a batch (BatchOptions.MaxWait)
	LeasesLost  int64 // leases found lost (renewal, completion, or expiry)
	Panics      int64 // handler panics recovered

	// InFlight is not a counter but the number of deliveries the
	// dispatcher holds a lease on now: claimed and their final write
	// (complete, reschedule, bury, release) not yet done. That is a
	// handler running or waiting for a worker, and a completion queued
	// or being written. A delivery leaves it when its final write is
	// done, or when its lease is found lost, even if its handler is
	// still running then (it writes nothing more). Bounded by
	// Config.Concurrency and the completion queue
	// (Config.CompletionBatchMax). It is read under the lock that guards
	// the leases, not atomically with the counters.
	InFlight int64
}

// DispatcherStats returns the dispatcher's counters (atomic reads) and
// what it has in flight (the length of its lease table, under its lock):
// cheap enough for every metrics scrape. Zero before Start, final once
// the dispatcher has stopped: InFlight is 0 then, unless the shutdown
// timeout left handlers running, which stay counted.
func (b *Bus[TTx]) DispatcherStats() DispatcherStats {
	b.mu.RLock()
	d := b.disp
	b.mu.RUnlock()
	if d == nil {
		return DispatcherStats{}
	}
	st := d.stats.snapshot()
	d.mu.Lock()
	st.InFlight = int64(len(d.held))
	d.mu.Unlock()
	return st
}

// dispatcherCounters are the dispatcher's own counters, updated atomically
// by its goroutines.
type dispatcherCounters struct {
	claims, claimed, succeeded, completed, failed, rescheduled, buried, released, heldBack, leasesLost, panics atomic.Int64
}

func (s *dispatcherCounters) snapshot() DispatcherStats {
	return DispatcherStats{
		Claims: s.claims.Load(), Claimed: s.claimed.Load(), Succeeded: s.succeeded.Load(),
		Completed: s.completed.Load(), Failed: s.failed.Load(), Rescheduled: s.rescheduled.Load(),
		Buried: s.buried.Load(), Released: s.released.Load(), HeldBack: s.heldBack.Load(), LeasesLost: s.leasesLost.Load(),
		Panics: s.panics.Load(),
	}
}
