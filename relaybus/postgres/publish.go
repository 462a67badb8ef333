package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

var _ driver.EventPublisher = (*Store)(nil)

// EventPublishTx inserts events and their deliveries in tx, in one round
// trip whatever their number, keyed or not, new or republished: two
// statements of publish.sql sent as one pipelined batch, the second
// depending on nothing the client learns from the first. publishInsert
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
// that costs no round trip of its own: the batch is sent without BEGIN
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
	ids, types []string
	keys       []*string
	payloads   [][]byte
	headers    []*string // jsonb, nil for NULL
	handlers   []*string // jsonb arrays of names
	createdAts []time.Time
	lanes      []int16     // LaneOf the event's own key and id
	dues       []time.Time // when its deliveries are due: Now, or a later Event.DeliverAt

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
	eventIDs, handlers []string
	maxAttempts        []int32
}

func (c *deliveryCols) add(eventID string, d driver.DeliverySpec) {
	c.eventIDs = append(c.eventIDs, eventID)
	c.handlers = append(c.handlers, d.Handler)
	c.maxAttempts = append(c.maxAttempts, int32(d.MaxAttempts)) // bounded by driver.MaxAttemptsLimit
}

// newPublish encodes params (validated) as the statements' arguments.
func (s *Store) newPublish(params *driver.EventPublishParams) (*publish, error) {
	n := len(params.Events)
	p := &publish{s: s, params: params,
		ids: make([]string, n), types: make([]string, n), keys: make([]*string, n),
		payloads: make([][]byte, n), headers: make([]*string, n), handlers: make([]*string, n),
		createdAts: make([]time.Time, n), lanes: make([]int16, n), dues: make([]time.Time, n)}
	var names []string
	for i, ep := range params.Events {
		e := ep.Event
		p.ids[i], p.types[i], p.payloads[i] = e.ID, e.Type, e.Payload
		if e.Key != "" {
			p.keys[i] = &e.Key
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
		p.createdAts[i] = e.CreatedAt
		if e.CreatedAt.IsZero() {
			p.createdAts[i] = params.Now
		}
		p.lanes[i] = int16(driver.LaneOf(e.Key, e.ID)) // < LaneCount
		p.dues[i] = driver.AvailableAt(e, params.Now)
	}
	return p, nil
}

// run sends the call's batch on sender and reads its results; own says
// the sender is the pool (the batch's implicit transaction), not the
// caller's transaction.
func (p *publish) run(ctx context.Context, sender batchSender, own bool) (*driver.EventPublishResult, error) {
	s, n := p.s, len(p.ids)
	var (
		inserted           []string
		insertedDeliveries int64
		numbered           int64
		found, updated     int64
		ords               []int64
		sequences          []int64
	)
	batch := &pgx.Batch{}
	batch.Queue(s.q.publishPlan)
	batch.Queue(s.q.publishInsert, p.ids, p.types, p.keys, p.payloads, p.headers, p.createdAts, p.handlers, p.lanes,
		p.unkeyed.eventIDs, p.unkeyed.handlers, p.unkeyed.maxAttempts, p.params.Now, p.dues).
		QueryRow(func(row pgx.Row) error { return row.Scan(&inserted, &insertedDeliveries) })
	// Statement 2: publishStale when no event of the call has a key, the
	// part of publishNumber such a call can use, which is cheaper to
	// start (publish.sql).
	second := s.q.publishNumber
	if !p.keyed {
		second = s.q.publishStale
	}
	batch.Queue(second, p.ids, p.keys, p.lanes, p.handlers,
		p.all.eventIDs, p.all.handlers, p.all.maxAttempts, p.params.Now, p.dues).
		QueryRow(func(row pgx.Row) error { return row.Scan(&numbered, &found, &updated, &ords, &sequences) })
	var wake *publishWakeTry
	if p.deliveries > 0 {
		wq, err := s.wakeQueries()
		if err != nil {
			return nil, err
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
	if err != nil {
		return nil, errorFrom("publish", err)
	}
	if found != int64(n) {
		// Statement 1 found or inserted every event, so only a
		// concurrent delete (a Purge) can make one vanish.
		return nil, fmt.Errorf("relaybus/postgres: publish: %d of %d events vanished during the publish (purged concurrently?)", int64(n)-found, n)
	}
	if len(ords) != len(sequences) {
		return nil, fmt.Errorf("relaybus/postgres: publish: %d sequences for %d keyed events", len(sequences), len(ords))
	}
	res := &driver.EventPublishResult{Inserted: make([]bool, n), Sequences: make([]int64, n),
		Deliveries: int(insertedDeliveries + numbered)}
	if len(inserted) > 0 {
		isNew := make(map[string]bool, len(inserted))
		for _, id := range inserted {
			isNew[id] = true
		}
		for i, id := range p.ids {
			res.Inserted[i] = isNew[id]
		}
	}
	for j, ord := range ords {
		if ord < 1 || ord > int64(n) {
			return nil, fmt.Errorf("relaybus/postgres: publish: sequence for event %d of %d", ord, n)
		}
		res.Sequences[ord-1] = sequences[j]
	}
	return res, nil
}
