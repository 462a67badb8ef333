package relaybus

import (
	"context"
	"log/slog"
	"time"
)

// The claim loop: leases due deliveries while handler slots are free, and
// starts a job for each. Polling is the correctness path (it finds
// everything, whatever was announced or lost); three events make it claim
// again at once instead: a claim that came back full (there is likely
// more), a keyed delivery that finished (its key's next delivery may be
// due now), and a wake-up from the store (wake.go: a publish committed,
// another process handed its lanes back, or the listener reconnected and
// may have missed some). None can spin: each follows a real event, and a
// claim that finds nothing waits for the next poll or event.

// claimLoop claims up to min(BatchSize, free slots) deliveries at a time and
// hands each to a worker, until ctx is done.
func (d *dispatcher[TTx]) claimLoop(ctx context.Context) {
	// The listener lives as long as the loop: it ends when ctx is done,
	// before the shutdown waits for the handlers.
	wake := d.startWakeups(ctx)
	defer wake.wait()
	d.carryOpen()
	defer d.carryClose()
	claimErrors := 0
	for {
		limit, ok := d.claimLimit(ctx)
		if !ok {
			return
		}
		// A key freed, or a commit announced, before this claim is seen
		// by it: forget that wake-up.
		select {
		case <-d.keyFreed:
		default:
		}
		select {
		case <-wake.c:
		default:
		}
		p, some, err := d.claimParams(ctx)
		if err != nil {
			// The paused handlers were never read: claim nothing yet.
			claimErrors++
			wait := claimErrorDelay(claimErrors, d.cfg.PollInterval)
			d.log.Error("relaybus: claim failed", "error", err, "errors_in_a_row", claimErrors, "retry_in", wait)
			sleep(ctx, wait)
			continue
		}
		if !some {
			// Every handler is paused: look again at the next poll.
			d.idle(ctx, wake)
			continue
		}
		now := d.cfg.Now()
		// The successes waiting for a claim, completed in its transaction
		// (dispatcher_carry.go): finished if it commits, so not busy.
		cr := d.approveCarried(d.carryTake())
		// Only this loop starts work, so what is in flight now is all
		// that can be in flight when the claim returns.
		busy := d.inFlight(nil)-len(cr.jobs) > 0
		if ctx.Err() != nil {
			// The shutdown began: claim nothing more. Read after busy, so
			// a claim never sees a dispatcher drained by the shutdown
			// itself (its cancelled handlers released) as idle, and takes
			// a suspect only to release it unstarted. The carried
			// completions go to the completer, which the shutdown flushes.
			d.enqueueCompletions(cr.groups)
			return
		}
		p.Limit, p.Now, p.Busy = limit, now, busy
		// The claim runs to its end even when the shutdown begins
		// meanwhile: a claim cancelled on the client may still commit on
		// the server, after the final OwnerRelinquish has looked, and a
		// lane-lease store would then keep the lanes it took until their
		// lease expires and charge what they had in flight an attempt.
		// What it returns once the shutdown has begun is released at
		// once (runJob). Bounded by the lease: a lease that outlives it
		// is worth nothing anyway.
		cctx, cancel := context.WithTimeout(d.writeCtx, d.cfg.LeaseDuration)
		claimStart := time.Now()
		var ds []*Delivery
		if len(cr.jobs) > 0 {
			ds, err = d.claimCarrying(cctx, cr, &p)
		} else {
			ds, err = d.store.DeliveryClaim(cctx, &p)
		}
		wake.claimed(claimStart, time.Now())
		cancel()
		if err == nil {
			claimErrors = 0
			d.stats.claims.Add(1)
		}
		// A store may fail part way and return what it did claim
		// (relaybus/mongo claims row by row): run those rather than let
		// their leases expire and cost an attempt. After the shutdown has
		// begun they are released at once.
		d.stats.claimed.Add(int64(len(ds)))
		suspect := d.startClaimed(ds, now, busy)
		if suspect != nil {
			d.runAlone(ctx, suspect)
		}
		switch {
		case err != nil:
			if ctx.Err() != nil {
				// The shutdown began and the claim failed on its own:
				// whatever it leased and committed, the final
				// OwnerRelinquish sees it and gives it back.
				return
			}
			claimErrors++
			wait := claimErrorDelay(claimErrors, d.cfg.PollInterval)
			d.log.Error("relaybus: claim failed", "error", err, "errors_in_a_row", claimErrors, "retry_in", wait)
			sleep(ctx, wait)
		case suspect != nil:
			// Resume at once: the claim was short only because a suspect
			// comes alone.
		case len(ds) < limit:
			d.idle(ctx, wake)
		}
	}
}

// claimLimit waits until handler slots are free and returns how many
// deliveries to claim, or false once ctx is done. A claim for one or two
// slots costs a store round trip like a full one: when most of a batch's
// slots are busy, it waits up to claimGatherMax for more to free up, so a
// busy dispatcher claims in batches rather than one delivery per finished
// handler.
func (d *dispatcher[TTx]) claimLimit(ctx context.Context) (int, bool) {
	want := min(d.cfg.BatchSize, d.cfg.Concurrency)
	var gatherUntil time.Time
	for ctx.Err() == nil {
		d.inflightMu.Lock()
		free := d.cfg.Concurrency - d.inflight
		d.inflightMu.Unlock()
		if free <= 0 {
			select {
			case <-d.freed:
			case <-ctx.Done():
			}
			continue
		}
		if free < (want+1)/2 {
			if gatherUntil.IsZero() {
				gatherUntil = time.Now().Add(claimGatherMax)
			}
			if wait := time.Until(gatherUntil); wait > 0 {
				t := time.NewTimer(wait)
				select {
				case <-d.freed:
				case <-t.C:
				case <-ctx.Done():
				}
				t.Stop()
				continue
			}
		}
		return min(d.cfg.BatchSize, free*d.perSlot), true
	}
	return 0, false
}

