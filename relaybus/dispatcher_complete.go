package relaybus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/berkcansavur/relaybus/relaybus/batch"
	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

// Completing successes: in batches (DeliveryCompleteMany, grouped by
// relaybus/batch) or one at a time, after Config.BeforeComplete has seen
// them.

// completionsInFlight is how many completion batches are written at once:
// one, as a single completer would. While it is written the next batch
// fills, so batches grow with the store's latency.
const completionsInFlight = 1

// newCompleter returns the batcher that groups successes into
// DeliveryCompleteMany calls, or nil when completion batching is Disabled.
// A batch is written when CompletionBatchWindow has passed since its first
// success joined it, or as soon as it holds CompletionBatchMax.
//
// An item is a group of jobs (one success, or a keyed batch's prefix,
// completeGroup) weighing as many: a batch takes whole groups, at most
// CompletionBatchMax jobs unless one group alone holds more (a batch
// always takes one item), so a group's completions are one write.
func (d *dispatcher[TTx]) newCompleter() (*batch.Batcher[[]*job, struct{}], error) {
	if d.cfg.CompletionBatchWindow == Disabled {
		return nil, nil
	}
	linger := d.cfg.CompletionBatchWindow
	if driver.ClaimsCompletions(d.store) {
		// Successes wait for a claim to carry them first, for as long
		// (dispatcher_carry.go): what reaches the completer has waited.
		linger = 0
	}
	b, err := batch.New(batch.Config[[]*job]{
		MaxSize:   d.cfg.CompletionBatchMax,
		MaxWeight: int64(d.cfg.CompletionBatchMax),
		// A group heavier than a whole batch weighs a whole batch: the
		// batcher admits no item over MaxWeight (batch.ErrWeight), and a
		// keyed run's successes may outnumber CompletionBatchMax
		// (BatchOptions.MaxSize and MaxCalls go to driver.MaxKeyRun). So
		// weighed, it is a batch alone.
		Weigh:       func(js []*job) int64 { return int64(min(len(js), d.cfg.CompletionBatchMax)) },
		Linger:      linger,
		MaxInFlight: completionsInFlight,
		MaxQueued:   d.cfg.CompletionBatchMax,
		WhenFull:    batch.Block,
	}, d.completeGroups)
	if err != nil {
		return nil, fmt.Errorf("relaybus: completion batching: %w", err)
	}
	return b, nil
}

// complete completes a delivery whose plain handler succeeded. With
// batching it hands the job to the completer and returns: the job's
// outcome is accounted by completeBatch. The hand-off waits while the
// completer's queue is full, keeping the handler's slot, which holds back
// claims.
func (d *dispatcher[TTx]) complete(j *job) {
	if d.completer == nil {
		d.completeOne(j)
		return
	}
	d.completeGroup([]*job{j})
}

// completeGroup hands the successes js to the completer as one group,
// written in one DeliveryCompleteMany call whatever else joins it (the
// prefix of a keyed batch must be recorded all at once). Without the
// completer (completion batching Disabled) the group is written at once,
// on its own.
func (d *dispatcher[TTx]) completeGroup(js []*job) {
	if d.completer == nil {
		_, _ = d.completeBatch(d.writeCtx, js)
		return
	}
	if d.carryAdd(js) {
		return
	}
	d.enqueueCompletions([][]*job{js})
}

// enqueueCompletions hands each group of successes to the completer.
func (d *dispatcher[TTx]) enqueueCompletions(groups [][]*job) {
	for _, js := range groups {
		if err := d.completer.Enqueue(d.writeCtx, js); err != nil {
			// Only after the completer closed, which the shutdown does once
			// every job has ended, or for an item it cannot hold (a group
			// heavier than its MaxWeight, which Weigh rules out): a bug,
			// reported like a failed write.
			for _, j := range js {
				d.done(j, "complete", false, err, nil)
			}
		}
	}
}

