package mongo

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/berkcansavur/relaybus/relaybus"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
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
func (s *Store) DeliveryClaim(ctx context.Context, params *relaybus.DeliveryClaimParams) ([]*relaybus.Delivery, error) {
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
	p         *relaybus.DeliveryClaimParams
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
func (c *claimRun) finish(ctx context.Context) ([]*relaybus.Delivery, error) {
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

	out := make([]*relaybus.Delivery, len(picks))
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

// readHeldLanes reads the lanes this instance holds for owner under a
// live lease (heldLanesFilter). A plain read: the claim's later writes to
// these lanes are conditional on the epoch read here.
func (s *Store) readHeldLanes(ctx context.Context, owner string, now time.Time) ([]laneDoc, error) {
	cur, err := s.lanes.Find(ctx, heldLanesFilter(owner, s.holder, now), options.Find().SetSort(bson.D{{Key: fID, Value: 1}}))
	if err != nil {
		return nil, errorFrom("claim: read held lanes", err)
	}
	var docs []laneDoc
	if err := cur.All(ctx, &docs); err != nil {
		return nil, errorFrom("claim: read held lanes", err)
	}
	return docs, nil
}

// readFreeLanes reads the lanes anyone may take (freeOrExpired), without
// their inFlight lists.
func (s *Store) readFreeLanes(ctx context.Context, now time.Time) ([]laneDoc, error) {
	cur, err := s.lanes.Find(ctx, freeOrExpired(now),
		options.Find().SetSort(bson.D{{Key: fID, Value: 1}}).SetProjection(freeLanesProjection))
	if err != nil {
		return nil, errorFrom("claim: read free lanes", err)
	}
	docs := []laneDoc{}
	if err := cur.All(ctx, &docs); err != nil {
		return nil, errorFrom("claim: read free lanes", err)
	}
	return docs, nil
}

// readInFlightDocs reads which of ids still exist as pending deliveries
// (inFlightProjection).
func (s *Store) readInFlightDocs(ctx context.Context, ids []bson.ObjectID) (map[bson.ObjectID]candidate, error) {
	cur, err := s.deliveries.Find(ctx, idsFilter(ids), options.Find().SetProjection(inFlightProjection))
	if err != nil {
		return nil, errorFrom("claim: read deliveries in flight", err)
	}
	var docs []struct {
		candidate `bson:",inline"`
		Status    string `bson:"status"`
	}
	if err := cur.All(ctx, &docs); err != nil {
		return nil, errorFrom("claim: read deliveries in flight", err)
	}
	out := make(map[bson.ObjectID]candidate, len(docs))
	for _, d := range docs {
		if d.Status == statusPending {
			out[d.ID] = d.candidate
		}
	}
	return out, nil
}

// readCandidates reads the due ready deliveries of handlers in lanes,
// leaving out what the lanes have in flight or lost: one sorted, limited
// find per MaxLanesPerSortedQuery lanes (candidateFilter, candidateSort),
// merged here.
func (s *Store) readCandidates(ctx context.Context, lanes []*claimLane, handlers []string, now time.Time, limit int64) ([]candidate, error) {
	ids := make([]int32, len(lanes))
	var exclude []bson.ObjectID
	for i, l := range lanes {
		ids[i] = l.id
		exclude = append(exclude, l.exclude()...)
	}
	var lists [][]candidate
	for _, chunk := range chunkLanes(ids) {
		cur, err := s.deliveries.Find(ctx, candidateFilter(chunk, handlers, now, exclude), options.Find().
			SetSort(candidateSort).
			SetProjection(candidateProjection).
			SetLimit(limit).
			SetBatchSize(int32(min(limit, 1000))))
		if err != nil {
			return nil, errorFrom("claim: read candidates", err)
		}
		var cands []candidate
		if err := cur.All(ctx, &cands); err != nil {
			return nil, errorFrom("claim: read candidates", err)
		}
		lists = append(lists, cands)
	}
	return mergeCandidates(limit, lists...), nil
}

// readKeyHead reads the lowest pending delivery of a parked key
// (keyHeadFilter, keyHeadSort), through the per-key index.
func (s *Store) readKeyHead(ctx context.Context, k parkedKey) (candidate, bool, error) {
	var c candidate
	err := s.deliveries.FindOne(ctx, keyHeadFilter(k.Handler, k.Key),
		options.FindOne().SetSort(keyHeadSort).SetProjection(candidateProjection)).Decode(&c)
	switch {
	case err == nil:
		return c, true, nil
	case errors.Is(err, mongo.ErrNoDocuments):
		return candidate{}, false, nil
	}
	return candidate{}, false, errorFrom("claim: read head of a parked key", err)
}

// readBlockedKeys returns the (handler, key) of each head that has a
// pending predecessor (predecessorPipeline), MaxPredecessorClauses heads
// per aggregation.
func (s *Store) readBlockedKeys(ctx context.Context, heads []keyHead) (map[orderKey]bool, error) {
	out := map[orderKey]bool{}
	for start := 0; start < len(heads); start += MaxPredecessorClauses {
		chunk := heads[start:min(start+MaxPredecessorClauses, len(heads))]
		cur, err := s.deliveries.Aggregate(ctx, predecessorPipeline(chunk))
		if err != nil {
			return nil, errorFrom("claim: read predecessors", err)
		}
		var rows []struct {
			ID struct {
				H string `bson:"h"`
				K string `bson:"k"`
			} `bson:"_id"`
		}
		if err := cur.All(ctx, &rows); err != nil {
			return nil, errorFrom("claim: read predecessors", err)
		}
		for _, r := range rows {
			out[orderKey{r.ID.H, r.ID.K}] = true
		}
	}
	return out, nil
}

// probeLanes reads up to rows due ready deliveries of handlers in lanes,
// in claim order (probeFilter, candidateSort), one find per
// MaxLanesPerSortedQuery lanes.
func (s *Store) probeLanes(ctx context.Context, lanes []int32, handlers []string, now time.Time, rows int64) ([]probeRow, error) {
	var out []probeRow
	for _, chunk := range chunkLanes(lanes) {
		cur, err := s.deliveries.Find(ctx, probeFilter(chunk, handlers, now), options.Find().
			SetSort(candidateSort).
			SetProjection(probeProjection).
			SetLimit(rows))
		if err != nil {
			return nil, errorFrom("claim: probe free lanes", err)
		}
		var got []probeRow
		if err := cur.All(ctx, &got); err != nil {
			return nil, errorFrom("claim: probe free lanes", err)
		}
		out = append(out, got...)
	}
	return out, nil
}

// takeLanes takes the lanes in want, each at the epoch read: one
// unordered bulkWrite of updateOne models (takeLaneFilter,
// takeLanePipeline). Each update is atomic on its document, and its
// filter is evaluated at the write, so a lane another claimer took first
// (epoch raised) or whose holder renewed it (lease live again) is not
// matched. Unordered, so one lane lost to a race does not stop the
// others. The bulkWrite result counts matches but does not say which
// lanes matched, so the lanes are read back: a lane is ours when its
// holder is this instance and its epoch is the one read plus one (the
// epoch only grows and the holder ID is unique, so nothing else makes
// that state).
func (s *Store) takeLanes(ctx context.Context, want []laneEpoch, owner string, expiresAt, now time.Time) ([]laneDoc, error) {
	if len(want) == 0 {
		return nil, nil
	}
	models := make([]mongo.WriteModel, len(want))
	ids := make([]int32, len(want))
	for i, w := range want {
		ids[i] = w.lane
		models[i] = mongo.NewUpdateOneModel().
			SetFilter(takeLaneFilter(w.lane, w.epoch, now)).
			SetUpdate(takeLanePipeline(owner, s.holder, expiresAt))
	}
	res, err := s.lanes.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(false))
	if err != nil {
		return nil, errorFrom("claim: take lanes", err)
	}
	if res.MatchedCount == 0 {
		return nil, nil
	}
	cur, err := s.lanes.Find(ctx, bson.D{{Key: fID, Value: in(ids)}, {Key: fHolder, Value: s.holder}},
		options.Find().SetSort(bson.D{{Key: fID, Value: 1}}))
	if err != nil {
		return nil, errorFrom("claim: read taken lanes", err)
	}
	var docs []laneDoc
	if err := cur.All(ctx, &docs); err != nil {
		return nil, errorFrom("claim: read taken lanes", err)
	}
	return takenLanes(want, docs, owner), nil
}

// takenLanes keeps the lanes of docs (read back after a take) that the
// take won: held by this holder (the caller filtered on it) for owner at
// the epoch read plus one.
func takenLanes(want []laneEpoch, docs []laneDoc, owner string) []laneDoc {
	readAt := map[int32]int64{}
	for _, w := range want {
		readAt[w.lane] = w.epoch
	}
	var out []laneDoc
	for _, d := range docs {
		e, ok := readAt[d.ID]
		if ok && d.Epoch == e+1 && d.Owner != nil && *d.Owner == owner {
			out = append(out, d)
		}
	}
	return out
}

// chargeLost charges each lost delivery of lane l one attempt, in one
// transaction:
//
//   - updateOne on the lane: {_id, epoch, holder} $pullAll lost ids
//     (laneOfHolderFilter, clearLostUpdate). No match means another
//     claimer took the lane since we read it: errFenceLost, and the
//     transaction is aborted.
//   - updateMany on the deliveries: chargeFilter, chargePipeline.
//
// Both or neither: a crash cannot leave an id charged and still listed
// (charged twice later) or cleared and not charged. This is where a
// takeover and a completion meet: the completion of a lost delivery
// deletes the document this updateMany updates. If the completion
// committed first, the charge matches nothing; if the charge commits
// first, the completion's transaction hits a write conflict, runs again
// and finds the lane's new epoch. If both are in progress, the second
// writer of the document gets the write conflict (a transaction never
// overwrites a change committed after its snapshot), so exactly one
// commits.
func (s *Store) chargeLost(ctx context.Context, l *claimLane, now time.Time) error {
	ids := slices.Clone(l.lost)
	return s.runTx(ctx, "claim: charge lost deliveries", func(sctx context.Context) error {
		res, err := s.lanes.UpdateOne(sctx, laneOfHolderFilter(l.id, l.epoch, s.holder), clearLostUpdate(ids))
		if err != nil {
			return err
		}
		if res.MatchedCount == 0 {
			return errFenceLost
		}
		_, err = s.deliveries.UpdateMany(sctx, chargeFilter(ids, l.id), chargePipeline(now))
		return err
	})
}

// readPicks reads the picked deliveries whole (picksFilter).
func (s *Store) readPicks(ctx context.Context, picks []candidate) (map[bson.ObjectID]*deliveryDoc, error) {
	out := make(map[bson.ObjectID]*deliveryDoc, len(picks))
	if len(picks) == 0 {
		return out, nil
	}
	ids := make([]bson.ObjectID, len(picks))
	for i, p := range picks {
		ids[i] = p.ID
	}
	cur, err := s.deliveries.Find(ctx, picksFilter(ids))
	if err != nil {
		return nil, errorFrom("claim: read picked deliveries", err)
	}
	var docs []deliveryDoc
	if err := cur.All(ctx, &docs); err != nil {
		return nil, errorFrom("claim: read picked deliveries", err)
	}
	for i := range docs {
		out[docs[i].ID] = &docs[i]
	}
	return out, nil
}

// recordClaim sends the claim's lane writes as one unordered bulkWrite of
// conditional updateOne models. It returns the lanes whose picks are
// recorded. When every model matched, that is every lane with picks.
// Otherwise a lane was taken over or handed back since it was read (a
// lease that expired during the claim): the lanes with picks are read
// back, and a lane counts as recorded only if this holder still holds it
// for owner at the epoch read and it lists every pick.
//
// If the bulkWrite fails, which of its writes were applied is unknown:
// the picks are given back (giveBack) and the error returned.
func (s *Store) recordClaim(ctx context.Context, writes []laneWrite, owner string) (map[int32]bool, error) {
	recorded := map[int32]bool{}
	if len(writes) == 0 {
		return recorded, nil
	}
	models := make([]mongo.WriteModel, len(writes))
	var withPicks []int32
	var pickIDs []bson.ObjectID
	for i, w := range writes {
		models[i] = w.model
		if len(w.picks) > 0 {
			withPicks = append(withPicks, w.lane)
			pickIDs = append(pickIDs, w.picks...)
		}
	}
	res, err := s.lanes.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(false))
	if err != nil {
		back := map[laneEpoch][]bson.ObjectID{}
		for _, w := range writes {
			if len(w.picks) > 0 {
				back[laneEpoch{w.lane, w.epoch}] = w.picks
			}
		}
		s.giveBack(ctx, back)
		return nil, errorFrom("claim: record in lanes", err)
	}
	if res.MatchedCount == int64(len(models)) {
		for _, lane := range withPicks {
			recorded[lane] = true
		}
		return recorded, nil
	}
	if len(withPicks) == 0 {
		return recorded, nil
	}
	cur, err := s.lanes.Find(ctx, lanesFilter(withPicks), options.Find().SetProjection(fenceProjection(pickIDs)))
	if err != nil {
		return nil, errorFrom("claim: read lanes after recording", err)
	}
	var docs []laneDoc
	if err := cur.All(ctx, &docs); err != nil {
		return nil, errorFrom("claim: read lanes after recording", err)
	}
	return recordedLanes(writes, docs, owner, s.holder), nil
}

