package mongo

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// DeliveryClaim leases up to params.Limit due deliveries by leasing their
// lanes. It writes no delivery document (except the charges of a
// takeover): what a claim holds is recorded in the lane documents.
//
//  1. Read the lanes this instance holds for params.Owner (owner and
//     holder, lease live).
//  2. Charge the lost ids of those lanes, if any (a takeover that did not
//     finish; chargeLost).
//  3. Read which of their inFlight ids still exist (completions delete
//     deliveries without writing the lane), and their keys.
//  4. Read the candidates of those lanes (the claim index, in (dueAt,
//     _id) order, leaving out what is in flight or lost) and the heads of
//     the keys parked there.
//  5. Apply the per-key rule (a key's lowest candidate, only when no
//     lower sequence of its handler and key is pending and nothing of the
//     key is in flight: one aggregation for all heads) and the suspect
//     rule.
//  6. While that does not fill the limit: rank free and expired lanes by
//     their oldest due delivery (a probe of the claim index, and the
//     heads of their parked keys), take the first 4, then 8, 16,
//     ... (takeLanes: one unordered bulkWrite of conditional updates,
//     each of which raises the epoch and moves the lane's inFlight into
//     lost), charge the lost ids of the lanes taken over, and read their
//     candidates as in 4 and 5.
//  7. Read the picked documents whole.
//  8. Record: one unordered bulkWrite of conditional updates on the lane
//     documents (laneWrites), each matching only at the epoch read and
//     under (owner, holder).
//  9. Re-check the keyed picks against predecessors requeued meanwhile
//     and give back any that were overtaken; park long backlogs (best
//     effort, logged).
//
// Claims of one Store are serialised (claimMu); claims of different
// instances never hold the same lane, and a take is conditional on the
// epoch, so two claimers never take the same lane or return the same
// delivery.
//
// A claim that fails before step 8 has leased nothing (lanes it took stay
// held until they are handed back by the next claim or expire). One that
// fails in step 8 gives the picks back to their lanes; if that fails too,
// the next claim of this instance gives them back (Store.orphans).
func (s *Store) DeliveryClaim(ctx context.Context, params *driver.DeliveryClaimParams) ([]*relaytype.Delivery, error) {
	if err := params.Validate(); err != nil {
		return nil, err
	}
	s.claimMu.Lock()
	defer s.claimMu.Unlock()
	s.giveBackOrphans(ctx)

	c := &claimRun{
		s:         s,
		p:         params,
		now:       bsonTime(params.Now),
		expiresAt: bsonTime(params.Now.Add(params.LeaseDuration)),
		lanes:     map[int32]*claimLane{},
		inFlight:  map[orderKey]bool{},
		checked:   map[orderKey]bool{},
		blocked:   map[orderKey]bool{},
	}
	held, err := s.readHeldLanes(ctx, params.Owner, c.now)
	if err != nil {
		return nil, err
	}
	if err := c.addLanes(ctx, held, false); err != nil {
		return nil, err
	}
	if err := c.takeMore(ctx); err != nil {
		return nil, err
	}
	return c.finish(ctx)
}

// claimRun is the state of one claim.
type claimRun struct {
	s         *Store
	p         *driver.DeliveryClaimParams
	now       time.Time
	expiresAt time.Time

	lanes    map[int32]*claimLane
	order    []*claimLane      // lanes in the order they were added
	cands    []candidate       // every candidate read, in claim order
	inFlight map[orderKey]bool // keys with a delivery in flight
	checked  map[orderKey]bool // keys whose head's predecessors were read
	blocked  map[orderKey]bool // keys whose head has a pending predecessor
	heads    map[orderKey]candidate
	follow   map[orderKey]int
	eligible []candidate
}

// addLanes takes lanes into the claim: charges what they lost, reads what
// they have in flight, their candidates and parked heads, and evaluates
// the per-key rules again.
func (c *claimRun) addLanes(ctx context.Context, docs []laneDoc, taken bool) error {
	var added []*claimLane
	for _, d := range docs {
		l := &claimLane{id: d.ID, epoch: d.Epoch, taken: taken, inFlight: d.InFlight, lost: d.Lost, parked: d.ParkedKeys, usable: true}
		c.lanes[l.id] = l
		c.order = append(c.order, l)
		added = append(added, l)
	}
	if len(added) == 0 {
		return nil
	}
	for _, l := range added {
		if len(l.lost) == 0 {
			continue
		}
		switch err := c.s.chargeLost(ctx, l, c.now); {
		case err == nil:
			l.lost = nil
		case errors.Is(err, errFenceLost):
			// Taken over from us since we read it: nothing of it is ours.
			l.usable = false
		default:
			return err
		}
	}
	if err := c.readInFlight(ctx, added); err != nil {
		return err
	}
	var usable []*claimLane
	for _, l := range added {
		if l.usable {
			usable = append(usable, l)
		}
	}
	if len(usable) == 0 {
		return nil
	}
	cands, err := c.s.readCandidates(ctx, usable, c.p.Handlers, c.now, claimScanLimit(c.p.Limit))
	if err != nil {
		return err
	}
	parked, err := c.readParkedHeads(ctx, usable)
	if err != nil {
		return err
	}
	c.cands = mergeCandidates(int64(len(c.cands))+int64(len(cands))+int64(len(parked)), c.cands, cands, parked)
	return c.evaluate(ctx)
}

