package relaybus

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/berkcansavur/relaybus/relaybus/driver"
)

// Wake-ups: when the store offers them (driver.Waker), a running
// dispatcher listens for them on a goroutine of its own, and each one
// makes an idle claim loop claim at once instead of at its next poll. A
// wake-up is a hint: the poll still finds everything, so the listener
// only ever shortens a wait. It reconnects with a backoff when its
// connection is lost, and after every (re)connect the claim loop claims
// at once, for whatever was announced while nobody listened. Where the
// store finds that wake-ups cannot work (a pooler without sessions) it
// says so once and tries again rarely, in case that was a passing fault.

// Bounds of the wake-up listener.
const (
	// wakeRetryMin and wakeRetryMax bound the wait before listening again
	// after the listener's connection failed: doubled per failure in a
	// row, so that a database that is down is not hammered, and one that
	// is back is heard from within seconds.
	wakeRetryMin = 100 * time.Millisecond
	wakeRetryMax = 10 * time.Second
	// wakeRetryJitter spreads those waits, so that the listeners of many
	// processes cut off together do not reconnect together.
	wakeRetryJitter = 0.2
	// wakeUnavailableRetry is the wait before trying again after the
	// store found that wake-ups cannot reach a listener here
	// (driver.ErrWakeUnavailable): it will not change soon (a pooler's
	// mode is its configuration), but a check that failed only because
	// the server was slow once should not turn wake-ups off for good.
	wakeUnavailableRetry = 5 * time.Minute
	// wakeSendTimeout bounds the wake-up the shutdown sends after handing
	// the lanes back.
	wakeSendTimeout = 5 * time.Second
	// wakeClaimGapMax bounds the wait of a wake-up for the claim gap (see
	// wakeups.gap), so that a claim slowed by a stalled server does not
	// hold back the next one for as long.
	wakeClaimGapMax = 20 * time.Millisecond
)

// wakeups is the wake-up listener of one claim loop.
type wakeups struct {
	// c is signalled by every wake-up and every (re)connect; it holds
	// one, so a burst of wake-ups during a claim makes one more claim.
	c chan struct{}
	// done is closed when the listener has returned; nil when there is
	// none (no Waker, or DisableWakeups).
	done chan struct{}
	// lastEnd and lastTook are when the claim loop's last claim ended and
	// how long it took (only the claim loop reads and writes them).
	lastEnd  time.Time
	lastTook time.Duration
}

// claimed records a claim of the loop, from start to end.
func (w *wakeups) claimed(start, end time.Time) { w.lastEnd, w.lastTook = end, end.Sub(start) }

// gap is how long a wake-up at now waits before it claims: until as long
// after the last claim ended as that claim took, at most
// wakeClaimGapMax. The claim loop spends at most half its time on claims
// that wake-ups ask for, and so claims in batches on a loaded server,
// where a claim takes milliseconds, while on an idle one (a claim of a
// millisecond or two) the wait is short.
func (w *wakeups) gap(now time.Time) time.Duration {
	return min(w.lastTook-now.Sub(w.lastEnd), wakeClaimGapMax)
}

// startWakeups starts the wake-up listener for the claim loop, until ctx
// is done, when the store offers wake-ups and they are not disabled.
func (d *dispatcher[TTx]) startWakeups(ctx context.Context) *wakeups {
	w := &wakeups{c: make(chan struct{}, 1)}
	waker, ok := any(d.store).(driver.Waker)
	if !ok || d.cfg.DisableWakeups {
		return w
	}
	w.done = make(chan struct{})
	go func() {
		defer close(w.done)
		d.listen(ctx, waker, w.c)
	}()
	return w
}

// wait waits for the listener to return (ctx must be done).
func (w *wakeups) wait() {
	if w.done != nil {
		<-w.done
	}
}

// listen runs waker's listener until ctx is done, listening again after
// each failure.
func (d *dispatcher[TTx]) listen(ctx context.Context, waker driver.Waker, c chan struct{}) {
	failures := 0
	var lostAt time.Time // when the listener was lost, zero while it listens
	unavailable := false // said once: wake-ups cannot work here
	for {
		listening := false
		err := waker.WakeListen(ctx, &driver.WakeListenParams{
			Listening: func() {
				listening = true
				switch {
				case !lostAt.IsZero():
					d.log.Info("relaybus: wake-up listener back; claiming at once for what it may have missed",
						"owner", d.cfg.Owner, "down_for", time.Since(lostAt).Round(time.Millisecond))
				case unavailable:
					d.log.Info("relaybus: wake-ups available again", "owner", d.cfg.Owner)
				default:
					d.log.Debug("relaybus: wake-ups on", "owner", d.cfg.Owner)
				}
				failures, lostAt, unavailable = 0, time.Time{}, false
				signal(c)
			},
			Wake: func() { signal(c) },
		})
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, driver.ErrWakeDisabled) {
			d.log.Info("relaybus: the store announces no work (wake-ups disabled in it); the dispatcher polls every PollInterval",
				"owner", d.cfg.Owner, "error", err, "poll_interval", d.cfg.PollInterval)
			return
		}
		var wait time.Duration
		if errors.Is(err, driver.ErrWakeUnavailable) {
			wait = wakeUnavailableRetry
			if !unavailable {
				d.log.Warn("relaybus: wake-ups unavailable here; the dispatcher polls every PollInterval",
					"owner", d.cfg.Owner, "error", err, "poll_interval", d.cfg.PollInterval, "check_again_in", wait)
				unavailable = true
			} else {
				d.log.Debug("relaybus: wake-ups still unavailable", "owner", d.cfg.Owner, "error", err, "check_again_in", wait)
			}
		} else {
			if listening {
				failures = 0 // it listened: this is a new loss, not one more failed try
			}
			failures++
			if lostAt.IsZero() {
				lostAt = time.Now()
			}
			wait = wakeRetryDelay(failures)
			d.log.Warn("relaybus: wake-up listener lost; polling until it is back", "owner", d.cfg.Owner,
				"error", err, "errors_in_a_row", failures, "retry_in", wait)
		}
		sleep(ctx, wait)
		if ctx.Err() != nil {
			return
		}
	}
}

// wakeRetryDelay is the wait before listening again after the n-th
// failure in a row.
func wakeRetryDelay(n int) time.Duration {
	return retryDelay(n, wakeRetryMin, wakeRetryMax, wakeRetryJitter, rand.Float64())
}

// wakeOthers tells the other processes, through the store, that this one
// handed its lanes back: their idle claim loops take them at once rather
// than at their next poll. Best effort.
func (d *dispatcher[TTx]) wakeOthers() {
	waker, ok := any(d.store).(driver.Waker)
	if !ok || d.cfg.DisableWakeups {
		return
	}
	ctx, cancel := context.WithTimeout(d.writeCtx, wakeSendTimeout)
	defer cancel()
	if err := waker.WakeSend(ctx, &driver.WakeSendParams{}); err != nil {
		d.log.Warn("relaybus: announcing the lanes handed back failed; the others find them at their next poll",
			"owner", d.cfg.Owner, "error", err)
	}
}
