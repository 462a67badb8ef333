package relaybus

import (
	"context"
	"sync"
	"time"

	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

// Completions carried by claims. With a store that completes and claims in
// one transaction (driver.CompletingClaimer, the PostgreSQL store), a
// success does not go to the completer at once: it waits in the carrier,
// and the claim loop's next claim takes every success waiting and writes
// them in its own transaction (one commit and one log flush for both, and
// the claim sees the keys the completions freed: a key's next delivery is
// claimed in the very transaction that completes the one before it).
// Successes that no claim takes within CompletionBatchWindow, or that
// find CompletionBatchMax waiting already, go to the completer with what
// waits and are written on their own as before, at once (its linger is
// then 0: the window was spent here). A keyed success wakes an idle claim
// loop, as the commit of its completion did before: the claim that
// carries it is the one that may take its key's next delivery.
//
// Nothing about a delivery changes but when its completion commits: it
// is written with the same fence, in one statement with the rest of its
// group (a keyed batch's prefix), and a claim that carries completions
// and fails before they committed hands them to the completer, which
// writes them again on their own (had they committed after all, that
// write finds the rows gone and reports the leases lost: the deliveries
// were completed, and nothing runs again). Carried successes count as
// finished for the claim's Busy: if the claim commits, their completions
// commit with it, before anything it claimed can run, so a suspect it
// hands out runs alone (docs/lane-protocol.md, SUSPECT_BUSY); if it does
// not commit, it claimed nothing.

// carrier holds the successes waiting for a claim (nil when the store
// cannot complete and claim in one transaction, or completion batching is
// Disabled).
type carrier struct {
	mu     sync.Mutex
	open   bool // the claim loop runs: a claim will take them
	groups [][]*job
	n      int // jobs in groups
	timer  *time.Timer
}

// newCarrier returns the dispatcher's carrier, or nil when claims cannot
// carry completions.
func (d *dispatcher[TTx]) newCarrier() *carrier {
	if d.completer == nil || !driver.ClaimsCompletions(d.store) {
		return nil
	}
	return &carrier{}
}

// carryOpen lets claims carry completions, from the start of the claim
// loop.
func (d *dispatcher[TTx]) carryOpen() {
	if c := d.carry; c != nil {
		c.mu.Lock()
		c.open = true
		c.mu.Unlock()
	}
}

// carryClose ends carrying, when the claim loop stops: what waits goes to
// the completer, and so does every later success.
func (d *dispatcher[TTx]) carryClose() {
	c := d.carry
	if c == nil {
		return
	}
	c.mu.Lock()
	c.open = false
	groups := c.takeLocked()
	c.mu.Unlock()
	d.enqueueCompletions(groups)
}

// carryAdd hands the successes js (one group) to the carrier and reports
// whether it took them; false when claims do not carry completions (now),
// and the caller hands them to the completer.
func (d *dispatcher[TTx]) carryAdd(js []*job) bool {
	c := d.carry
	if c == nil {
		return false
	}
	keyed := false
	for _, j := range js {
		keyed = keyed || j.d.Key != ""
	}
	c.mu.Lock()
	if !c.open {
		c.mu.Unlock()
		return false
	}
	held := c.n
	c.groups = append(c.groups, js)
	c.n += len(js)
	var full [][]*job
	switch {
	case held >= d.cfg.CompletionBatchMax || c.n > driver.MaxLeasesPerCall:
		// Full only once it held CompletionBatchMax before this group:
		// a hot key's run (up to driver.MaxKeyRun) finishing while
		// another waits, for the claim in flight, rides the next claim
		// with it, rather than sending both to the completer (a run of 80,
		// the default 20 x 4, would cross the default 100 alone) and
		// leaving that claim nothing to carry and two keys waiting for
		// the completer's commit. One call carries at most
		// CompletionBatchMax - 1 plus a run, within the store's
		// driver.MaxLeasesPerCall.
		full = c.takeLocked()
	case len(c.groups) == 1:
		c.timer = time.AfterFunc(d.cfg.CompletionBatchWindow, d.carryExpire)
	}
	c.mu.Unlock()
	if full != nil {
		// Written on their own, as a full batch is without carrying; the
		// hand-off waits while the completer's queue is full (holding
		// this handler's slot, which holds back claims).
		d.enqueueCompletions(full)
		return true
	}
	if keyed {
		// The key's next delivery may be claimed in the transaction that
		// completes this one.
		signal(d.keyFreed)
	}
	return true
}

// carryExpire hands to the completer what waited a CompletionBatchWindow
// without a claim taking it.
func (d *dispatcher[TTx]) carryExpire() {
	c := d.carry
	c.mu.Lock()
	groups := c.takeLocked()
	c.mu.Unlock()
	d.enqueueCompletions(groups)
}

// carryTake takes every success waiting, for a claim to carry.
func (d *dispatcher[TTx]) carryTake() [][]*job {
	c := d.carry
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.takeLocked()
}

// takeLocked empties the carrier (c.mu held) and returns what it held.
func (c *carrier) takeLocked() [][]*job {
	if c.timer != nil {
		// A timer that fired and waits for the lock finds the carrier
		// empty, or holding newer successes, which it sends early: harmless.
		c.timer.Stop()
		c.timer = nil
	}
	groups := c.groups
	c.groups, c.n = nil, 0
	return groups
}

// carried is what one claim carries: the groups taken from the carrier
// and their jobs, in order.
type carried struct {
	groups [][]*job
	jobs   []*job
}

// approveCarried shows the groups taken from the carrier to
// Config.BeforeComplete and returns what the claim carries; when it
// refuses, their deliveries are released (as completeBatch does) and
// nothing is carried.
func (d *dispatcher[TTx]) approveCarried(groups [][]*job) carried {
	var js []*job
	for _, g := range groups {
		js = append(js, g...)
	}
	if len(js) == 0 {
		return carried{}
	}
	if err := d.beforeComplete(unapproved(js)); err != nil {
		for _, j := range js {
			d.release(j)
		}
		return carried{}
	}
	return carried{groups: groups, jobs: js}
}

// claimCarrying is the claim p, carrying the completions of cr (non-empty;
// BeforeComplete has seen them), in one call of the store's. It returns
// what the claim claimed. Once the store says the completions committed,
// each job's outcome is recorded; when they may not have, the groups go
// to the completer to be written on their own.
func (d *dispatcher[TTx]) claimCarrying(ctx context.Context, cr carried, p *driver.DeliveryClaimParams) ([]*Delivery, error) {
	js := cr.jobs
	leases := make([]relaytype.Lease, len(js))
	for i, j := range js {
		leases[i] = j.d.Lease()
	}
	cc := d.store.(driver.CompletingClaimer)
	res, err := cc.DeliveryCompleteClaim(ctx, &driver.DeliveryCompleteClaimParams{
		Complete: driver.DeliveryCompleteManyParams{Leases: leases, Now: p.Now},
		Claim:    *p,
	})
	var ds []*Delivery
	if res != nil {
		ds = res.Claimed
	}
	if res == nil || len(res.Completed) != len(js) {
		if res != nil && res.Completed != nil {
			d.log.Error("relaybus: store returned the wrong number of completion results; writing them again",
				"results", len(res.Completed), "completions", len(js))
		}
		d.enqueueCompletions(cr.groups)
		return ds, err
	}
	for i, j := range js {
		j.carried = true
		d.done(j, "complete", res.Completed[i], nil, &d.stats.completed)
	}
	return ds, err
}
