package relaybus

import (
	"context"
	"log/slog"
)

// Suspects. A lane-lease store marks a delivery that was in flight when its
// lane was taken over (Delivery.Suspect): it may be what crashed its last
// process. It runs alone: the claim loop stops, waits until nothing else of
// this dispatcher runs or holds a lease, runs the suspect, waits for its
// final write, and resumes. If the suspect crashes the process again, the
// takeover that follows charges it alone, so a poison delivery reaches the
// dead letters by itself and the deliveries that happened to be claimed
// with it are not charged into them too.

// runAlone runs the suspect j (held, not started) with nothing else in
// flight, and returns once its final write is done, or at the shutdown.
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

// waitQuiet waits until no handler runs and no lease is held but except's,
// and reports whether it got there before ctx was done. A lost lease whose
// handler has not returned yet still counts: that handler still runs.
func (d *dispatcher[TTx]) waitQuiet(ctx context.Context, except *job) bool {
	for {
		d.inflightMu.Lock()
		running := d.inflight
		d.inflightMu.Unlock()
		d.mu.Lock()
		held := len(d.held)
		if except != nil && d.held[except.d.ID] == except {
			held--
		}
		d.mu.Unlock()
		if running == 0 && held == 0 {
			return true
		}
		select {
		case <-d.freed:
		case <-ctx.Done():
			return false
		}
	}
}
