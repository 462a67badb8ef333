package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

var _ driver.EventPublisher = (*Store)(nil)

// EventPublishTx inserts events and their deliveries in tx, in one round
// trip whatever their number: two statements of publish.sql sent as one
// pipelined batch, the second depending on nothing the client learns
// from the first; for a call with no keyed event, the first alone, and
// the second in a round trip of its own only when an event of the call
// existed (run has the details). publishInsert (publishInsertOne for a
// call of one event, its columns as scalars: the same writes, cheaper)
// inserts the events that do not exist yet and the deliveries of the new
// unkeyed ones; publishNumber numbers the new keyed events (locking their
// keys' counters until tx ends, so sequences follow commit order), gives
// them their deliveries, and gives events that existed deliveries only
// for the handlers their handlers list lacks, which it extends (a call
// with no keyed event sends publishStale, that part alone). A call
// that adds deliveries may announce them to wake-up listeners
// (listen.go): at most once per wakeNotifyInterval a third statement in
// the same batch tries to, and notifies when the store's last notifying
// transaction has ended; the others are announced by the next, or by a
// notification sent after them.
func (s *Store) EventPublishTx(ctx context.Context, tx pgx.Tx, params *driver.EventPublishParams) (*driver.EventPublishResult, error) {
	if err := params.Validate(s.maxPayloadBytes); err != nil {
		return nil, err
	}
	if tx == nil {
		return nil, fmt.Errorf("relaybus/postgres: publish: tx is nil: %w", relaytype.ErrInvalid)
	}
	p, err := s.newPublish(params)
	if err != nil {
		return nil, err
	}
	return p.run(ctx, tx, false)
}

// EventPublish is EventPublishTx in a transaction of the store's own
// that costs no round trip of its own (a call with no keyed event of
// which an event existed is sent twice: see run): the batch is sent without BEGIN
// or COMMIT on a connection of the pool, so the server runs its
// statements in one implicit transaction, committed when the batch ends
// (at its Sync message) and rolled back, whole, when one of them fails;
// the connection goes back to the pool idle either way. The Bus's
// Publish uses it. An error that is a server's (a *pgconn.PgError in its
// chain) means nothing was committed; any other error after the batch
// was sent (a connection lost, a context ended) leaves the outcome
// unknown, as for a COMMIT whose answer never came.
func (s *Store) EventPublish(ctx context.Context, params *driver.EventPublishParams) (*driver.EventPublishResult, error) {
	if err := params.Validate(s.maxPayloadBytes); err != nil {
		return nil, err
	}
	p, err := s.newPublish(params)
	if err != nil {
		return nil, err
	}
	return p.run(ctx, s.pool, true)
}

// batchSender is what a publish's batch is sent on: the caller's
// transaction, or the pool (an implicit transaction).
type batchSender interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// publish is one call's statements' arguments, and what they return.
type publish struct {
	s      *Store
	params *driver.EventPublishParams

	// Per event, in call order.
	ids, types array[textElem]
	keys       array[keyElem] // "" for NULL
	payloads   array[byteaElem]
	headers    []*string // jsonb, nil for NULL
	handlers   []*string // jsonb arrays of names
	createdAts array[timeElem]
	lanes      []int16         // LaneOf the event's own key and id
	dues       array[timeElem] // when its deliveries are due: Now, or a later Event.DeliverAt

	// Per delivery: every one of the call (publishNumber), and those of
	// unkeyed events (publishInsert).
	all, unkeyed deliveryCols
	// deliveries counts the deliveries each event is given, to know
	// whether the call can add any.
	deliveries int
	// keyed: some event of the call has a key (publishNumber numbers
	// it); without one, publishStale does the second statement's work.
	keyed bool
}

// deliveryCols are deliveries as three arrays.
type deliveryCols struct {
	eventIDs, handlers array[textElem]
	maxAttempts        []int32
}

func (c *deliveryCols) add(eventID string, d driver.DeliverySpec) {
	c.eventIDs = append(c.eventIDs, textElem(eventID))
	c.handlers = append(c.handlers, textElem(d.Handler))
	c.maxAttempts = append(c.maxAttempts, int32(d.MaxAttempts)) // bounded by driver.MaxAttemptsLimit
}

