package mongo

import (
	"context"
	"slices"
	"strconv"

	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// EventPublishTx inserts events and their deliveries in tx, a context
// from TxBegin (ErrInvalid otherwise: the writes would not be atomic).
//
// Per call, whatever the number of events: one read of the events that
// exist already, one counter update per distinct ordering key, one
// insertMany of events (each with its handlers list and createdAt) and
// one of deliveries (each with its laneId, driver.LaneOf of the key or
// event id). An existing event that gets new handlers costs one more
// bulkWrite for all of them.
//
// Ordering keys: the key's counter document is incremented ($inc, upsert)
// inside tx. MongoDB does not make a second transaction wait for that
// document: the second one fails with a write conflict, labelled
// TransientTransactionError, and must run again; by then the first has
// committed or aborted, so sequences follow commit order. EventPublish
// (and so the bus's Publish) retries by itself; a caller of PublishTx
// retries its own transaction (see TransientTransactionError).
//
// Idempotency reads before it writes, because inside a MongoDB
// transaction a duplicate key error aborts the whole transaction: an event
// found by the read is not inserted and keeps its stored sequence, and it
// gets deliveries only for handlers its handlers list does not name (a
// completed delivery is deleted, but its handler stays listed). Two transactions
// inserting the same new event id conflict the same way as above.
func (s *Store) EventPublishTx(ctx context.Context, tx context.Context, params *driver.EventPublishParams) (*driver.EventPublishResult, error) {
	if err := params.Validate(s.cfg.maxPayloadBytes); err != nil {
		return nil, err
	}
	sctx, err := inTx(ctx, tx)
	if err != nil {
		return nil, err
	}
	return s.publish(sctx, params)
}

// MaxPublishDuplicateRetries bounds how often EventPublish runs its
// transaction again after a duplicate key error (a concurrent publish of
// the same event id committed between its read and its insert). The
// retry's read then finds the event.
const MaxPublishDuplicateRetries = 3

// EventPublish publishes in a transaction of its own, retried by the
// driver on TransientTransactionError (for up to the driver's 120 s
// budget) and by this method on a duplicate key (at most
// MaxPublishDuplicateRetries times). It is not part of driver.Store: a
// bus that finds it by type assertion can use it instead of TxBegin,
// EventPublishTx, TxCommit, which cannot retry a conflicting transaction.
func (s *Store) EventPublish(ctx context.Context, params *driver.EventPublishParams) (*driver.EventPublishResult, error) {
	if err := params.Validate(s.cfg.maxPayloadBytes); err != nil {
		return nil, err
	}
	sess, err := s.client.StartSession()
	if err != nil {
		return nil, errorFrom("publish: start session", err)
	}
	defer sess.EndSession(ctx)
	for retry := 0; ; retry++ {
		res, err := sess.WithTransaction(ctx, func(sctx context.Context) (any, error) {
			return s.publish(sctx, params)
		}, transactionOptions())
		if err != nil {
			if mongo.IsDuplicateKeyError(err) && retry < MaxPublishDuplicateRetries {
				continue
			}
			return nil, errorFrom("publish", err)
		}
		return res.(*driver.EventPublishResult), nil
	}
}

// publish does the writes of EventPublishTx in sctx, a session context
// with a running transaction. params have been validated.
func (s *Store) publish(sctx context.Context, params *driver.EventPublishParams) (*driver.EventPublishResult, error) {
	now := bsonTime(params.Now)
	existing, err := s.existingEvents(sctx, params.Events)
	if err != nil {
		return nil, err
	}
	known, err := s.knownHandlers(sctx, existing)
	if err != nil {
		return nil, err
	}
	newEvents := make([]*relaytype.Event, 0, len(params.Events))
	for _, ep := range params.Events {
		if _, ok := existing[ep.Event.ID]; !ok {
			newEvents = append(newEvents, ep.Event)
		}
	}
	seqs, err := s.reserveSequences(sctx, newEvents)
	if err != nil {
		return nil, err
	}

	res := &driver.EventPublishResult{
		Inserted:  make([]bool, len(params.Events)),
		Sequences: make([]int64, len(params.Events)),
	}
	var eventDocs, deliveryDocs []any
	var grown []mongo.WriteModel // existing events that get more handlers
	for i, ep := range params.Events {
		ev, found := existing[ep.Event.ID]
		fresh := freshHandlers(ep.Deliveries, known[ep.Event.ID])
		if !found {
			e := *ep.Event
			if e.CreatedAt.IsZero() {
				e.CreatedAt = params.Now
			}
			doc := newEventDoc(&e, seqs[e.ID], specHandlers(fresh))
			doc.CreatedAt = bsonTime(doc.CreatedAt)
			ev = &doc
			eventDocs = append(eventDocs, doc)
			res.Inserted[i] = true
		} else if m := growHandlersModel(ev, known[ev.ID], fresh); m != nil {
			grown = append(grown, m)
		}
		res.Sequences[i] = ev.Sequence
		due := bsonTime(driver.AvailableAt(ep.Event, params.Now))
		for _, spec := range fresh {
			d := newDeliveryDoc(bson.NewObjectID(), ev, spec, now)
			d.DueAt = due // Event.DeliverAt
			deliveryDocs = append(deliveryDocs, d)
		}
	}
	if len(eventDocs) > 0 {
		if _, err := s.events.InsertMany(sctx, eventDocs); err != nil {
			return nil, errorFrom("publish: insert events", err)
		}
	}
	if len(grown) > 0 {
		// In the publishing transaction: a concurrent publish adding
		// handlers to the same event writes the same document and one of
		// the two conflicts and runs again, reading the other's handlers.
		if _, err := s.events.BulkWrite(sctx, grown, options.BulkWrite().SetOrdered(true)); err != nil {
			return nil, errorFrom("publish: add handlers to events", err)
		}
	}
	if len(deliveryDocs) > 0 {
		if _, err := s.deliveries.InsertMany(sctx, deliveryDocs); err != nil {
			return nil, errorFrom("publish: insert deliveries", err)
		}
	}
	res.Deliveries = len(deliveryDocs)
	return res, nil
}

// freshHandlers returns the specs whose handler is not in known: the
// deliveries an event gets. A handler an event ever had a delivery for
// is in its handlers list even after that delivery completed and was
// deleted, so it never runs twice.
func freshHandlers(specs []driver.DeliverySpec, known map[string]bool) []driver.DeliverySpec {
	out := make([]driver.DeliverySpec, 0, len(specs))
	for _, spec := range specs {
		if !known[spec.Handler] {
			out = append(out, spec)
		}
	}
	return out
}

func specHandlers(specs []driver.DeliverySpec) []string {
	out := make([]string, len(specs))
	for i, spec := range specs {
		out[i] = spec.Handler
	}
	return out
}

// growHandlersModel is the update that lists fresh handlers on an
// existing event, or nil when there are none and the event has its list.
// An event stored by 0.1.0 and not yet upgraded (no handlers field) gets
// the handlers of its deliveries (known, read from them) as well, so that
// the list this write creates is complete.
func growHandlersModel(ev *eventDoc, known map[string]bool, fresh []driver.DeliverySpec) mongo.WriteModel {
	add := specHandlers(fresh)
	if ev.Handlers == nil {
		for h := range known {
			add = append(add, h)
		}
		slices.Sort(add)
	} else if len(add) == 0 {
		return nil
	}
	return mongo.NewUpdateOneModel().SetFilter(bson.D{{Key: fID, Value: ev.ID}}).SetUpdate(addHandlersUpdate(add))
}

// existingEvents reads the events of the call that are stored already.
func (s *Store) existingEvents(sctx context.Context, events []*driver.EventPublish) (map[string]*eventDoc, error) {
	ids := make([]string, len(events))
	for i, ep := range events {
		ids[i] = ep.Event.ID
	}
	cur, err := s.events.Find(sctx, bson.D{{Key: fID, Value: in(ids)}})
	if err != nil {
		return nil, errorFrom("publish: read events", err)
	}
	var docs []eventDoc
	if err := cur.All(sctx, &docs); err != nil {
		return nil, errorFrom("publish: read events", err)
	}
	out := make(map[string]*eventDoc, len(docs))
	for i := range docs {
		out[docs[i].ID] = &docs[i]
	}
	return out, nil
}

// knownHandlers returns, per existing event, the handlers it has had a
// delivery for: its handlers list, or, for an event stored by 0.1.0 that
// Setup has not upgraded yet, the handlers of its deliveries (one read
// for all such events). No read in the common case.
func (s *Store) knownHandlers(sctx context.Context, existing map[string]*eventDoc) (map[string]map[string]bool, error) {
	out := make(map[string]map[string]bool, len(existing))
	var legacy []string
	for id, ev := range existing {
		if ev.Handlers == nil {
			legacy = append(legacy, id)
			continue
		}
		set := make(map[string]bool, len(*ev.Handlers))
		for _, h := range *ev.Handlers {
			set[h] = true
		}
		out[id] = set
	}
	if len(legacy) == 0 {
		return out, nil
	}
	cur, err := s.deliveries.Find(sctx,
		bson.D{{Key: fEventID, Value: in(legacy)}},
		options.Find().SetProjection(bson.D{{Key: fID, Value: 0}, {Key: fEventID, Value: 1}, {Key: fHandler, Value: 1}}))
	if err != nil {
		return nil, errorFrom("publish: read deliveries", err)
	}
	var docs []struct {
		EventID string `bson:"eventId"`
		Handler string `bson:"handler"`
	}
	if err := cur.All(sctx, &docs); err != nil {
		return nil, errorFrom("publish: read deliveries", err)
	}
	for _, d := range docs {
		if out[d.EventID] == nil {
			out[d.EventID] = map[string]bool{}
		}
		out[d.EventID][d.Handler] = true
	}
	return out, nil
}

// keyBatch is how many new events of one call share a key, in call order.
type keyBatch struct {
	key    string
	events []string
}

// groupByKey groups keyed events by key, keys in order of first
// appearance, events in call order. Unkeyed events are left out.
func groupByKey(events []*relaytype.Event) []keyBatch {
	var out []keyBatch
	index := map[string]int{}
	for _, e := range events {
		if e.Key == "" {
			continue
		}
		i, ok := index[e.Key]
		if !ok {
			i = len(out)
			index[e.Key] = i
			out = append(out, keyBatch{key: e.Key})
		}
		out[i].events = append(out[i].events, e.ID)
	}
	return out
}

// assignSequences gives the events of b the sequences last-n+1 .. last,
// in order, where last is the counter after the increment by n.
func assignSequences(b keyBatch, last int64, into map[string]int64) {
	first := last - int64(len(b.events)) + 1
	for i, id := range b.events {
		into[id] = first + int64(i)
	}
}

// reserveSequences increments the counter of each key once, by the number
// of new events of that key, and returns every keyed event's sequence.
func (s *Store) reserveSequences(sctx context.Context, events []*relaytype.Event) (map[string]int64, error) {
	out := map[string]int64{}
	for _, b := range groupByKey(events) {
		var counter struct {
			Seq int64 `bson:"seq"`
		}
		err := s.keys.FindOneAndUpdate(sctx,
			bson.D{{Key: fID, Value: b.key}},
			keyCounterUpdate(len(b.events)),
			options.FindOneAndUpdate().SetUpsert(true).SetReturnDocument(options.After),
		).Decode(&counter)
		if err != nil {
			return nil, errorFrom("publish: reserve sequences of key "+strconv.Quote(b.key), err)
		}
		assignSequences(b, counter.Seq, out)
	}
	return out, nil
}