// recordedLanes decides, from the lanes read back after a record write
// that did not match everywhere, which lanes hold their picks.
func recordedLanes(writes []laneWrite, docs []laneDoc, owner, holder string) map[int32]bool {
	byID := map[int32]laneDoc{}
	for _, d := range docs {
		byID[d.ID] = d
	}
	out := map[int32]bool{}
	for _, w := range writes {
		if len(w.picks) == 0 {
			continue
		}
		d, ok := byID[w.lane]
		if !ok || d.Epoch != w.epoch || d.Owner == nil || *d.Owner != owner || d.Holder == nil || *d.Holder != holder {
			continue
		}
		all := true
		for _, id := range w.picks {
			if !slices.Contains(d.InFlight, id) {
				all = false
				break
			}
		}
		out[w.lane] = all
	}
	return out
}

// giveBack removes ids from their lanes' inFlight lists (giveBackUpdate),
// each conditional on this holder still holding the lane at the epoch
// (laneOfHolderFilter): one unordered bulkWrite. What cannot be given
// back is kept in s.orphans for the next claim. Called with claimMu held.
func (s *Store) giveBack(ctx context.Context, back map[laneEpoch][]bson.ObjectID) {
	if len(back) == 0 {
		return
	}
	models := make([]mongo.WriteModel, 0, len(back))
	for le, ids := range back {
		models = append(models, mongo.NewUpdateOneModel().
			SetFilter(laneOfHolderFilter(le.lane, le.epoch, s.holder)).
			SetUpdate(giveBackUpdate(ids)))
	}
	if _, err := s.lanes.BulkWrite(context.WithoutCancel(ctx), models, options.BulkWrite().SetOrdered(false)); err != nil {
		s.cfg.logger.Warn("relaybus/mongo: claim: giving back unreturned picks failed; retrying at the next claim", "error", err)
		for le, ids := range back {
			if _, known := s.orphans[le]; !known && len(s.orphans) >= MaxOrphanLanes {
				// Bounded: the lane is left to its lease, which expires
				// unless this instance keeps renewing it for another
				// delivery; then its takeover charges these ids.
				continue
			}
			s.orphans[le] = append(s.orphans[le], ids...)
		}
	}
}

// MaxOrphanLanes bounds the lanes whose unreturned picks a Store keeps to
// give back at its next claim.
const MaxOrphanLanes = relaybus.LaneCount

// giveBackOrphans retries giving back what an earlier claim could not.
// Called with claimMu held.
func (s *Store) giveBackOrphans(ctx context.Context) {
	if len(s.orphans) == 0 {
		return
	}
	back := s.orphans
	s.orphans = map[laneEpoch][]bson.ObjectID{}
	s.giveBack(ctx, back)
}