// newPublish encodes params (validated) as the statements' arguments.
func (s *Store) newPublish(params *driver.EventPublishParams) (*publish, error) {
	n := len(params.Events)
	p := &publish{s: s, params: params,
		ids: make(array[textElem], n), types: make(array[textElem], n), keys: make(array[keyElem], n),
		payloads: make(array[byteaElem], n), headers: make([]*string, n), handlers: make([]*string, n),
		createdAts: make(array[timeElem], n), lanes: make([]int16, n), dues: make(array[timeElem], n)}
	var names []string
	for i, ep := range params.Events {
		e := ep.Event
		p.ids[i], p.types[i], p.payloads[i] = textElem(e.ID), textElem(e.Type), e.Payload
		if e.Key != "" {
			p.keys[i] = keyElem(e.Key)
			p.keyed = true
		}
		// nil headers stay NULL and an empty map stays {}, so both read
		// back as they were given.
		if e.Headers != nil {
			b, err := json.Marshal(e.Headers)
			if err != nil {
				return nil, fmt.Errorf("relaybus/postgres: publish: event %q: encode headers: %w", e.ID, err)
			}
			h := string(b)
			p.headers[i] = &h
		}
		names = names[:0]
		for _, d := range ep.Deliveries {
			names = append(names, d.Handler)
			p.all.add(e.ID, d)
			if e.Key == "" {
				p.unkeyed.add(e.ID, d)
			}
		}
		p.deliveries += len(ep.Deliveries)
		b, err := json.Marshal(names)
		if err != nil {
			return nil, fmt.Errorf("relaybus/postgres: publish: event %q: encode handlers: %w", e.ID, err)
		}
		h := string(b)
		p.handlers[i] = &h
		p.createdAts[i] = timeElem(e.CreatedAt)
		if e.CreatedAt.IsZero() {
			p.createdAts[i] = timeElem(params.Now)
		}
		p.lanes[i] = int16(driver.LaneOf(e.Key, e.ID)) // < LaneCount
		p.dues[i] = timeElem(driver.AvailableAt(e, params.Now))
	}
	return p, nil
}

// The batches a call sends (publishOut.send).
type publishStep int

const (
	// publishBoth: publishInsert and the second statement (publishNumber,
	// or publishStale for a call with no keyed event) in one batch.
	publishBoth publishStep = iota
	// publishFirst: the first statement alone, for a call with no keyed
	// event: publishInsertAlone in the store's own transaction (it fails
	// when an event of the call existed), publishInsert in the caller's.
	publishFirst
	// publishSecond: publishStale alone, in the caller's transaction
	// after a publishFirst that did not insert every event.
	publishSecond
)

// publishBothAfterExisted is how many calls with no keyed event send
// both statements in one batch after one such call found an event of it
// existed (run).
const publishBothAfterExisted = 64

// errEventExisted is the failure publishInsertAlone gives a call of
// which an event existed: its text, in the server's message.
const errEventExisted = "relaybus: publish: an event of the call exists"

// eventExisted reports whether err is publishInsertAlone's failure.
func eventExisted(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "22P02" && strings.Contains(pgErr.Message, errEventExisted)
}

// publishOut is what a call's statements return, summed over its batches.
type publishOut struct {
	inserted           []string
	insertedDeliveries int64
	numbered           int64
	found, updated     int64
	ords, sequences    []int64
	// second: a second statement ran, and found counts the call's
	// events it found.
	second bool
}

// run sends the call's statements on sender and reads their results; own
// says the sender is the pool (the batch's implicit transaction), not
// the caller's transaction.
//
// A call with a keyed event is one batch of both statements. One with
// none needs its second statement (publishStale) only when an event of
// the call existed, which a new id's call never finds: it sends the
// first alone, and in the store's own transaction publishInsertAlone,
// which fails (rolling the transaction back whole) when an event
// existed; the call is then sent again as one batch of both. In the
// caller's transaction, which a failure would end, it sends publishInsert
// and then, only when it did not insert every event, publishStale in a
// second round trip: the snapshot that one takes after the first's
// answer sees every event another transaction committed meanwhile, as
// the second statement of one batch does.
//
// A call that finds an event existed costs more than one batch of both
// would have: two round trips in the caller's transaction, and in the
// store's own about four (pgx forgets the statements of a batch that
// failed, then deallocates and prepares them again, and the connection's
// next call alone prepares its first statement again). So after one, the
// store's next publishBothAfterExisted calls with no keyed event send one
// batch of both, as before: a publisher that republishes most of what it
// sends (BenchmarkPublishOwnRepublished) pays the probe once in that many
// calls.
func (p *publish) run(ctx context.Context, sender batchSender, own bool) (*driver.EventPublishResult, error) {
	n := len(p.ids)
	var out publishOut
	var err error
	s := p.s
	switch {
	case p.keyed:
		err = out.send(ctx, p, sender, own, publishBoth)
	case s.publishBothLeft.Load() > 0:
		s.publishBothLeft.Add(-1)
		err = out.send(ctx, p, sender, own, publishBoth)
	case own:
		if err = out.send(ctx, p, sender, own, publishFirst); eventExisted(err) {
			s.publishBothLeft.Store(publishBothAfterExisted)
			out = publishOut{}
			err = out.send(ctx, p, sender, own, publishBoth)
		}
	default:
		if err = out.send(ctx, p, sender, own, publishFirst); err == nil && len(out.inserted) < n {
			s.publishBothLeft.Store(publishBothAfterExisted)
			err = out.send(ctx, p, sender, own, publishSecond)
		}
	}
	if err != nil {
		return nil, errorFrom("publish", err)
	}
	if out.second && out.found != int64(n) {
		// Statement 1 found or inserted every event, so only a
		// concurrent delete (a Purge) can make one vanish.
		return nil, fmt.Errorf("relaybus/postgres: publish: %d of %d events vanished during the publish (purged concurrently?)", int64(n)-out.found, n)
	}
	if !out.second && len(out.inserted) != n {
		return nil, fmt.Errorf("relaybus/postgres: publish: %d of %d events inserted and no second statement", len(out.inserted), n)
	}
	if len(out.ords) != len(out.sequences) {
		return nil, fmt.Errorf("relaybus/postgres: publish: %d sequences for %d keyed events", len(out.sequences), len(out.ords))
	}
	res := &driver.EventPublishResult{Inserted: make([]bool, n), Sequences: make([]int64, n),
		Deliveries: int(out.insertedDeliveries + out.numbered)}
	if len(out.inserted) == n {
		for i := range res.Inserted {
			res.Inserted[i] = true
		}
	} else if len(out.inserted) > 0 {
		isNew := make(map[string]bool, len(out.inserted))
		for _, id := range out.inserted {
			isNew[id] = true
		}
		for i, id := range p.ids {
			res.Inserted[i] = isNew[string(id)]
		}
	}
	for j, ord := range out.ords {
		if ord < 1 || ord > int64(n) {
			return nil, fmt.Errorf("relaybus/postgres: publish: sequence for event %d of %d", ord, n)
		}
		res.Sequences[ord-1] = out.sequences[j]
	}
	return res, nil
}