// readInFlight reads which inFlight ids of lanes still exist as pending
// deliveries, and notes the keys of those.
func (c *claimRun) readInFlight(ctx context.Context, lanes []*claimLane) error {
	var ids []bson.ObjectID
	for _, l := range lanes {
		ids = append(ids, l.inFlight...)
	}
	if len(ids) == 0 {
		return nil
	}
	live, err := c.s.readInFlightDocs(ctx, ids)
	if err != nil {
		return err
	}
	for _, l := range lanes {
		for _, id := range l.inFlight {
			d, ok := live[id]
			if !ok {
				l.gone = append(l.gone, id)
				continue
			}
			if d.Key != "" {
				c.inFlight[orderKey{d.Handler, d.Key}] = true
			}
		}
	}
	return nil
}

// readParkedHeads reads the head of every parked key of lanes that one of
// the claim's handlers runs; keys with no pending delivery left are
// noted as drained (the record write removes them from the lane).
func (c *claimRun) readParkedHeads(ctx context.Context, lanes []*claimLane) ([]candidate, error) {
	var out []candidate
	for _, l := range lanes {
		exclude := l.exclude()
		for _, k := range l.parked {
			if !slices.Contains(c.p.Handlers, k.Handler) {
				continue
			}
			h, found, err := c.s.readKeyHead(ctx, k)
			if err != nil {
				return nil, err
			}
			switch {
			case !found:
				l.drained = append(l.drained, k)
			case h.LaneID == l.id && !h.DueAt.After(c.now) && !slices.Contains(exclude, h.ID):
				h.lowest = true
				out = append(out, h)
			}
		}
	}
	return out, nil
}

// evaluate applies the per-key rules to every candidate read so far,
// reading the predecessors of heads not checked yet.
func (c *claimRun) evaluate(ctx context.Context) error {
	c.heads, c.follow = keyHeads(c.cands)
	checks := predecessorChecks(c.heads, c.inFlight, c.checked)
	if len(checks) > 0 {
		blocked, err := c.s.readBlockedKeys(ctx, checks)
		if err != nil {
			return err
		}
		for _, h := range checks {
			k := orderKey{h.handler, h.key}
			c.checked[k] = true
			c.blocked[k] = blocked[k]
		}
	}
	c.eligible = eligibleCandidates(c.cands, c.heads, c.inFlight, c.blocked)
	return nil
}

// takeMore takes free lanes, a few more each round, while the eligible
// candidates do not fill the limit.
func (c *claimRun) takeMore(ctx context.Context) error {
	var free []laneDoc
	tried := map[int32]bool{}
	step := LaneTakeFirst
	for round := 0; round < MaxLaneTakeRounds; round++ {
		if len(c.eligible) >= c.p.Limit || suspectFirst(c.eligible) {
			return nil
		}
		if free == nil {
			var err error
			if free, err = c.s.readFreeLanes(ctx, c.now); err != nil {
				return err
			}
		}
		for id := range c.lanes {
			tried[id] = true
		}
		ranked, err := c.rankFreeLanes(ctx, free, tried, step)
		if err != nil {
			return err
		}
		if len(ranked) == 0 {
			return nil
		}
		var want []laneEpoch
		for _, d := range free {
			if slices.Contains(ranked, d.ID) {
				want = append(want, laneEpoch{lane: d.ID, epoch: d.Epoch})
			}
		}
		// Tried now whether or not the take wins them: a lane another
		// claimer took is not probed again by this claim.
		for _, id := range ranked {
			tried[id] = true
		}
		taken, err := c.s.takeLanes(ctx, want, c.p.Owner, c.expiresAt, c.now)
		if err != nil {
			return err
		}
		if err := c.addLanes(ctx, taken, true); err != nil {
			return err
		}
		step *= 2
	}
	return nil
}

