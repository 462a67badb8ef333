package mongo

// The reads and writes a claim makes (DeliveryClaim in claim.go runs
// them in its order): lanes, candidates, key heads, takes, charges and
// the claim's record in the lane documents, and giving back.

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/berkcansavur/relaybus/relaybus/driver"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

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
const MaxOrphanLanes = driver.LaneCount

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
