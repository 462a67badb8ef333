package relaybus

import (
	"context"
	"sync"
)

// shutdown ends a run after the claim loop has stopped. Handlers see their
// context cancelled; it waits until every job has handed off its delivery,
// lets the completer write what is queued, stops the renewal, and finally
// relinquishes everything the owner still holds, so that other workers need
// not wait for the leases to expire.
func (d *dispatcher[TTx]) shutdown(renewStop chan<- struct{}, bg *sync.WaitGroup) {
	close(d.work)
	d.workers.Wait()
	if d.completer != nil {
		// Sends what is queued at once, without waiting out the window.
		// Bounded: each completion write stops when its lease would expire.
		if err := d.completer.Close(context.Background()); err != nil {
			d.log.Error("relaybus: stopping the completer", "error", err)
		}
	}
	close(renewStop)
	bg.Wait()

	wctx, cancel := context.WithTimeout(d.writeCtx, d.cfg.LeaseDuration)
	defer cancel()
	n, err := d.store.OwnerRelinquish(wctx, &OwnerRelinquishParams{Owner: d.cfg.Owner, Now: d.cfg.Now()})
	if err != nil {
		// Not fatal: the leases expire and other workers take over.
		d.log.Error("relaybus: relinquish failed; leases will expire", "owner", d.cfg.Owner, "error", err)
	} else if n > 0 {
		d.log.Info("relaybus: relinquished leases", "owner", d.cfg.Owner, "released", n)
	}
}
