package relaybus

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"time"

	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

// Batches: the deliveries of a batch handler (HandleBatch) that a claim
// returned, run in as few calls as the rules allow. A keyed batch is the
// run of one key the store gave with its head (driver.KeyRun): the
// claim hands out a key's deliveries only while nothing of the key is in
// flight, so while a batch of a key runs no other batch of it is claimed,
// here or anywhere (the lane is leased to this dispatcher). Every
// delivery of a batch keeps its own job: its lease is held and renewed,
// and it ends with its own final write, as a single delivery's does.

// startBatches launches the held jobs js of batch handlers in batches:
// keyed ones per (handler, key), the key's run in sequence order as one
// piece of work (a store returns at most the handler's batchRun of it),
// whose calls of up to MaxSize run one after another (runBatch; two
// pieces of work would put two batches of one key in flight); unkeyed
// ones per handler, MaxSize at a time.
func (d *dispatcher[TTx]) startBatches(js []*job) {
	if len(js) == 0 {
		return
	}
	type groupKey struct{ handler, key string }
	groups := map[groupKey][]*job{}
	var order []groupKey
	for _, j := range js {
		k := groupKey{j.d.Handler, j.d.Key}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], j)
	}
	now := d.cfg.Now()
	for _, k := range order {
		g, h := groups[k], d.handlers[k.handler]
		if k.key != "" {
			slices.SortFunc(g, func(a, b *job) int { return cmp.Compare(a.d.Sequence, b.d.Sequence) })
			d.launchBatch(g, h, d.fillTime(g, h, now))
			continue
		}
		for start := 0; start < len(g); start += h.batchMax {
			part := g[start:min(start+h.batchMax, len(g))]
			d.launchBatch(part, h, d.fillTime(part, h, now))
		}
	}
}

// fillTime is when the batch js of h is to run instead of now, to fill
// (BatchOptions.MaxWait), or zero to run it now: it is shorter than
// MaxSize, and its oldest delivery was published less than MaxWait
// before now. A batch holding a retry (an attempt after the first) runs
// now, and so does a keyed one when the store cannot claim a key's run
// (it would never grow). The wait counts from the publish, which a
// release leaves as it was, so the claim once that time has passed runs
// the batch. A keyed batch's later deliveries wait behind its head; an
// unkeyed batch is due with the one of its handler given back before it
// when that is due sooner (unkeyedFill), so that they are claimed as one
// batch. Called by the claim loop only.
func (d *dispatcher[TTx]) fillTime(js []*job, h *handler[TTx], now time.Time) time.Time {
	if h.batchWait <= 0 || len(js) >= h.batchMax || (js[0].d.Key != "" && !d.keyRuns) {
		return time.Time{}
	}
	oldest := js[0].d.EventCreatedAt
	for _, j := range js {
		if j.d.Attempts > 1 {
			return time.Time{}
		}
		if j.d.EventCreatedAt.Before(oldest) {
			oldest = j.d.EventCreatedAt
		}
	}
	if oldest.IsZero() {
		return time.Time{}
	}
	until := oldest.Add(h.batchWait)
	if !until.After(now) {
		return time.Time{}
	}
	if js[0].d.Key == "" {
		if u := d.unkeyedFill[h.name]; u.After(now) && u.Before(until) {
			return u
		}
		d.unkeyedFill[h.name] = until
	}
	return until
}

// launchBatch takes a handler slot for the batch js and hands it to a
// worker (see launch), to run, or, with until set, to give back due then
// (holdBack).
func (d *dispatcher[TTx]) launchBatch(js []*job, h *handler[TTx], until time.Time) {
	d.inflightMu.Lock()
	d.inflight++
	d.inflightMu.Unlock()
	d.work <- work[TTx]{batch: js, h: h, until: until}
}

