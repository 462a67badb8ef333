package relaybus

import (
	"context"
	"time"
)

// The claim loop: leases due deliveries while handler slots are free, and
// starts a job for each.

// claimLoop claims up to min(BatchSize, free slots) deliveries at a time and
// starts a goroutine per delivery. A full batch is followed by another claim
// at once; a short one by PollInterval of rest.
func (d *dispatcher[TTx]) claimLoop(ctx context.Context) {
	claimErrors := 0
	// A claim for one or two slots costs a store round trip like a full
	// one: when most of a batch's slots are busy, wait up to claimGatherMax
	// for more to free up, so a busy dispatcher claims in batches rather
	// than one delivery per finished handler.
	want := min(d.cfg.BatchSize, d.cfg.Concurrency)
	var gatherUntil time.Time
	for ctx.Err() == nil {
		d.inflightMu.Lock()
		free := d.cfg.Concurrency - d.inflight
		d.inflightMu.Unlock()
		if free <= 0 {
			select {
			case <-d.slotFreed:
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
				case <-d.slotFreed:
				case <-t.C:
				case <-ctx.Done():
				}
				t.Stop()
				continue
			}
		}
		gatherUntil = time.Time{}
		limit := min(d.cfg.BatchSize, free)
		now := d.cfg.Now()
		ds, err := d.store.DeliveryClaim(ctx, &DeliveryClaimParams{
			Owner: d.cfg.Owner, Handlers: d.names, Limit: limit, LeaseDuration: d.cfg.LeaseDuration, Now: now,
		})
		if err != nil {
			// A store may fail part way and return what it did claim
			// (relaybus/mongo claims row by row): run those rather than
			// let their leases expire and cost an attempt. After the
			// shutdown has begun they are released at once.
			d.stats.claimed.Add(int64(len(ds)))
			for _, del := range ds {
				d.start(ctx, del, now)
			}
			if ctx.Err() != nil {
				// A claim cut short by the shutdown may still have leased
				// rows; the final OwnerRelinquish gives them back.
				return
			}
			claimErrors++
			wait := claimErrorDelay(claimErrors, d.cfg.PollInterval)
			d.log.Error("relaybus: claim failed", "error", err, "errors_in_a_row", claimErrors, "retry_in", wait)
			sleep(ctx, wait)
			continue
		}
		claimErrors = 0
		d.stats.claims.Add(1)
		d.stats.claimed.Add(int64(len(ds)))
		for _, del := range ds {
			d.start(ctx, del, now)
		}
		if len(ds) < limit {
			sleep(ctx, d.cfg.PollInterval)
		}
	}
}

// start takes a claimed delivery into the run and starts its job.
func (d *dispatcher[TTx]) start(ctx context.Context, del *Delivery, claimedAt time.Time) {
	var h *handler[TTx]
	if del != nil {
		h = d.handlers[del.Handler]
	}
	if h == nil || del.ID == "" || del.LeaseToken == "" {
		// A store bug; never run something we did not ask for.
		d.log.Error("relaybus: claim returned a delivery this bus does not run", "delivery", del)
		if del != nil && del.ID != "" && del.LeaseToken != "" {
			j := d.newJob(del, claimedAt)
			d.beginFinish(j)
			d.release(j)
		}
		return
	}
	j := d.newJob(del, claimedAt)
	d.mu.Lock()
	d.held[del.ID] = j
	d.mu.Unlock()
	d.inflightMu.Lock()
	d.inflight++
	d.inflightMu.Unlock()
	d.jobs.Add(1)
	go func() {
		defer d.jobs.Done()
		defer d.freeSlot()
		d.runJob(ctx, j, h)
	}()
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
	select {
	case d.slotFreed <- struct{}{}:
	default:
	}
}
