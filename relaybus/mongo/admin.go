package mongo

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/berkcansavur/relaybus/relaybus"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// DeliveryRequeue makes a dead delivery pending, due at params.Now, with
// attempts back to 0. ErrNotFound for an ID that does not exist (or that
// this store cannot have issued), ErrNotDead for one that is not dead.
func (s *Store) DeliveryRequeue(ctx context.Context, params *relaybus.DeliveryRequeueParams) error {
	if err := params.Validate(); err != nil {
		return err
	}
	id, ok := parseDeliveryID(params.DeliveryID)
	if !ok {
		return notFound(params.DeliveryID)
	}
	res, err := s.deliveries.UpdateOne(ctx, requeueFilter(id), requeueUpdate(bsonTime(params.Now)))
	if err != nil {
		return errorFrom("requeue", err)
	}
	if res.MatchedCount == 1 {
		return nil
	}
	// Not requeued: read why. A concurrent change between the two
	// commands gives an answer that was true a moment earlier or later.
	err = s.deliveries.FindOne(ctx, bson.D{{Key: fID, Value: id}}, options.FindOne().SetProjection(bson.D{{Key: fStatus, Value: 1}})).Err()
	switch {
	case err == nil:
		return notDead(params.DeliveryID)
	case errors.Is(err, mongo.ErrNoDocuments):
		return notFound(params.DeliveryID)
	}
	return errorFrom("requeue: read delivery", err)
}

func notFound(id string) error {
	return fmt.Errorf("%srequeue: delivery %q: %w", errPrefix, id, relaybus.ErrNotFound)
}

func notDead(id string) error {
	return fmt.Errorf("%srequeue: delivery %q: %w", errPrefix, id, relaybus.ErrNotDead)
}

// DeliveryList returns one page of deliveries in _id order.
func (s *Store) DeliveryList(ctx context.Context, params *relaybus.DeliveryListParams) (*relaybus.DeliveryListResult, error) {
	limit, err := params.Validate()
	if err != nil {
		return nil, err
	}
	var after *bson.ObjectID
	if params.After != "" {
		oid, err := decodeCursor(params.After)
		if err != nil {
			return nil, err
		}
		after = &oid
	}
	// One more than the page, to know whether there is a next page.
	cur, err := s.deliveries.Find(ctx, listFilter(params, after),
		options.Find().SetSort(bson.D{{Key: fID, Value: 1}}).SetLimit(int64(limit)+1))
	if err != nil {
		return nil, errorFrom("list", err)
	}
	var docs []deliveryDoc
	if err := cur.All(ctx, &docs); err != nil {
		return nil, errorFrom("list", err)
	}
	res := &relaybus.DeliveryListResult{}
	if len(docs) > limit {
		docs = docs[:limit]
		res.Next = encodeCursor(docs[limit-1].ID)
	}
	res.Deliveries = make([]*relaybus.Delivery, len(docs))
	for i := range docs {
		res.Deliveries[i] = docs[i].toDelivery()
	}
	return res, nil
}

// statisticsRow is one row of statisticsPipeline.
type statisticsRow struct {
	ID struct {
		Handler string `bson:"h"`
		Status  string `bson:"s"`
	} `bson:"_id"`
	N int64 `bson:"n"`
}

// Statistics counts deliveries per status and handler (one aggregation
// over every delivery) and finds the oldest due pending one (one indexed
// read).
func (s *Store) Statistics(ctx context.Context, params *relaybus.StatisticsParams) (*relaybus.Statistics, error) {
	if err := params.Validate(); err != nil {
		return nil, err
	}
	cur, err := s.deliveries.Aggregate(ctx, statisticsPipeline())
	if err != nil {
		return nil, errorFrom("statistics", err)
	}
	var rows []statisticsRow
	if err := cur.All(ctx, &rows); err != nil {
		return nil, errorFrom("statistics", err)
	}
	st := foldStatistics(rows)

	var oldest struct {
		DueAt time.Time `bson:"dueAt"`
	}
	err = s.deliveries.FindOne(ctx, oldestDueFilter(bsonTime(params.Now)),
		options.FindOne().SetSort(bson.D{{Key: fDueAt, Value: 1}}).SetProjection(bson.D{{Key: fDueAt, Value: 1}})).Decode(&oldest)
	switch {
	case err == nil:
		st.OldestDueAge = max(params.Now.Sub(oldest.DueAt), 0)
	case !errors.Is(err, mongo.ErrNoDocuments):
		return nil, errorFrom("statistics: oldest due", err)
	}
	return st, nil
}

// foldStatistics adds up the aggregation rows. A status this version does
// not know is not counted anywhere rather than miscounted.
func foldStatistics(rows []statisticsRow) *relaybus.Statistics {
	st := &relaybus.Statistics{Handlers: map[string]relaybus.Counts{}}
	for _, r := range rows {
		h := st.Handlers[r.ID.Handler]
		if !addCount(&h, r.ID.Status, r.N) {
			continue
		}
		addCount(&st.Counts, r.ID.Status, r.N)
		st.Handlers[r.ID.Handler] = h
	}
	return st
}