// holdBack gives the batch js back without running it, spending no
// attempt, due again at until (BatchOptions.MaxWait): the claim after
// that takes it with what arrived meanwhile. Every delivery is given
// back due at until, so a keyed batch's head, and the key behind it,
// waits whatever order the writes land in (a key is not claimed while any
// of it is in flight). A lease found lost writes nothing more for that
// delivery, as at any final write.
func (d *dispatcher[TTx]) holdBack(js []*job, until time.Time) {
	for _, j := range js {
		if !d.beginFinish(j) {
			continue
		}
		if d.finalWrite(j, "release", &d.stats.released, func(c context.Context, l relaytype.Lease, now time.Time) (bool, error) {
			return d.store.DeliveryRelease(c, &driver.DeliveryReleaseParams{Lease: l, Now: now, AvailableAt: until})
		}) {
			d.stats.heldBack.Add(1)
		}
	}
}

// runBatch runs the batch handler of js: unkeyed deliveries in one call,
// or one key's run in sequence order in calls of up to MaxSize, each after
// the one before succeeded in full (BatchOptions.MaxCalls), and decides
// what happens to each delivery.
func (d *dispatcher[TTx]) runBatch(ctx context.Context, js []*job, h *handler[TTx]) {
	if ctx.Err() != nil {
		// Claimed but not started before the shutdown: give them back.
		for _, j := range js {
			if d.beginFinish(j) {
				d.release(j)
			}
		}
		return
	}
	hctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	// One context for the run: a lease lost cancels the call under way.
	d.mu.Lock()
	for _, j := range js {
		j.cancel = cancel
	}
	d.mu.Unlock()
	errs := make([]error, len(js))
	if d.anyLost(js) {
		// Lost before it started: run nothing, give back what is still
		// held (the lost ones are written no more).
		for i := range errs {
			errs[i] = errLeaseLost
		}
		d.finishBatch(ctx, hctx, js, h, errs, true)
		return
	}
	ds := make([]*Delivery, len(js))
	for i, j := range js {
		ds[i] = j.d
	}
	runCtx, stopLast := hctx, context.CancelFunc(func() {})
	for start := 0; start < len(js); start += h.batchMax {
		end := min(start+h.batchMax, len(js))
		if start > 0 && (ctx.Err() != nil || d.anyLost(js[start:end])) {
			// Shut down or taken over between two calls: the rest of the
			// run is given back, or written no more.
			notRun(errs[start:])
			break
		}
		var stop context.CancelFunc = func() {}
		runCtx = hctx
		if h.timeout > 0 {
			runCtx, stop = context.WithTimeout(hctx, h.timeout)
		}
		if h.batchTxFn != nil {
			committed := d.runBatchTx(ctx, runCtx, js[start:end], h, ds[start:end])
			stop()
			if !committed {
				// runBatchTx ended this call's deliveries; the rest wait.
				for _, j := range js[end:] {
					if d.beginFinish(j) {
						d.release(j)
					}
				}
				return
			}
			continue
		}
		part := ds[start:end]
		got := d.callBatch(runCtx, js[start:end], part, func(c context.Context) []error { return h.batchFn(c, js[0].d.Key, part) })
		copy(errs[start:end], got)
		if slices.ContainsFunc(got, func(err error) bool { return err != nil }) {
			notRun(errs[end:])
			// finishBatch reads the call's context (a timeout, a
			// shutdown): it is stopped after it.
			stopLast = stop
			break
		}
		stop()
	}
	if h.batchTxFn == nil {
		d.finishBatch(ctx, runCtx, js, h, errs, false)
	}
	stopLast()
}

// errNotRun marks the deliveries of a key's run after a call that did
// not succeed in full, or after a shutdown or a takeover between two
// calls: the handler never saw them, and they are given back.
var errNotRun = errors.New("relaybus: not run: an earlier call of the run did not succeed")

// notRun marks every delivery of errs as not run (errNotRun).
func notRun(errs []error) {
	for i := range errs {
		errs[i] = errNotRun
	}
}

// anyLost reports whether the lease of any job of js is lost.
func (d *dispatcher[TTx]) anyLost(js []*job) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.ContainsFunc(js, func(j *job) bool { return j.lost })
}

