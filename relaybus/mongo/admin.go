package mongo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// DeliveryRequeue makes a dead delivery pending, due at params.Now, with
// attempts back to 0 and claims + 1 (requeueUpdate): one updateOne,
// atomic on the document. A dead delivery is in no lane's inFlight (the
// write that buried it removed it), so no lane is written. ErrNotFound
// for an ID that does not exist (or that this store cannot have issued),
// ErrNotDead for one that is not dead.
func (s *Store) DeliveryRequeue(ctx context.Context, params *driver.DeliveryRequeueParams) error {
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
	return fmt.Errorf("%srequeue: delivery %q: %w", errPrefix, id, relaytype.ErrNotFound)
}

func notDead(id string) error {
	return fmt.Errorf("%srequeue: delivery %q: %w", errPrefix, id, relaytype.ErrNotDead)
}

// ---------------------------------------------------------------------
// What is in flight, for listings and statistics.

// laneLease is the lease of a lane that has an owner.
type laneLease struct {
	epoch     int64
	owner     string
	expiresAt time.Time
}

// inFlightIndex maps each delivery listed in flight by a lane that has an
// owner to that lane's lease. A lane whose lease expired and that nobody
// took over yet still counts: listings take no Now, and until a takeover
// its deliveries are as much in flight as before (the seed's "between
// the crash and the takeover listDeliveries shows them as processing").
type inFlightIndex struct {
	lease map[bson.ObjectID]laneLease
	ids   []bson.ObjectID
}

// newInFlightIndex builds the index from owned lanes.
func newInFlightIndex(lanes []laneDoc) inFlightIndex {
	idx := inFlightIndex{lease: map[bson.ObjectID]laneLease{}}
	for _, l := range lanes {
		if l.Owner == nil {
			continue
		}
		ll := laneLease{epoch: l.Epoch, owner: *l.Owner}
		if l.LeaseExpiresAt != nil {
			ll.expiresAt = *l.LeaseExpiresAt
		}
		for _, id := range l.InFlight {
			if _, dup := idx.lease[id]; !dup {
				idx.lease[id] = ll
				idx.ids = append(idx.ids, id)
			}
		}
	}
	return idx
}

// show converts a stored delivery: processing when it is pending and in
// flight, as it is at rest otherwise.
func (idx inFlightIndex) show(d *deliveryDoc) *relaytype.Delivery {
	if ll, ok := idx.lease[d.ID]; ok && d.Status == statusPending {
		return d.asProcessing(ll.epoch, ll.owner, ll.expiresAt)
	}
	return d.toDelivery()
}

// readInFlightIndex reads the lanes that have an owner (ownedFilter): at
// most 256 documents.
func (s *Store) readInFlightIndex(ctx context.Context, op string) (inFlightIndex, error) {
	cur, err := s.lanes.Find(ctx, ownedFilter, options.Find().SetProjection(ownedLanesProjection))
	if err != nil {
		return inFlightIndex{}, errorFrom(op+": read lanes", err)
	}
	var lanes []laneDoc
	if err := cur.All(ctx, &lanes); err != nil {
		return inFlightIndex{}, errorFrom(op+": read lanes", err)
	}
	return newInFlightIndex(lanes), nil
}

// ---------------------------------------------------------------------
// Listing.

// listSource is one find of a listing: a collection and its filter.
type listSource struct {
	history bool // the completed_deliveries collection
	filter  bson.D
}

// listSources turns a listing's status filter into the finds that serve
// it. Processing and pending are both stored as pending: in flight or
// not. Completed lives in the history (when it is kept) and in rows a
// 0.1.0 store completed.
func listSources(p *driver.DeliveryListParams, after *bson.ObjectID, inFlight []bson.ObjectID, history bool) []listSource {
	base := listFilter(p, after)
	with := func(extra ...bson.E) bson.D { return append(slices.Clone(base), extra...) }
	var out []listSource
	switch p.Status {
	case "":
		out = append(out, listSource{filter: with()})
	case relaytype.StatusPending:
		f := with(bson.E{Key: fStatus, Value: statusPending})
		if len(inFlight) > 0 {
			f = append(f, bson.E{Key: "$and", Value: bson.A{bson.D{{Key: fID, Value: nin(inFlight)}}}})
		}
		out = append(out, listSource{filter: f})
	case relaytype.StatusProcessing:
		if len(inFlight) == 0 {
			return nil
		}
		out = append(out, listSource{filter: with(bson.E{Key: fStatus, Value: statusPending},
			bson.E{Key: "$and", Value: bson.A{bson.D{{Key: fID, Value: in(inFlight)}}}})})
	case relaytype.StatusCompleted:
		out = append(out, listSource{filter: with(bson.E{Key: fStatus, Value: statusCompleted})})
	case relaytype.StatusDead:
		out = append(out, listSource{filter: with(bson.E{Key: fStatus, Value: statusDead})})
	}
	if history && (p.Status == "" || p.Status == relaytype.StatusCompleted) {
		out = append(out, listSource{history: true, filter: with()})
	}
	return out
}

