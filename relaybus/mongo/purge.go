package mongo

import (
	"context"
	"slices"
	"time"

	"github.com/berkcansavur/relaybus/relaybus/driver"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Purge bounds.
const (
	// PurgeBatch bounds the documents one delete of Purge names (an $in
	// list), and so the size of each command.
	PurgeBatch = 1000
	// MaxPurgeSweepEvents bounds the old events one Purge examines for
	// deliveries left (the orphan sweep); the next Purge starts again
	// from the oldest.
	MaxPurgeSweepEvents = 100_000
)

// Purge deletes, at most params.Limit in all (0: no bound), in batches of
// PurgeBatch: history documents completed before params.CompletedBefore,
// deliveries a 0.1.0 store completed before it, and dead deliveries last
// updated before params.DeadBefore. Each batch reads the IDs, then
// deletes them with the same condition repeated, so a delivery requeued
// in between is kept. Then, when params.CompletedBefore is set, it deletes
// the events created before it that have no delivery left: those of the
// deliveries it deleted, and the rest found by age (a completed delivery
// is deleted at completion, so the event it leaves behind is found by
// age: the orphan sweep). Without CompletedBefore (completed ones kept
// forever) it deletes no event, whatever DeadBefore says.
//
// Events outlive their deliveries on purpose: their handlers list is what
// stops a redelivered event from running a completed handler again. Once
// purged, a redelivery of the event is a new event.
func (s *Store) Purge(ctx context.Context, params *driver.PurgeParams) (*driver.PurgeResult, error) {
	if err := params.Validate(); err != nil {
		return nil, err
	}
	res := &driver.PurgeResult{}
	eventIDs := map[string]struct{}{}
	type target struct {
		coll   *mongo.Collection
		filter bson.D
	}
	var targets []target
	if !params.CompletedBefore.IsZero() {
		// The history is purged whether or not it is kept now: documents
		// from a time it was on still age out. On an empty collection this
		// is one indexed read.
		targets = append(targets, target{s.history, purgeHistoryFilter(bsonTime(params.CompletedBefore))})
		targets = append(targets, target{s.deliveries, purgeCompletedFilter(bsonTime(params.CompletedBefore))})
	}
	if !params.DeadBefore.IsZero() {
		targets = append(targets, target{s.deliveries, purgeDeadFilter(bsonTime(params.DeadBefore))})
	}
	for _, t := range targets {
		for {
			batch := int64(PurgeBatch)
			if params.Limit > 0 {
				batch = min(batch, int64(params.Limit)-res.Deliveries)
			}
			if batch <= 0 {
				break
			}
			n, full, err := s.purgeBatch(ctx, t.coll, t.filter, batch, eventIDs)
			res.Deliveries += n
			if err != nil {
				return res, err
			}
			if !full {
				break
			}
		}
	}
	// Events follow the completed retention, never the dead one: with
	// delete on complete, an event is the only trace that its completed
	// handlers ran (its handlers list keeps a republish from running them
	// again), and an event whose dead delivery was just purged may have
	// had a completed one too. So events go only when completed ones do,
	// and only those created before that cutoff; with completed ones kept
	// forever, every event is kept.
	if params.CompletedBefore.IsZero() {
		return res, nil
	}
	cutoff := bsonTime(params.CompletedBefore)
	ids := make([]string, 0, len(eventIDs))
	for id := range eventIDs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for start := 0; start < len(ids); start += PurgeBatch {
		n, err := s.deleteOrphanEvents(ctx, ids[start:min(start+PurgeBatch, len(ids))], cutoff)
		res.Events += n
		if err != nil {
			return res, err
		}
	}
	n, err := s.sweepEvents(ctx, cutoff)
	res.Events += n
	if err != nil {
		return res, err
	}
	return res, nil
}

// purgeBatch deletes up to batch documents of coll matching filter and
// records their events. full reports that the read found batch documents,
// so there may be more.
func (s *Store) purgeBatch(ctx context.Context, coll *mongo.Collection, filter bson.D, batch int64, eventIDs map[string]struct{}) (deleted int64, full bool, err error) {
	cur, err := coll.Find(ctx, filter,
		options.Find().SetLimit(batch).SetProjection(bson.D{{Key: fID, Value: 1}, {Key: fEventID, Value: 1}}))
	if err != nil {
		return 0, false, errorFrom("purge: find", err)
	}
	var docs []struct {
		ID      bson.ObjectID `bson:"_id"`
		EventID string        `bson:"eventId"`
	}
	if err := cur.All(ctx, &docs); err != nil {
		return 0, false, errorFrom("purge: find", err)
	}
	if len(docs) == 0 {
		return 0, false, nil
	}
	ids := make(bson.A, len(docs))
	for i, d := range docs {
		ids[i] = d.ID
		eventIDs[d.EventID] = struct{}{}
	}
	res, err := coll.DeleteMany(ctx, purgeDeleteFilter(ids, filter))
	if err != nil {
		return 0, false, errorFrom("purge: delete", err)
	}
	return res.DeletedCount, int64(len(docs)) == batch, nil
}

// deleteOrphanEvents deletes the events among ids that were created before
// cutoff and have no delivery left, in one transaction: a distinct of the deliveries' eventIds, then
// a deleteMany of the rest. A publish that adds a delivery to one of
// these events concurrently writes the event document (its handlers)
// too, so one of the two transactions meets a write conflict and runs
// again: the event is never deleted under a delivery committed beside
// it.
func (s *Store) deleteOrphanEvents(ctx context.Context, ids []string, cutoff time.Time) (int64, error) {
	var deleted int64
	err := s.runTx(ctx, "purge: delete events", func(sctx context.Context) error {
		deleted = 0
		raw, err := s.deliveries.Distinct(sctx, fEventID, bson.D{{Key: fEventID, Value: in(ids)}}).Raw()
		if err != nil {
			return err
		}
		values, err := raw.Values()
		if err != nil {
			return err
		}
		referenced := map[string]bool{}
		for _, v := range values {
			if str, ok := v.StringValueOK(); ok {
				referenced[str] = true
			}
		}
		orphans := orphanEvents(ids, referenced)
		if len(orphans) == 0 {
			return nil
		}
		res, err := s.events.DeleteMany(sctx, bson.D{{Key: fID, Value: in(orphans)}, {Key: fCreatedAt, Value: bson.D{{Key: "$lt", Value: cutoff}}}})
		if err != nil {
			return err
		}
		deleted = res.DeletedCount
		return nil
	})
	return deleted, err
}

// orphanEvents returns the ids that no delivery references.
func orphanEvents(ids []string, referenced map[string]bool) []string {
	var out []string
	for _, id := range ids {
		if !referenced[id] {
			out = append(out, id)
		}
	}
	return out
}

// sweepEvents deletes events created before cutoff that have no delivery
// left: pages of PurgeBatch in (createdAt, _id) order through the
// events' createdAt index (sweepEventsFilter), each page's orphans
// deleted by deleteOrphanEvents, at most MaxPurgeSweepEvents examined.
func (s *Store) sweepEvents(ctx context.Context, cutoff time.Time) (int64, error) {
	var deleted int64
	var afterCreated *time.Time
	var afterID string
	for examined := 0; examined < MaxPurgeSweepEvents; {
		cur, err := s.events.Find(ctx, sweepEventsFilter(cutoff, afterCreated, afterID), options.Find().
			SetSort(sweepEventsSort).
			SetLimit(int64(min(PurgeBatch, MaxPurgeSweepEvents-examined))).
			SetProjection(bson.D{{Key: fID, Value: 1}, {Key: fCreatedAt, Value: 1}}))
		if err != nil {
			return deleted, errorFrom("purge: sweep events", err)
		}
		var page []struct {
			ID        string    `bson:"_id"`
			CreatedAt time.Time `bson:"createdAt"`
		}
		if err := cur.All(ctx, &page); err != nil {
			return deleted, errorFrom("purge: sweep events", err)
		}
		if len(page) == 0 {
			return deleted, nil
		}
		examined += len(page)
		ids := make([]string, len(page))
		for i, e := range page {
			ids[i] = e.ID
		}
		n, err := s.deleteOrphanEvents(ctx, ids, cutoff)
		deleted += n
		if err != nil {
			return deleted, err
		}
		last := page[len(page)-1]
		afterCreated, afterID = &last.CreatedAt, last.ID
		if len(page) < PurgeBatch {
			return deleted, nil
		}
	}
	return deleted, nil
}