// rankFreeLanes ranks the free lanes not tried yet by their oldest due
// work of the claim's handlers and returns up to n of them. Ready work is
// found by a probe of the claim index; parked work by reading the head of
// each parked key of those lanes (a parked backlog is worth taking only
// when its head is due: probing the parked deliveries themselves would
// take, and hand back, a lane whose head waits for its retry at every
// claim).
func (c *claimRun) rankFreeLanes(ctx context.Context, free []laneDoc, tried map[int32]bool, n int) ([]int32, error) {
	var ready []int32
	var parked []probeRow
	for _, d := range free {
		if tried[d.ID] {
			continue
		}
		ready = append(ready, d.ID)
		for _, k := range d.ParkedKeys {
			if !slices.Contains(c.p.Handlers, k.Handler) {
				continue
			}
			h, found, err := c.s.readKeyHead(ctx, k)
			if err != nil {
				return nil, err
			}
			if found && h.LaneID == d.ID && !h.DueAt.After(c.now) {
				parked = append(parked, probeRow{ID: h.ID, LaneID: h.LaneID, DueAt: h.DueAt})
			}
		}
	}
	if len(ready) == 0 {
		return nil, nil
	}
	rows, err := c.s.probeLanes(ctx, ready, c.p.Handlers, c.now, probeRows(n))
	if err != nil {
		return nil, err
	}
	return rankLanes(append(rows, parked...), n, tried), nil
}

// finish picks, reads the picks whole, records them in their lanes,
// re-checks keyed picks, parks backlogs, and returns the deliveries.
func (c *claimRun) finish(ctx context.Context) ([]*relaytype.Delivery, error) {
	room := map[int32]int{}
	for id, l := range c.lanes {
		if l.usable {
			room[id] = max(MaxInFlightPerLane-l.remaining(), 0)
		}
	}
	picks := choosePicks(c.eligible, c.p.Limit, room, c.p.Busy)
	docs, err := c.s.readPicks(ctx, picks)
	if err != nil {
		return nil, err
	}
	// A pick whose document was not read back (it cannot vanish while
	// pending and in no inFlight list, but a claim never records what it
	// will not return) is left out.
	kept := picks[:0]
	for _, p := range picks {
		if _, ok := docs[p.ID]; ok {
			kept = append(kept, p)
		}
	}
	picks = kept

	writes := laneWrites(c.order, picks, c.p.Owner, c.s.holder, c.expiresAt)
	recorded, err := c.s.recordClaim(ctx, writes, c.p.Owner)
	if err != nil {
		return nil, err
	}
	picks = slices.DeleteFunc(picks, func(p candidate) bool { return !recorded[p.LaneID] })
	picks = c.recheck(ctx, picks)
	c.park(ctx)

	out := make([]*relaytype.Delivery, len(picks))
	for i, p := range picks {
		out[i] = docs[p.ID].asProcessing(c.lanes[p.LaneID].epoch, c.p.Owner, c.expiresAt)
	}
	return out, nil
}

// recheck reads, after the record, whether a lower sequence of a keyed
// pick's handler and key has become pending meanwhile (a DeliveryRequeue
// of a dead predecessor between the predecessor read and the record) and
// gives such picks back to their lanes. Best effort: an error is logged
// and the picks are returned as recorded.
func (c *claimRun) recheck(ctx context.Context, picks []candidate) []candidate {
	var checks []keyHead
	for _, p := range picks {
		if p.Key != "" {
			checks = append(checks, keyHead{handler: p.Handler, key: p.Key, seq: p.Sequence})
		}
	}
	if len(checks) == 0 {
		return picks
	}
	blocked, err := c.s.readBlockedKeys(ctx, checks)
	if err != nil {
		c.s.cfg.logger.Warn("relaybus/mongo: claim: re-check of keyed picks failed; returning them as recorded", "error", err)
		return picks
	}
	overtaken := map[laneEpoch][]bson.ObjectID{}
	out := picks[:0]
	for _, p := range picks {
		if p.Key != "" && blocked[p.orderKey()] {
			le := laneEpoch{lane: p.LaneID, epoch: c.lanes[p.LaneID].epoch}
			overtaken[le] = append(overtaken[le], p.ID)
			continue
		}
		out = append(out, p)
	}
	c.s.giveBack(ctx, overtaken)
	return out
}

// park parks the backlogs parkRequests chooses, each in its own
// transaction. Best effort: parking only saves later claims reading
// candidates that cannot run; a failure is logged.
func (c *claimRun) park(ctx context.Context) {
	for _, r := range parkRequests(c.lanes, c.heads, c.follow) {
		n, err := c.s.parkKey(ctx, r)
		if err != nil {
			c.s.cfg.logger.Warn("relaybus/mongo: claim: parking a key's backlog failed",
				"lane", r.lane, "handler", r.key.Handler, "key", r.key.Key, "error", err)
			continue
		}
		c.s.cfg.logger.Debug("relaybus/mongo: claim: parked a key's backlog",
			"lane", r.lane, "handler", r.key.Handler, "key", r.key.Key, "deliveries", n)
	}
}

// ---------------------------------------------------------------------
// The claim's database operations, one function each.