// completeGroups is the completer's batch function: the groups' jobs in
// one completeBatch.
func (d *dispatcher[TTx]) completeGroups(ctx context.Context, groups [][]*job) ([]struct{}, error) {
	var js []*job
	for _, g := range groups {
		js = append(js, g...)
	}
	if _, err := d.completeBatch(ctx, js); err != nil {
		return nil, err
	}
	return make([]struct{}, len(groups)), nil
}

// completeBatch writes the completions of js: BeforeComplete, then one
// DeliveryCompleteMany call, then the outcome of every job (nobody waits
// for the batcher's results).
func (d *dispatcher[TTx]) completeBatch(_ context.Context, js []*job) (_ []struct{}, err error) {
	var oks []bool // one per job once the write succeeded
	defer func() {
		if p := recover(); p != nil {
			// Every job must still get its outcome, or its lease would be
			// held and renewed for ever.
			err = fmt.Errorf("relaybus: completing a batch panicked: %v", p)
		}
		if errors.Is(err, errNotRecorded) {
			for _, j := range js {
				d.release(j)
			}
			return
		}
		for i, j := range js {
			d.done(j, "complete", err == nil && oks[i], err, &d.stats.completed)
		}
	}()
	if err := d.beforeComplete(unapproved(js)); err != nil {
		return nil, err
	}
	leases := make([]relaytype.Lease, len(js))
	for i, j := range js {
		leases[i] = j.d.Lease()
	}
	now := d.cfg.Now()
	err = d.write(func() time.Time { return d.deadlineOf(js...) }, func(c context.Context) (e error) {
		oks, e = d.store.DeliveryCompleteMany(c, &driver.DeliveryCompleteManyParams{Leases: leases, Now: now})
		return e
	})
	if err == nil && len(oks) != len(js) {
		err = fmt.Errorf("relaybus: store returned %d results for %d completions", len(oks), len(js))
	}
	if err != nil {
		return nil, err
	}
	// Zero-size results: they cost no memory, and the batcher checks
	// their count.
	return make([]struct{}, len(js)), nil
}

// completeOne completes one delivery alone (completion batching disabled).
func (d *dispatcher[TTx]) completeOne(j *job) {
	if err := d.beforeComplete([]*job{j}); err != nil {
		d.release(j)
		return
	}
	d.finalWrite(j, "complete", &d.stats.completed, func(c context.Context, l relaytype.Lease, now time.Time) (bool, error) {
		return d.store.DeliveryComplete(c, &driver.DeliveryCompleteParams{Lease: l, Now: now})
	})
}

// errNotRecorded marks a completion that Config.BeforeComplete refused:
// its deliveries were handled but not recorded, so they are released to
// run again.
var errNotRecorded = errors.New("relaybus: BeforeComplete failed")

// beforeComplete calls Config.BeforeComplete with the deliveries of js. Its
// error (or panic) is logged once for the batch and returned wrapping
// errNotRecorded; the callers release the deliveries.
func (d *dispatcher[TTx]) beforeComplete(js []*job) error {
	if d.cfg.BeforeComplete == nil || len(js) == 0 {
		return nil
	}
	for _, j := range js {
		j.approved = true
	}
	ds := make([]*Delivery, len(js))
	for i, j := range js {
		ds[i] = j.d
	}
	err := func() (err error) {
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("relaybus: BeforeComplete panicked: %v", p)
			}
		}()
		return d.cfg.BeforeComplete(d.writeCtx, ds)
	}()
	if err == nil {
		return nil
	}
	d.log.Error("relaybus: BeforeComplete failed; releasing", "deliveries", len(js), "error", err)
	return fmt.Errorf("%w: %w", errNotRecorded, err)
}

// unapproved returns the jobs of js that Config.BeforeComplete has not
// seen (all of them, but for completions written again after a claim
// that carried them failed).
func unapproved(js []*job) []*job {
	out := js[:0:0]
	for _, j := range js {
		if !j.approved {
			out = append(out, j)
		}
	}
	return out
}
