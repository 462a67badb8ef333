package relaybus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

// The final writes of a delivery (reschedule, bury, release; complete in
// dispatcher_complete.go): fenced by the lease, retried until the lease
// would expire, and accounted.

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
	text := driver.TruncateError(err.Error())
	if IsPermanent(err) || j.d.Attempts >= budget {
		buried := d.finalWrite(j, "bury", &d.stats.buried, func(c context.Context, l relaytype.Lease, now time.Time) (bool, error) {
			return d.store.DeliveryBury(c, &driver.DeliveryBuryParams{Lease: l, Error: text, Now: now})
		})
		if buried {
			d.logJob(slog.LevelWarn, "relaybus: delivery buried (dead letter)", j, err, "permanent", IsPermanent(err))
		}
		return
	}
	delay := d.retry.delay(j.d.Attempts)
	rescheduled := d.finalWrite(j, "reschedule", &d.stats.rescheduled, func(c context.Context, l relaytype.Lease, now time.Time) (bool, error) {
		return d.store.DeliveryReschedule(c, &driver.DeliveryRescheduleParams{Lease: l, Error: text, AvailableAt: now.Add(delay), Now: now})
	})
	if rescheduled {
		d.logJob(slog.LevelWarn, "relaybus: delivery failed; rescheduled", j, err, "retry_in", delay)
	}
}

// release gives a delivery back without spending an attempt. j is
// finishing (see beginFinish).
func (d *dispatcher[TTx]) release(j *job) {
	d.finalWrite(j, "release", &d.stats.released, func(c context.Context, l relaytype.Lease, now time.Time) (bool, error) {
		return d.store.DeliveryRelease(c, &driver.DeliveryReleaseParams{Lease: l, Now: now})
	})
}

// finalWrite makes the final write of the finishing job j, one fenced
// store call (fn) retried by write, accounts it (done), and reports
// whether the store took it.
func (d *dispatcher[TTx]) finalWrite(j *job, what string, counter *atomic.Int64, fn func(ctx context.Context, l relaytype.Lease, now time.Time) (bool, error)) bool {
	now := d.cfg.Now()
	var ok bool
	err := d.write(func() time.Time { return d.deadlineOf(j) }, func(c context.Context) (e error) {
		ok, e = fn(c, j.d.Lease(), now)
		return e
	})
	d.done(j, what, ok, err, counter)
	return err == nil && ok
}

// beginFinish marks j as finishing, unless its lease was lost (then nothing
// more is written for it). Its final write is retried until its lease
// expires: beginFinish sets that deadline, on the real clock (timers run
// on real time, Config.Now may not), and each renewal of the lease moves
// it.
func (d *dispatcher[TTx]) beginFinish(j *job) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if j.lost {
		return false
	}
	j.finishing = true
	j.deadline = realDeadline(j.expiresAt, d.cfg.Now())
	return true
}

// realDeadline is the real-clock time of expiresAt, a time by Config.Now,
// whose clock reads now.
func realDeadline(expiresAt, now time.Time) time.Time {
	return time.Now().Add(expiresAt.Sub(now))
}

// deadlineOf is the current deadline of the finishing job j.
func (d *dispatcher[TTx]) deadlineOf(js ...*job) time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	deadline := js[0].deadline
	for _, j := range js[1:] {
		if j.deadline.Before(deadline) {
			deadline = j.deadline
		}
	}
	return deadline
}

// write makes a final write until it succeeds or fails for good
// (ErrInvalid), retrying with backoff while the lease it is made under
// holds: a database restart takes seconds, and a completion given up
// before the database is back makes finished work run again. The first try
// is always made (a late write is fenced by the store) and bounded by
// LeaseDuration; a retry is made only while it can start before the
// deadline (read again before each retry: a renewal moves it), after a
// backoff of at most half the time left, and its context ends at the
// deadline. Past it another worker may hold the delivery: the write is
// given up, the delivery runs again (at-least-once).
func (d *dispatcher[TTx]) write(deadlineOf func() time.Time, fn func(context.Context) error) error {
	end := time.Now().Add(d.cfg.LeaseDuration)
	for try := 1; ; try++ {
		c, cancel := context.WithDeadline(d.writeCtx, end)
		err := fn(c)
		cancel()
		if err == nil || errors.Is(err, ErrInvalid) {
			return err
		}
		// Back off, but never past half of what is left of the lease: a
		// renewed lease moves the deadline, and the next try must still
		// start before it.
		left := time.Until(deadlineOf())
		if left <= writeRetryDelayMin {
			return fmt.Errorf("relaybus: given up after %d tries, before the lease expires: %w", try, err)
		}
		time.Sleep(min(retryDelay(try, writeRetryDelayMin, writeRetryDelayMax, writeRetryJitter, rand.Float64()), left/2))
		// A retry's context ends when the lease expires (a renewal during
		// the sleep has moved it), so no retry acts past the lease, however
		// late the sleep returned.
		end = deadlineOf()
		if !time.Now().Before(end) {
			return fmt.Errorf("relaybus: given up after %d tries, the lease expired: %w", try, err)
		}
	}
}

// done records the outcome of the final write of j and forgets its lease.
func (d *dispatcher[TTx]) done(j *job, what string, ok bool, err error, counter *atomic.Int64) {
	d.mu.Lock()
	if d.held[j.d.ID] == j {
		delete(d.held, j.d.ID)
	}
	d.mu.Unlock()
	signal(d.freed) // a suspect may be waiting for the others to end
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
		if j.d.Key != "" && (what == "complete" || what == "bury") && !j.carried {
			// The key's next delivery may be due now: claim at once
			// (a carried completion's claim has already looked).
			signal(d.keyFreed)
		}
	}
	d.afterFinish(j, what, ok, err)
}

// afterFinish calls Config.AfterFinish with how j ended (done's what, ok
// and err); a panic is logged.
func (d *dispatcher[TTx]) afterFinish(j *job, what string, ok bool, err error) {
	if d.cfg.AfterFinish == nil {
		return
	}
	f := Finish{Delivery: j.d, Err: err}
	switch {
	case err != nil:
		f.Outcome = FinishWriteFailed
	case !ok:
		f.Outcome = FinishLeaseLost
	default:
		f.Outcome = finishOutcomes[what]
	}
	defer func() {
		if p := recover(); p != nil {
			d.logJob(slog.LevelError, "relaybus: AfterFinish panicked", j, nil, "panic", fmt.Sprint(p))
		}
	}()
	d.cfg.AfterFinish(d.writeCtx, f)
}

// finishOutcomes are the outcomes of done's final writes that the store
// took.
var finishOutcomes = map[string]FinishOutcome{
	"complete": FinishCompleted, "reschedule": FinishRescheduled, "bury": FinishBuried, "release": FinishReleased,
}

// signal wakes the one receiver of a channel of capacity 1 without
// blocking; a token already there is enough.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
