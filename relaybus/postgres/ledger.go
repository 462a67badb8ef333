package postgres

import (
	"strconv"
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
// the picks it saw and how many of them are not finished, and, for a
// lane with a keyed pick unfinished, the unfinished picks themselves
// (id, handler, key). claimOwn uses a hint only when the lane's epoch
// and picks are the ones the hint names (the lane is locked then, so
// they cannot change under it); otherwise, and for every lane without a
// hint, it probes as before. Where the hint holds, the unfinished picks
// are exactly the lane's deliveries in flight, so they stand in for the
// probe of every id of in_flight that a lane with keyed work needed to
// learn which keys are blocked and which ids to keep in in_flight
// (claimOwn's flying): measured, a fifth of the buffers a keyed claim
// read. A lane with only unkeyed picks unfinished needs neither, and its
// picks are not passed. The ledger
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
// difference is exact; and it leaves their ids out of the unfinished
// picks (relaybus.completed_ids).
type ledger struct {
	mu    sync.Mutex
	lanes map[int16]*ledgerLane
}

// ledgerLane is what the instance saw of one hold of a lane.
type ledgerLane struct {
	epoch    int64
	picks    int // deliveries claimed from the lane at this epoch
	finished int // of them, finished by a committed write
	// open are the picks not finished, by delivery id: picks - finished
	// of them, keyed of them keyed. Where the hint holds, they are
	// exactly what the lane has in flight, which claimOwn then need not
	// probe for.
	open  map[int64]openPick
	keyed int
}

// openPick is what claimOwn needs of a delivery in flight: the (handler,
// key) it blocks (key nil: none).
type openPick struct {
	handler string
	key     *string
}

// claimHints are the ledger's hints for claimOwn: one entry per lane in
// lanes, epochs, picks and outstanding, and, in the open arrays, one per
// unfinished pick (its lane, id, handler and key, nil when unkeyed) of
// each of those lanes that has a keyed one.
type claimHints struct {
	lanes       []int16
	epochs      []int64
	picks       []int32
	outstanding []int32

	openLanes    []int16
	openIDs      []int64
	openHandlers []string
	openKeys     []*string
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
		if e.keyed == 0 {
			continue
		}
		for id, p := range e.open {
			h.openLanes = append(h.openLanes, lane)
			h.openIDs = append(h.openIDs, id)
			h.openHandlers = append(h.openHandlers, p.handler)
			h.openKeys = append(h.openKeys, p.key)
		}
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
			continue // cannot happen: scanDelivery wrote it
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
		id, err := strconv.ParseInt(d.ID, 10, 64)
		if _, dup := e.open[id]; err != nil || dup {
			// Neither can happen (scanDelivery formats the id, and a
			// hold gives a delivery once until it is finished): a pick
			// the ledger cannot name leaves the lane unknown.
			delete(l.lanes, lane)
			continue
		}
		e.picks++
		if e.open == nil {
			e.open = make(map[int64]openPick, claimQuota)
		}
		p := openPick{handler: d.Handler}
		if d.Key != "" {
			key := d.Key
			p.key = &key
			e.keyed++
		}
		e.open[id] = p
	}
}

// finished records the outcome of a write that ends the claim of
// delivery id (a completion, reschedule, bury or release) under token:
// ok says that it committed and held its fence. Anything else, or a
// delivery the entry does not hold open, drops the lane's entry.
func (l *ledger) finished(id int64, token driver.LaneToken, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	lane := int16(token.Lane)
	e := l.lanes[lane]
	if e == nil {
		return
	}
	p, open := e.open[id]
	if !ok || e.epoch != token.Epoch || !open {
		delete(l.lanes, lane)
		return
	}
	delete(e.open, id)
	if p.key != nil {
		e.keyed--
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