// send sends one batch of the call's statements (step says which) on
// sender, after the planner settings (publishPlanOwn in the store's own
// transaction; in the caller's, publishPlan, and publishRestore last),
// and adds what they return to out. The first statement of a call of one
// event is publishInsertOne (or publishInsertOneAlone), of any other
// publishInsert (or publishInsertAlone). A batch with
// the first statement may try to announce the call's deliveries.
func (out *publishOut) send(ctx context.Context, p *publish, sender batchSender, own bool, step publishStep) error {
	s := p.s
	batch := &pgx.Batch{}
	if own {
		batch.Queue(s.q.publishPlanOwn)
	} else {
		batch.Queue(s.q.publishPlan)
	}
	if step != publishSecond {
		alone := step == publishFirst && own
		var q *pgx.QueuedQuery
		if len(p.ids) == 1 {
			// One event: its columns as scalars (publishInsertOne).
			first := s.q.publishOne
			if alone {
				first = s.q.publishOneAlone
			}
			names, maxAttempts := p.all.handlers, p.all.maxAttempts
			if names == nil { // an event without deliveries: handlers '{}', not NULL
				names, maxAttempts = array[textElem]{}, []int32{}
			}
			// Pointers into the arrays: their valuers encode them without
			// a copy (arrays.go); the key's is NULL when empty.
			q = batch.Queue(first, &p.ids[0], &p.types[0], &p.keys[0], &p.payloads[0], p.headers[0], &p.createdAts[0],
				names, p.lanes[0], &p.dues[0], maxAttempts, p.params.Now)
		} else {
			first := s.q.publishInsert
			if alone {
				first = s.q.publishAlone
			}
			q = batch.Queue(first, p.ids, p.types, p.keys, p.payloads, p.headers, p.createdAts, p.handlers, p.lanes,
				p.unkeyed.eventIDs, p.unkeyed.handlers, p.unkeyed.maxAttempts, p.params.Now, p.dues)
		}
		var inserted []string
		var deliveries int64
		q.QueryRow(func(row pgx.Row) error {
			var err error
			if alone {
				var never *int32 // the check's column: NULL, or the statement failed
				err = row.Scan(&inserted, &deliveries, &never)
			} else {
				err = row.Scan(&inserted, &deliveries)
			}
			out.inserted, out.insertedDeliveries = inserted, out.insertedDeliveries+deliveries
			return err
		})
	}
	if step != publishFirst {
		// Statement 2: publishStale when no event of the call has a key,
		// the part of publishNumber such a call can use, which is cheaper
		// to start (publish.sql).
		second := s.q.publishNumber
		if !p.keyed {
			second = s.q.publishStale
		}
		batch.Queue(second, p.ids, p.keys, p.lanes, p.handlers,
			p.all.eventIDs, p.all.handlers, p.all.maxAttempts, p.params.Now, p.dues).
			QueryRow(func(row pgx.Row) error {
				var numbered int64
				err := row.Scan(&numbered, &out.found, &out.updated, &out.ords, &out.sequences)
				out.numbered += numbered
				out.second = true
				return err
			})
	}
	var wake *publishWakeTry
	if p.deliveries > 0 && step != publishSecond {
		wq, err := s.wakeQueries()
		if err != nil {
			return err
		}
		if wake = s.wakeAtPublish(); wake != nil {
			// A notification is delivered at commit, and only then. When
			// the call adds no delivery after all (every event existed
			// with its handlers) it is a hint that costs a claim.
			batch.Queue(wq.publish, wake.prev).QueryRow(func(row pgx.Row) error {
				return row.Scan(&wake.xid, &wake.notified)
			})
		}
	}
	if !own {
		// The caller's transaction: its planner settings back as they were.
		batch.Queue(s.q.publishRestore)
	}
	err := sender.SendBatch(ctx, batch).Close()
	if wake != nil {
		s.wakeTried(wake, err)
	}
	return err
}