// idle waits after a claim that found less than it asked for: PollInterval,
// or less when a keyed delivery finishes or a wake-up comes meanwhile. A
// wake-up claims no sooner than the last claim took after it ended
// (wakeups.gap): wake-ups can come every few milliseconds, and on a
// loaded server a claim for each would return a few deliveries at the
// cost of a whole claim each. A keyed delivery that finishes during that
// gap claims at once, as it does without wake-ups: the gap holds back
// the claims wake-ups ask for, never the others.
func (d *dispatcher[TTx]) idle(ctx context.Context, wake *wakeups) {
	t := time.NewTimer(d.cfg.PollInterval)
	defer t.Stop()
	select {
	case <-t.C:
	case <-d.keyFreed:
	case <-wake.c:
		if gap := wake.gap(time.Now()); gap > 0 {
			g := time.NewTimer(gap)
			defer g.Stop()
			select {
			case <-g.C:
			case <-d.keyFreed:
			case <-ctx.Done():
			}
		}
	case <-ctx.Done():
	}
}

// startClaimed starts a job for each claimed delivery, except suspects. A
// suspect runs only alone: when the claim was not busy (nothing else in
// flight) and returned only suspects, the first one is held (its lease
// renewed) and returned, to be run alone. Any other suspect is released
// unstarted (a release spends no attempt and keeps it a suspect): held
// while anything else of this process is in flight, it would be charged
// if that crashed the process (docs/lane-protocol.md, variant
// SUSPECT_BUSY). A lane-lease store returns a suspect alone and never to a
// busy claim, so only a store that does not keep that rule makes this
// release anything.
//
// The deliveries of a batch handler (that are not suspects) are started in
// batches (startBatches).
func (d *dispatcher[TTx]) startClaimed(ds []*Delivery, claimedAt time.Time, busy bool) (suspect *job) {
	alone := !busy
	for _, del := range ds {
		if del != nil && !del.Suspect {
			alone = false // the others are started: the dispatcher is busy
		}
	}
	var batched []*job
	for _, del := range ds {
		j, h := d.accept(del, claimedAt)
		switch {
		case j == nil:
		case !del.Suspect && h.isBatch():
			d.hold(j)
			batched = append(batched, j)
		case !del.Suspect:
			d.hold(j)
			d.launch(j, h)
		case alone && suspect == nil:
			d.hold(j)
			suspect = j
		default:
			d.logJob(slog.LevelWarn, "relaybus: a suspect claimed beside other work; released to run alone later", j, nil)
			d.beginFinish(j)
			d.release(j)
		}
	}
	d.startBatches(batched)
	return suspect
}

// accept returns the job and handler of a claimed delivery, or nil for one
// this bus did not ask for (a store bug), which it releases: never run
// something we did not ask for.
func (d *dispatcher[TTx]) accept(del *Delivery, claimedAt time.Time) (*job, *handler[TTx]) {
	var h *handler[TTx]
	if del != nil {
		h = d.handlers[del.Handler]
	}
	if h == nil || del.ID == "" || del.LeaseToken == "" {
		d.log.Error("relaybus: claim returned a delivery this bus does not run", "delivery", del)
		if del != nil && del.ID != "" && del.LeaseToken != "" {
			j := d.newJob(del, claimedAt)
			d.beginFinish(j)
			d.release(j)
		}
		return nil, nil
	}
	return d.newJob(del, claimedAt), h
}

// hold records j's lease as held: renewed until its final write.
func (d *dispatcher[TTx]) hold(j *job) {
	d.mu.Lock()
	d.held[j.d.ID] = j
	d.mu.Unlock()
}

// launch takes a handler slot for j and hands its job to a worker. It
// never waits: a slot is taken only when one is free, and there are as
// many workers as slots.
func (d *dispatcher[TTx]) launch(j *job, h *handler[TTx]) {
	d.inflightMu.Lock()
	d.inflight++
	d.inflightMu.Unlock()
	d.work <- work[TTx]{j: j, h: h}
}

// work is a job, or a batch of jobs, handed to a worker.
type work[TTx any] struct {
	j     *job
	batch []*job // of a batch handler; j is nil then
	h     *handler[TTx]
	// until, for a batch: not run but given back, due then (holdBack).
	until time.Time
}

// worker runs jobs until the claim loop has stopped and every job handed
// to it has run. Concurrency workers live as long as the run: a goroutine
// per delivery cost its start and, on the completion hand-off, the growth
// of its small first stack (measured: a third of the dispatcher's time).
func (d *dispatcher[TTx]) worker(ctx context.Context) {
	for w := range d.work {
		switch {
		case w.batch != nil && !w.until.IsZero():
			d.holdBack(w.batch, w.until)
		case w.batch != nil:
			d.runBatch(ctx, w.batch, w.h)
		default:
			d.runJob(ctx, w.j, w.h)
		}
		d.freeSlot()
	}
}

// newJob is the job of a delivery claimed at claimedAt: its lease expires
// when the store says, or else a LeaseDuration after the claim.
func (d *dispatcher[TTx]) newJob(del *Delivery, claimedAt time.Time) *job {
	j := &job{d: del, expiresAt: del.LeaseExpiresAt}
	if j.expiresAt.IsZero() {
		j.expiresAt = claimedAt.Add(d.cfg.LeaseDuration)
	}
	return j
}

func (d *dispatcher[TTx]) freeSlot() {
	d.inflightMu.Lock()
	d.inflight--
	d.inflightMu.Unlock()
	signal(d.freed)
}