func addCount(c *relaybus.Counts, status string, n int64) bool {
	switch relaybus.Status(status) {
	case relaybus.StatusPending:
		c.Pending += n
	case relaybus.StatusProcessing:
		c.Processing += n
	case relaybus.StatusCompleted:
		c.Completed += n
	case relaybus.StatusDead:
		c.Dead += n
	default:
		return false
	}
	return true
}

// PurgeBatch bounds the deliveries one delete of Purge names (an $in
// list), and so the size of each command.
const PurgeBatch = 1000

// Purge deletes completed deliveries completed before
// params.CompletedBefore and dead ones last updated before
// params.DeadBefore, at most params.Limit in all (0: no bound), in batches
// of PurgeBatch: each batch reads the IDs, then deletes them with the
// same condition repeated, so a delivery requeued in between is kept.
// Then it deletes the events of the purged deliveries that have no
// delivery left.
//
// Events and deliveries are not deleted in one transaction: a publish
// that adds a delivery to an event (same ID, new handler) at the moment
// Purge deletes the event leaves a delivery without its event. The
// delivery still runs (it carries a copy of the payload); a later publish
// of that event ID is then a new event.
func (s *Store) Purge(ctx context.Context, params *relaybus.PurgeParams) (*relaybus.PurgeResult, error) {
	if err := params.Validate(); err != nil {
		return nil, err
	}
	res := &relaybus.PurgeResult{}
	eventIDs := map[string]struct{}{}
	var filters []bson.D
	if !params.CompletedBefore.IsZero() {
		filters = append(filters, purgeCompletedFilter(bsonTime(params.CompletedBefore)))
	}
	if !params.DeadBefore.IsZero() {
		filters = append(filters, purgeDeadFilter(bsonTime(params.DeadBefore)))
	}
	for _, filter := range filters {
		for {
			batch := int64(PurgeBatch)
			if params.Limit > 0 {
				batch = min(batch, int64(params.Limit)-res.Deliveries)
			}
			if batch <= 0 {
				break
			}
			n, full, err := s.purgeBatch(ctx, filter, batch, eventIDs)
			res.Deliveries += n
			if err != nil {
				return res, err
			}
			if !full {
				break
			}
		}
	}
	n, err := s.purgeEvents(ctx, eventIDs)
	res.Events = n
	return res, err
}

// purgeBatch deletes up to batch deliveries matching filter and records
// their events. full reports that the read found batch deliveries, so
// there may be more.
func (s *Store) purgeBatch(ctx context.Context, filter bson.D, batch int64, eventIDs map[string]struct{}) (deleted int64, full bool, err error) {
	cur, err := s.deliveries.Find(ctx, filter,
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
	res, err := s.deliveries.DeleteMany(ctx, purgeDeleteFilter(ids, filter))
	if err != nil {
		return 0, false, errorFrom("purge: delete deliveries", err)
	}
	return res.DeletedCount, int64(len(docs)) == batch, nil
}

// purgeDeleteFilter names the IDs a purge read and repeats its condition.
func purgeDeleteFilter(ids bson.A, filter bson.D) bson.D {
	return append(bson.D{{Key: fID, Value: bson.D{{Key: "$in", Value: ids}}}}, filter...)
}

// purgeEvents deletes the events among ids that have no delivery left.
func (s *Store) purgeEvents(ctx context.Context, ids map[string]struct{}) (int64, error) {
	all := make([]string, 0, len(ids))
	for id := range ids {
		all = append(all, id)
	}
	var deleted int64
	for start := 0; start < len(all); start += PurgeBatch {
		chunk := all[start:min(start+PurgeBatch, len(all))]
		referenced, err := s.deliveries.Distinct(ctx, fEventID, bson.D{{Key: fEventID, Value: bson.D{{Key: "$in", Value: chunk}}}}).Raw()
		if err != nil {
			return deleted, errorFrom("purge: read remaining deliveries", err)
		}
		values, err := referenced.Values()
		if err != nil {
			return deleted, errorFrom("purge: read remaining deliveries", err)
		}
		keep := make(map[string]bool, len(values))
		for _, v := range values {
			if str, ok := v.StringValueOK(); ok {
				keep[str] = true
			}
		}
		orphans := make(bson.A, 0, len(chunk))
		for _, id := range chunk {
			if !keep[id] {
				orphans = append(orphans, id)
			}
		}
		if len(orphans) == 0 {
			continue
		}
		res, err := s.events.DeleteMany(ctx, bson.D{{Key: fID, Value: bson.D{{Key: "$in", Value: orphans}}}})
		if err != nil {
			return deleted, errorFrom("purge: delete events", err)
		}
		deleted += res.DeletedCount
	}
	return deleted, nil
}
