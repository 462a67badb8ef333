package relaybus

import (
	"context"
	"errors"
	"log/slog"
	"time"
)

// The final writes of a delivery (reschedule, bury, release; complete in
// dispatcher_complete.go): fenced by the lease, retried, and accounted.

// fail handles a failed attempt: released if the shutdown aborted it, else
// buried (Permanent, or budget spent) or rescheduled with backoff.
func (d *dispatcher[TTx]) fail(ctx, runCtx context.Context, j *job, h *handler[TTx], err error) {
	if ctx.Err() != nil && runCtx.Err() != nil && !IsPermanent(err) {
		// Aborted by the shutdown: no attempt spent.
		d.release(j)
		return
	}
	d.stats.failed.Add(1)
	budget := j.d.MaxAttempts
	if budget <= 0 {
		budget = h.maxAttempts
	}
	text := TruncateError(err.Error())
	now := d.cfg.Now()
	if IsPermanent(err) || j.d.Attempts >= budget {
		var ok bool
		werr := d.write(func(c context.Context) (e error) {
			ok, e = d.store.DeliveryBury(c, &DeliveryBuryParams{Lease: j.d.Lease(), Error: text, Now: now})
			return e
		})
		d.done(j, "bury", ok, werr, &d.stats.buried)
		if werr == nil && ok {
			d.logJob(slog.LevelWarn, "relaybus: delivery buried (dead letter)", j, err, "permanent", IsPermanent(err))
		}
		return
	}
	delay := d.retry.delay(j.d.Attempts)
	var ok bool
	werr := d.write(func(c context.Context) (e error) {
		ok, e = d.store.DeliveryReschedule(c, &DeliveryRescheduleParams{Lease: j.d.Lease(), Error: text, AvailableAt: now.Add(delay), Now: now})
		return e
	})
	d.done(j, "reschedule", ok, werr, &d.stats.rescheduled)
	if werr == nil && ok {
		d.logJob(slog.LevelWarn, "relaybus: delivery failed; rescheduled", j, err, "retry_in", delay)
	}
}

// release gives a delivery back without spending an attempt.
func (d *dispatcher[TTx]) release(j *job) {
	now := d.cfg.Now()
	var ok bool
	werr := d.write(func(c context.Context) (e error) {
		ok, e = d.store.DeliveryRelease(c, &DeliveryReleaseParams{Lease: j.d.Lease(), Now: now})
		return e
	})
	d.done(j, "release", ok, werr, &d.stats.released)
}

// write runs a finishing store write, retrying it up to maxWriteAttempts
// times. Each try is bounded by the lease duration: past it, the lease has
// expired anyway.
func (d *dispatcher[TTx]) write(fn func(context.Context) error) error {
	var err error
	for i := range maxWriteAttempts {
		if i > 0 {
			time.Sleep(writeRetryDelay << (i - 1))
		}
		c, cancel := context.WithTimeout(d.writeCtx, d.cfg.LeaseDuration)
		err = fn(c)
		cancel()
		if err == nil || errors.Is(err, ErrInvalid) {
			return err
		}
	}
	return err
}

// done records the outcome of the final write of j and forgets its lease.
func (d *dispatcher[TTx]) done(j *job, what string, ok bool, err error, counter interface{ Add(int64) int64 }) {
	d.mu.Lock()
	if d.held[j.d.ID] == j {
		delete(d.held, j.d.ID)
	}
	d.mu.Unlock()
	switch {
	case err != nil:
		d.logJob(slog.LevelError, "relaybus: "+what+" failed; the lease will expire and the delivery run again", j, err)
	case !ok:
		d.stats.leasesLost.Add(1)
		d.logJob(slog.LevelWarn, "relaybus: lease lost before "+what, j, nil)
	default:
		if counter != nil {
			counter.Add(1)
		}
	}
}