// DeliveryList returns one page of deliveries in _id order: one find per
// source (listSources; at most two: deliveries and, with completion
// history, its collection), merged by _id, plus one read of the lanes
// that have an owner, to show deliveries in flight as processing. It is
// an admin scan: no index serves a status or handler filter.
func (s *Store) DeliveryList(ctx context.Context, params *driver.DeliveryListParams) (*driver.DeliveryListResult, error) {
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
	idx, err := s.readInFlightIndex(ctx, "list")
	if err != nil {
		return nil, err
	}
	var rows []listed
	for _, src := range listSources(params, after, idx.ids, s.cfg.history) {
		got, err := s.listFrom(ctx, src, idx, int64(limit)+1)
		if err != nil {
			return nil, err
		}
		rows = append(rows, got...)
	}
	page, next := pageOf(rows, limit)
	res := &driver.DeliveryListResult{Deliveries: page}
	if next != nil {
		res.Next = encodeCursor(*next)
	}
	return res, nil
}

// listed is one delivery of a listing with the ID it is ordered by.
type listed struct {
	id bson.ObjectID
	d  *relaytype.Delivery
}

// pageOf merges the rows of every source by ID and cuts the page: one
// more row than the page means there is a next page, after the page's
// last ID.
func pageOf(rows []listed, limit int) ([]*relaytype.Delivery, *bson.ObjectID) {
	slices.SortFunc(rows, func(a, b listed) int { return bytes.Compare(a.id[:], b.id[:]) })
	rows = slices.CompactFunc(rows, func(a, b listed) bool { return a.id == b.id })
	var next *bson.ObjectID
	if len(rows) > limit {
		rows = rows[:limit]
		last := rows[limit-1].id
		next = &last
	}
	out := make([]*relaytype.Delivery, len(rows))
	for i, r := range rows {
		out[i] = r.d
	}
	return out, next
}

// listFrom reads one source of a listing, in _id order, up to limit.
func (s *Store) listFrom(ctx context.Context, src listSource, idx inFlightIndex, limit int64) ([]listed, error) {
	coll := s.deliveries
	if src.history {
		coll = s.history
	}
	cur, err := coll.Find(ctx, src.filter, options.Find().SetSort(bson.D{{Key: fID, Value: 1}}).SetLimit(limit))
	if err != nil {
		return nil, errorFrom("list", err)
	}
	var out []listed
	if src.history {
		var docs []historyDoc
		if err := cur.All(ctx, &docs); err != nil {
			return nil, errorFrom("list", err)
		}
		for i := range docs {
			out = append(out, listed{id: docs[i].ID, d: docs[i].toDelivery()})
		}
		return out, nil
	}
	var docs []deliveryDoc
	if err := cur.All(ctx, &docs); err != nil {
		return nil, errorFrom("list", err)
	}
	for i := range docs {
		out = append(out, listed{id: docs[i].ID, d: idx.show(&docs[i])})
	}
	return out, nil
}

// ---------------------------------------------------------------------
// Statistics.

// statisticsRow is one row of statisticsPipeline.
type statisticsRow struct {
	ID struct {
		Handler string `bson:"h"`
		Status  string `bson:"s"`
	} `bson:"_id"`
	N int64 `bson:"n"`
}