// callBatch calls the batch handler, turning a panic, a timeout and a
// result of the wrong length into an error for every delivery. nil: all
// succeeded.
func (d *dispatcher[TTx]) callBatch(runCtx context.Context, js []*job, ds []*Delivery, call func(context.Context) []error) (errs []error) {
	all := func(err error) []error {
		out := make([]error, len(ds))
		for i := range out {
			out[i] = err
		}
		return out
	}
	defer func() {
		if p := recover(); p != nil {
			d.stats.panics.Add(1)
			err := fmt.Errorf("relaybus: batch handler panicked: %v", p)
			d.logJob(slog.LevelError, "relaybus: batch handler panicked", js[0], err, "batch", len(js), "stack", string(debug.Stack()))
			errs = all(err)
		}
	}()
	errs = call(runCtx)
	if errs != nil && len(errs) != len(ds) {
		return all(fmt.Errorf("relaybus: batch handler returned %d results for %d deliveries", len(errs), len(ds)))
	}
	timedOut := errors.Is(context.Cause(runCtx), context.DeadlineExceeded)
	for i, err := range errs {
		if err != nil && timedOut && errors.Is(err, context.DeadlineExceeded) {
			errs[i] = fmt.Errorf("relaybus: batch handler timed out: %w", err)
		}
	}
	return errs
}

// finishBatch decides the fate of each delivery of a batch whose handler
// returned errs (one per job). notRun: the handler was not called.
//
// Keyed (one key's run, in sequence order): the prefix before the first
// failure, or before the first delivery whose lease is lost, is completed
// all at once (completeNow); the failed delivery is rescheduled or buried; the rest are
// released, spending no attempt. The key's next claim then starts at the
// failed one, which blocks the others until it succeeds or is buried:
// nothing of the key is completed out of order.
//
// Unkeyed: each success is completed as a single delivery's is (through
// the completer), and each failure is rescheduled or buried on its own.
func (d *dispatcher[TTx]) finishBatch(ctx, runCtx context.Context, js []*job, h *handler[TTx], errs []error, notRun bool) {
	keyed := js[0].d.Key != ""
	var ok []*job
	if !keyed {
		for i, j := range js {
			switch {
			case !d.beginFinish(j):
			case notRun:
				d.release(j)
			case errs[i] == nil:
				ok = append(ok, j)
			default:
				d.fail(ctx, runCtx, j, h, errs[i])
			}
		}
		// Independent deliveries: each joins the completer's batches as a
		// single success does.
		d.stats.succeeded.Add(int64(len(ok)))
		for _, j := range ok {
			d.complete(j)
		}
		return
	}
	cut := len(js)
	for i, j := range js {
		if notRun || errs[i] != nil || !d.beginFinish(j) {
			cut = i
			break
		}
		ok = append(ok, j)
	}
	d.completeNow(ok)
	if cut == len(js) {
		return
	}
	skipped := notRun || errors.Is(errs[cut], errNotRun)
	if j := js[cut]; errs[cut] != nil && !skipped && d.beginFinish(j) {
		d.fail(ctx, runCtx, j, h, errs[cut])
	} else if skipped && d.beginFinish(j) {
		d.release(j)
	}
	for _, j := range js[cut+1:] {
		if d.beginFinish(j) {
			d.release(j)
		}
	}
}

// completeNow completes the finishing jobs js, the successful prefix of a
// keyed batch, as one group of the completer (completeGroup): written in
// one DeliveryCompleteMany call, never split over two, so that a key's
// prefix is recorded all at once, or a later delivery of the key could be
// completed while an earlier one, whose write failed, runs again after
// it.
func (d *dispatcher[TTx]) completeNow(js []*job) {
	if len(js) == 0 {
		return
	}
	d.stats.succeeded.Add(int64(len(js)))
	d.completeGroup(js)
}

