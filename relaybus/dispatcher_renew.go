package relaybus

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

// Lease renewal: every held lease is extended each LeaseRenewInterval,
// including a finishing one (its final write under way): a completion
// that waits for its batch or for a busy database must not outlive its
// lease, or another worker runs the delivery again although its handler
// succeeded. A lease found lost cancels its handler; a finishing lease
// that is lost is left to its own write, which reports it. The bound of a
// final write's retries moves with its renewed lease (see write). A
// renewal writes lane rows only and a completion deletes delivery rows,
// so neither waits for the other's row locks. The renewal runs on its own goroutine
// and takes the dispatcher's lock only to copy and update the leases, so
// it never waits for a completion.

// renewLoop extends the held leases each LeaseRenewInterval with one LeaseExtend call (per MaxLeasesPerCall
// leases) until stop is closed. A lease the store reports lost, or that
// expired by our clock without being renewed, cancels its handler.
func (d *dispatcher[TTx]) renewLoop(stop <-chan struct{}) {
	t := time.NewTicker(d.cfg.LeaseRenewInterval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			d.renew()
		}
	}
}

func (d *dispatcher[TTx]) renew() {
	now := d.cfg.Now()
	var js []*job
	d.mu.Lock()
	for _, j := range d.held {
		if !j.finishing && !j.expiresAt.After(now) {
			// Renewals failed for a whole lease: another worker may run
			// this delivery now, so stop ours.
			d.loseLocked(j)
			continue
		}
		js = append(js, j)
	}
	d.mu.Unlock()
	expiresAt := now.Add(d.cfg.LeaseDuration)
	for start := 0; start < len(js); start += MaxLeasesPerCall {
		chunk := js[start:min(start+MaxLeasesPerCall, len(js))]
		leases := make([]relaytype.Lease, len(chunk))
		for i, j := range chunk {
			leases[i] = j.d.Lease()
		}
		c, cancel := context.WithTimeout(d.writeCtx, d.cfg.LeaseDuration)
		oks, err := d.store.LeaseExtend(c, &driver.LeaseExtendParams{Owner: d.cfg.Owner, Leases: leases, ExpiresAt: expiresAt, Now: now})
		cancel()
		if err == nil && len(oks) != len(chunk) {
			err = fmt.Errorf("relaybus: store returned %d results for %d leases", len(oks), len(chunk))
		}
		if err != nil {
			d.log.Error("relaybus: lease renewal failed", "leases", len(chunk), "error", err)
			continue
		}
		d.mu.Lock()
		for i, j := range chunk {
			switch {
			case oks[i]:
				j.expiresAt = expiresAt
				if j.finishing {
					j.deadline = realDeadline(expiresAt, d.cfg.Now())
				}
			case !j.finishing && d.held[j.d.ID] == j:
				// A finishing job's own write reports the loss (and a
				// finished one is simply gone).
				d.loseLocked(j)
			}
		}
		d.mu.Unlock()
	}
}

// loseLocked stops a job whose lease is gone. d.mu is held.
func (d *dispatcher[TTx]) loseLocked(j *job) {
	j.lost = true
	delete(d.held, j.d.ID)
	if j.cancel != nil {
		j.cancel(errLeaseLost)
	}
	d.stats.leasesLost.Add(1)
	signal(d.freed)
	d.logJob(slog.LevelWarn, "relaybus: lease lost; handler cancelled", j, nil)
}
