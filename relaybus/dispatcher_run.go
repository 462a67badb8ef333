package relaybus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"

	"github.com/berkcansavur/relaybus/relaybus/driver"
)

// Running a job: the handler call (plain or in a transaction), panics
// and timeouts, and the decision of what happens to the delivery.

// runJob runs the handler of one delivery and decides what happens to it.
func (d *dispatcher[TTx]) runJob(ctx context.Context, j *job, h *handler[TTx]) {
	if h.isBatch() {
		// A suspect of a batch handler, run alone: a batch of one.
		d.runBatch(ctx, []*job{j}, h)
		return
	}
	if ctx.Err() != nil {
		// Claimed but not started before the shutdown: give it back.
		if d.beginFinish(j) {
			d.release(j)
		}
		return
	}
	hctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	d.mu.Lock()
	j.cancel = cancel
	lost := j.lost
	d.mu.Unlock()
	if lost {
		return
	}
	runCtx := hctx
	if h.timeout > 0 {
		var cancelTimeout context.CancelFunc
		runCtx, cancelTimeout = context.WithTimeout(hctx, h.timeout)
		defer cancelTimeout()
	}
	if h.txFn != nil {
		d.runTx(ctx, runCtx, j, h)
		return
	}
	err := d.call(runCtx, j, chain(h.middleware, j.d, func(c context.Context) error { return h.fn(c, j.d) }))
	d.finish(ctx, runCtx, j, h, err)
}

// call runs fn, turning a panic into an error (counted and logged with its
// stack) and a context error after a timeout into a clear one.
func (d *dispatcher[TTx]) call(runCtx context.Context, j *job, fn func(context.Context) error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			d.stats.panics.Add(1)
			err = fmt.Errorf("relaybus: handler panicked: %v", p)
			d.logJob(slog.LevelError, "relaybus: handler panicked", j, err, "stack", string(debug.Stack()))
		}
	}()
	err = fn(runCtx)
	if err != nil && errors.Is(context.Cause(runCtx), context.DeadlineExceeded) && errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("relaybus: handler timed out: %w", err)
	}
	return err
}

// finish decides the fate of a delivery whose plain handler returned err.
func (d *dispatcher[TTx]) finish(ctx, runCtx context.Context, j *job, h *handler[TTx], err error) {
	if !d.beginFinish(j) {
		return
	}
	if err == nil {
		d.stats.succeeded.Add(1)
		d.complete(j)
		return
	}
	d.fail(ctx, runCtx, j, h, err)
}

// runTx runs a transactional handler: the handler's writes and the
// delivery's completion commit together or not at all.
func (d *dispatcher[TTx]) runTx(ctx, runCtx context.Context, j *job, h *handler[TTx]) {
	tx, err := d.store.TxBegin(runCtx)
	if err != nil {
		if d.beginFinish(j) {
			d.fail(ctx, runCtx, j, h, fmt.Errorf("relaybus: begin transaction: %w", err))
		}
		return
	}
	rollback := func() {
		c, cancel := context.WithTimeout(d.writeCtx, d.cfg.LeaseDuration)
		defer cancel()
		if rbErr := d.store.TxRollback(c, tx); rbErr != nil {
			d.logJob(slog.LevelWarn, "relaybus: rollback failed", j, rbErr)
		}
	}
	herr := d.call(runCtx, j, chain(h.middleware, j.d, func(c context.Context) error { return h.txFn(c, tx, j.d) }))
	if !d.beginFinish(j) {
		rollback()
		return
	}
	if herr != nil {
		rollback()
		d.fail(ctx, runCtx, j, h, herr)
		return
	}
	d.stats.succeeded.Add(1)
	if err := d.beforeComplete([]*job{j}); err != nil {
		// Rolled back before the release: the handler's writes must not
		// commit for a delivery that runs again.
		rollback()
		d.release(j)
		return
	}
	c, cancel := context.WithTimeout(d.writeCtx, d.cfg.LeaseDuration)
	defer cancel()
	ok, err := d.store.DeliveryCompleteTx(c, tx, &driver.DeliveryCompleteParams{Lease: j.d.Lease(), Now: d.cfg.Now()})
	if err != nil || !ok {
		rollback()
		if err != nil {
			d.fail(ctx, runCtx, j, h, fmt.Errorf("relaybus: complete in transaction: %w", err))
			return
		}
		d.done(j, "complete", false, nil, nil)
		return
	}
	if err := d.store.TxCommit(c, tx); err != nil {
		// The outcome is unknown. A reschedule is fenced: if the commit went
		// through, the delivery is completed and the reschedule does nothing.
		d.fail(ctx, runCtx, j, h, fmt.Errorf("relaybus: commit: %w", err))
		return
	}
	d.done(j, "complete", true, nil, &d.stats.completed)
}
