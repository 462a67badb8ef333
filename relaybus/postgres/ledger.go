package postgres

import (
	"sync"

	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

// The ledger: what this store instance knows of the lanes it holds, kept
// so that a claim need not ask the database what the instance already
// knows.
//
// A lane's in_flight lists the deliveries its holder claimed from it since
// it took it (at its epoch), less those the holder rescheduled, buried or
// released; a completion deletes the delivery and leaves its id. Only
// this store instance appends to the in_flight of a lane it holds, and
// every append reaches it as a claim's result. So when the instance has
// seen every delivery of the hold, through the claims that returned them
// (as many as the lane's picks), and has seen each of them finished by a
// write that committed (a completion that deleted it, or a reschedule,
// bury or release that took it out of in_flight), it knows that nothing of
// the lane is in flight; and while any of them is not finished, that
// something is. A claim hands back a lane that gave nothing and has
// nothing in flight; without the ledger it learns the second by probing
// every id of in_flight (claimOwn's release check), which on a lane that
// gave its quota is a primary-key probe for each of its claimQuota ids,
// every claim, through the index entries of deleted rows: measured, four
// fifths of a busy dispatcher's claim time.
//
// The claim passes the ledger to claimOwn as hints: per lane, the epoch,
// the picks it saw and how many of them are not finished. claimOwn uses a
// hint only when the lane's epoch and picks are the ones the hint names
// (the lane is locked then, so they cannot change under it); otherwise,
// and for every lane without a hint, it probes as before. The ledger
// errs only towards not knowing: an entry is dropped (the lane probed
// again) whenever a write's outcome is uncertain (an error, a fence that
// did not hold, a completion inside the caller's transaction, which may
// yet roll back), and a claim that failed drops them all, since it may
// have committed picks the instance never saw. A finished delivery is
// counted only after its write committed, and a pick only after the claim
// that made it committed, so a hint never says less is in flight than is.
// The one adjustment is made in SQL: a claim that carries completions
// subtracts from a lane's hint the rows that its own completion statement
// deleted from the lane earlier in the same transaction (relaybus.completed,
// completedLanes in complete.sql). Each of them is a pick of the hint's
// hold (the completion's fence checked the lane's epoch, which the claim
// holds locked) that the hint still counts as unfinished, so the
// difference is exact.
type ledger struct {
	mu    sync.Mutex
	lanes map[int16]*ledgerLane
}

// ledgerLane is what the instance saw of one hold of a lane.
type ledgerLane struct {
	epoch    int64
	picks    int // deliveries claimed from the lane at this epoch
	finished int // of them, finished by a committed write
}

// claimHints are the ledger's hints for claimOwn, one entry per lane.
type claimHints struct {
	lanes       []int16
	epochs      []int64
	picks       []int32
	outstanding []int32
}

// hints returns the ledger's current hints.
func (l *ledger) hints() claimHints {
	l.mu.Lock()
	defer l.mu.Unlock()
	h := claimHints{
		lanes:       make([]int16, 0, len(l.lanes)),
		epochs:      make([]int64, 0, len(l.lanes)),
		picks:       make([]int32, 0, len(l.lanes)),
		outstanding: make([]int32, 0, len(l.lanes)),
	}
	for lane, e := range l.lanes {
		h.lanes = append(h.lanes, lane)
		h.epochs = append(h.epochs, e.epoch)
		h.picks = append(h.picks, int32(e.picks))
		h.outstanding = append(h.outstanding, int32(e.picks-e.finished))
	}
	return h
}

// claimed records the deliveries a claim returned, once every round trip
// of the claim succeeded. A delivery of a newer epoch than the entry's
// starts the lane's entry afresh (the lane was taken again); one of an
// older epoch cannot come from a committed claim of this instance and
// drops the entry.
func (l *ledger) claimed(ds []*relaytype.Delivery) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lanes == nil {
		l.lanes = map[int16]*ledgerLane{}
	}
	for _, d := range ds {
		t, err := driver.ParseLaneToken(d.LeaseToken)
		if err != nil {
			continue // cannot happen: deliveryRow.scan wrote it
		}
		lane := int16(t.Lane)
		e := l.lanes[lane]
		switch {
		case e == nil || t.Epoch > e.epoch:
			e = &ledgerLane{epoch: t.Epoch}
			l.lanes[lane] = e
		case t.Epoch < e.epoch:
			delete(l.lanes, lane)
			continue
		}
		e.picks++
	}
}

// finished records the outcome of a write that ends a delivery's claim
// (a completion, reschedule, bury or release) under token: ok says that
// it committed and held its fence. Anything else drops the lane's entry.
func (l *ledger) finished(token driver.LaneToken, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	lane := int16(token.Lane)
	e := l.lanes[lane]
	if e == nil {
		return
	}
	if !ok || e.epoch != token.Epoch || e.finished >= e.picks {
		delete(l.lanes, lane)
		return
	}
	e.finished++
}

// forget drops the entry of the lane of token (a write whose outcome the
// instance cannot know, such as a completion in the caller's
// transaction).
func (l *ledger) forget(token driver.LaneToken) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.lanes, int16(token.Lane))
}

// reset drops every entry: after a claim that failed (it may have
// committed picks the instance never saw) and after OwnerRelinquish.
func (l *ledger) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	clear(l.lanes)
}
