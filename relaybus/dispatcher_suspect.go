package relaybus

import (
	"context"
	"log/slog"
)

// Suspects. A lane-lease store marks a delivery that was in flight when its
// lane was taken over (Delivery.Suspect): it may be what crashed its last
// process. It runs alone: every claim says whether this dispatcher has
// anything in flight (driver.DeliveryClaimParams.Busy), and a store answers a
// busy claim nothing while a suspect is its oldest candidate, so the
// dispatcher drains (its empty claims lead to polls, and it starts
// nothing); its first claim with nothing in flight gets the suspect alone,
// which it runs, waiting for its final write before it claims again. If
// the suspect crashes the process again, the takeover that follows
// charges it alone, so a poison delivery reaches the dead letters by
// itself and the deliveries that happened to run beside it are not.

// runAlone runs the suspect j (held, not started), claimed with nothing
// else in flight, and returns once its final write is done, or at the
// shutdown. Releases of other suspects of the same claim may still be
// being written: it waits for them first.
func (d *dispatcher[TTx]) runAlone(ctx context.Context, j *job) {
	d.logJob(slog.LevelWarn, "relaybus: running a suspect alone", j, nil)
	if !d.waitQuiet(ctx, j) {
		// The shutdown came first: give it back unstarted.
		if d.beginFinish(j) {
			d.release(j)
		}
		return
	}
	d.launch(j, d.handlers[j.d.Handler])
	d.waitQuiet(ctx, nil)
}

// inFlight counts what this dispatcher has in flight but except: handlers
// running and leases held (a lease is held until its final write, so a
// queued or running completion counts; a lost lease whose handler has not
// returned still counts as running).
func (d *dispatcher[TTx]) inFlight(except *job) int {
	d.inflightMu.Lock()
	running := d.inflight
	d.inflightMu.Unlock()
	d.mu.Lock()
	held := len(d.held)
	if except != nil && d.held[except.d.ID] == except {
		held--
	}
	d.mu.Unlock()
	return running + held
}

// waitQuiet waits until nothing is in flight but except, and reports
// whether it got there before ctx was done.
func (d *dispatcher[TTx]) waitQuiet(ctx context.Context, except *job) bool {
	for d.inFlight(except) > 0 {
		select {
		case <-d.freed:
		case <-ctx.Done():
			return false
		}
	}
	return true
}