// Statistics counts deliveries per status and handler: one aggregation
// over every delivery (and one over the history, when kept), one read of
// the owned lanes and of the deliveries they have in flight (counted as
// processing, not pending), and one aggregation for each handler's oldest
// due delivery that is not in flight.
func (s *Store) Statistics(ctx context.Context, params *driver.StatisticsParams) (*relaytype.Statistics, error) {
	if err := params.Validate(); err != nil {
		return nil, err
	}
	idx, err := s.readInFlightIndex(ctx, "statistics")
	if err != nil {
		return nil, err
	}
	rows, err := s.statisticsRows(ctx, s.deliveries)
	if err != nil {
		return nil, err
	}
	if s.cfg.history {
		more, err := s.statisticsRows(ctx, s.history)
		if err != nil {
			return nil, err
		}
		rows = append(rows, more...)
	}
	running, err := s.runningPerHandler(ctx, idx.ids)
	if err != nil {
		return nil, err
	}
	st := foldStatistics(rows, running)

	cur, err := s.deliveries.Aggregate(ctx, oldestDuePipeline(bsonTime(params.Now), idx.ids))
	if err != nil {
		return nil, errorFrom("statistics: oldest due", err)
	}
	var oldest []oldestDueRow
	if err := cur.All(ctx, &oldest); err != nil {
		return nil, errorFrom("statistics: oldest due", err)
	}
	foldOldestDue(st, oldest, params.Now)
	return st, nil
}

// oldestDueRow is one row of oldestDuePipeline: a handler's oldest due
// time.
type oldestDueRow struct {
	Handler string    `bson:"_id"`
	Due     time.Time `bson:"due"`
}

// foldOldestDue sets each handler's OldestDueAge at now, and the oldest
// of them as the statistics' own.
func foldOldestDue(st *relaytype.Statistics, rows []oldestDueRow, now time.Time) {
	for _, r := range rows {
		age := max(now.Sub(r.Due), 0)
		st.OldestDueAge = max(st.OldestDueAge, age)
		// A handler the counts did not see (its deliveries were published
		// between the two reads) gets no entry of ages alone.
		if c, ok := st.Handlers[r.Handler]; ok {
			c.OldestDueAge = age
			st.Handlers[r.Handler] = c
		}
	}
}

func (s *Store) statisticsRows(ctx context.Context, coll *mongo.Collection) ([]statisticsRow, error) {
	cur, err := coll.Aggregate(ctx, statisticsPipeline())
	if err != nil {
		return nil, errorFrom("statistics", err)
	}
	var rows []statisticsRow
	if err := cur.All(ctx, &rows); err != nil {
		return nil, errorFrom("statistics", err)
	}
	return rows, nil
}

// runningPerHandler counts, per handler, the deliveries of ids that are
// still pending: the ones in flight.
func (s *Store) runningPerHandler(ctx context.Context, ids []bson.ObjectID) (map[string]int64, error) {
	out := map[string]int64{}
	if len(ids) == 0 {
		return out, nil
	}
	cur, err := s.deliveries.Find(ctx, picksFilter(ids), options.Find().SetProjection(bson.D{{Key: fHandler, Value: 1}}))
	if err != nil {
		return nil, errorFrom("statistics: read deliveries in flight", err)
	}
	var docs []struct {
		Handler string `bson:"handler"`
	}
	if err := cur.All(ctx, &docs); err != nil {
		return nil, errorFrom("statistics: read deliveries in flight", err)
	}
	for _, d := range docs {
		out[d.Handler]++
	}
	return out, nil
}

// foldStatistics adds up the aggregation rows, then moves the deliveries
// in flight (running, per handler) from pending to processing. A status
// this version does not know is not counted anywhere rather than
// miscounted.
func foldStatistics(rows []statisticsRow, running map[string]int64) *relaytype.Statistics {
	st := &relaytype.Statistics{Handlers: map[string]relaytype.Counts{}}
	for _, r := range rows {
		h := st.Handlers[r.ID.Handler]
		if !addCount(&h, r.ID.Status, r.N) {
			continue
		}
		addCount(&st.Counts, r.ID.Status, r.N)
		st.Handlers[r.ID.Handler] = h
	}
	for handler, n := range running {
		h, ok := st.Handlers[handler]
		if !ok {
			continue
		}
		n = min(n, h.Pending)
		h.Pending -= n
		h.Processing += n
		st.Pending -= n
		st.Processing += n
		st.Handlers[handler] = h
	}
	return st
}

func addCount(c *relaytype.Counts, status string, n int64) bool {
	switch relaytype.Status(status) {
	case relaytype.StatusPending:
		c.Pending += n
	case relaytype.StatusProcessing:
		c.Processing += n
	case relaytype.StatusCompleted:
		c.Completed += n
	case relaytype.StatusDead:
		c.Dead += n
	default:
		return false
	}
	return true
}
