package relaybus

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/berkcansavur/relaybus/relaybus/driver"
)

// shutdown ends a run after the claim loop has stopped. Handlers see their
// context cancelled; it waits until every job has handed off its delivery
// (at most Config.ShutdownTimeout), lets the completer write what is
// queued, stops the renewal, and finally relinquishes everything the owner
// still holds and wakes the others (wakeOthers), so that other workers
// need not wait for the leases to expire, nor for their next poll. After
// a timeout it relinquishes nothing: a handler still runs, and its lane
// must not be taken before its lease expires.
func (d *dispatcher[TTx]) shutdown(renewStop chan<- struct{}, bg *sync.WaitGroup) {
	close(d.work)
	timedOut := !d.waitWorkers()
	if d.completer != nil {
		// Sends what is queued at once, without waiting out the window.
		// Bounded: each completion write stops when its lease would expire.
		if err := d.completer.Close(context.Background()); err != nil {
			d.log.Error("relaybus: stopping the completer", "error", err)
		}
	}
	close(renewStop)
	bg.Wait()
	if timedOut {
		return
	}

	wctx, cancel := context.WithTimeout(d.writeCtx, d.cfg.LeaseDuration)
	defer cancel()
	n, err := d.store.OwnerRelinquish(wctx, &driver.OwnerRelinquishParams{Owner: d.cfg.Owner, Now: d.cfg.Now()})
	if err != nil {
		// Not fatal: the leases expire and other workers take over.
		d.log.Error("relaybus: relinquish failed; leases will expire", "owner", d.cfg.Owner, "error", err)
	} else {
		if n > 0 {
			d.log.Info("relaybus: relinquished leases", "owner", d.cfg.Owner, "released", n)
		}
		// The lanes are free now: the others may take them at once.
		d.wakeOthers()
	}
}

// waitWorkers waits for the workers to end, at most ShutdownTimeout
// (unless Disabled), and reports whether they did. When they did not it
// logs each handler still running.
func (d *dispatcher[TTx]) waitWorkers() bool {
	if d.cfg.ShutdownTimeout == Disabled {
		d.workers.Wait()
		return true
	}
	ended := make(chan struct{})
	go func() {
		d.workers.Wait()
		close(ended)
	}()
	t := time.NewTimer(d.cfg.ShutdownTimeout)
	defer t.Stop()
	select {
	case <-ended:
		return true
	case <-t.C:
	}
	d.mu.Lock()
	running := make([]*job, 0, len(d.held))
	for _, j := range d.held {
		running = append(running, j)
	}
	d.mu.Unlock()
	d.log.Warn("relaybus: shutdown timeout passed with handlers still running; their leases are left to expire",
		"owner", d.cfg.Owner, "timeout", d.cfg.ShutdownTimeout, "running", len(running), "lease_duration", d.cfg.LeaseDuration)
	for _, j := range running {
		d.logJob(slog.LevelWarn, "relaybus: still running at the shutdown timeout", j, nil)
	}
	return false
}