// runBatchTx runs a transactional batch handler (HandleBatchTx) on one
// call's deliveries: the handler's writes and the completion of every
// delivery of the batch commit in one transaction, or none of them does.
// Any failure rolls it back (failBatchTx says what happens to each
// delivery then). It reports whether the transaction committed, every
// delivery of js completed.
func (d *dispatcher[TTx]) runBatchTx(ctx, runCtx context.Context, js []*job, h *handler[TTx], ds []*Delivery) bool {
	tx, err := d.store.TxBegin(runCtx)
	if err != nil {
		d.failBatchTx(ctx, runCtx, js, h, failEach(len(js), fmt.Errorf("relaybus: begin transaction: %w", err)))
		return false
	}
	rollback := func() {
		c, cancel := context.WithTimeout(d.writeCtx, d.cfg.LeaseDuration)
		defer cancel()
		if rbErr := d.store.TxRollback(c, tx); rbErr != nil {
			d.logJob(slog.LevelWarn, "relaybus: rollback failed", js[0], rbErr, "batch", len(js))
		}
	}
	errs := d.callBatch(runCtx, js, ds, func(c context.Context) []error { return h.batchTxFn(c, tx, js[0].d.Key, ds) })
	if slices.ContainsFunc(errs, func(err error) bool { return err != nil }) {
		rollback()
		d.failBatchTx(ctx, runCtx, js, h, errs)
		return false
	}
	var held []*job
	for _, j := range js {
		if d.beginFinish(j) {
			held = append(held, j)
		}
	}
	if len(held) < len(js) {
		// A lease was lost while the handler ran: nothing may commit.
		rollback()
		for _, j := range held {
			d.release(j)
		}
		return false
	}
	d.stats.succeeded.Add(int64(len(js)))
	if err := d.beforeComplete(js); err != nil {
		rollback()
		for _, j := range js {
			d.release(j)
		}
		return false
	}
	c, cancel := context.WithTimeout(d.writeCtx, d.cfg.LeaseDuration)
	defer cancel()
	for i, j := range js {
		ok, err := d.store.DeliveryCompleteTx(c, tx, &driver.DeliveryCompleteParams{Lease: j.d.Lease(), Now: d.cfg.Now()})
		if err == nil && ok {
			continue
		}
		rollback()
		if err != nil {
			d.fail(ctx, runCtx, j, h, fmt.Errorf("relaybus: complete in transaction: %w", err))
		} else {
			d.done(j, "complete", false, nil, nil)
		}
		for _, o := range slices.Concat(js[:i], js[i+1:]) {
			d.release(o)
		}
		return false
	}
	if err := d.store.TxCommit(c, tx); err != nil {
		// The outcome is unknown. The writes that follow are fenced: if
		// the commit went through, the deliveries are completed and they
		// do nothing.
		err = fmt.Errorf("relaybus: commit: %w", err)
		if js[0].d.Key != "" {
			d.fail(ctx, runCtx, js[0], h, err)
			for _, j := range js[1:] {
				d.release(j)
			}
			return false
		}
		for _, j := range js {
			d.fail(ctx, runCtx, j, h, err)
		}
		return false
	}
	for _, j := range js {
		d.done(j, "complete", true, nil, &d.stats.completed)
	}
	return true
}

// failBatchTx ends the deliveries of a transactional batch whose
// transaction rolled back because of errs: in a keyed batch the first
// failed delivery is retried (or buried) and every other one released; in
// an unkeyed batch each failed delivery is retried (or buried) and each
// other one released. A release spends no attempt: those deliveries run
// again, the ones before a keyed failure first.
func (d *dispatcher[TTx]) failBatchTx(ctx, runCtx context.Context, js []*job, h *handler[TTx], errs []error) {
	keyed := js[0].d.Key != ""
	failedOne := false
	for i, j := range js {
		if !d.beginFinish(j) {
			continue
		}
		if errs[i] != nil && (!keyed || !failedOne) {
			failedOne = true
			d.fail(ctx, runCtx, j, h, errs[i])
			continue
		}
		d.release(j)
	}
}

// failEach is a batch result of err for each of n deliveries.
func failEach(n int, err error) []error {
	errs := make([]error, n)
	for i := range errs {
		errs[i] = err
	}
	return errs
}
