package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

// EventPublishTx inserts events and their deliveries in tx. A call of new
// events is two statements (three when some are keyed), whatever their
// number: insert the events with their handlers, take the sequences of the
// new keyed ones, insert the deliveries. Events that exist already cost
// one more round trip: they are read, locked, and get deliveries only for
// handlers not in their handlers list, which is extended. A call that adds
// deliveries announces them to wake-up listeners (listen.go): at most
// once per wakeNotifyInterval it tries to, with the deliveries' insert in
// the same round trip, and notifies when the store's last notifying
// transaction has ended; the others are announced by the next, or by a
// notification sent after them.
func (s *Store) EventPublishTx(ctx context.Context, tx pgx.Tx, params *driver.EventPublishParams) (*driver.EventPublishResult, error) {
	if err := params.Validate(s.maxPayloadBytes); err != nil {
		return nil, err
	}
	if tx == nil {
		return nil, fmt.Errorf("relaybus/postgres: publish: tx is nil: %w", relaytype.ErrInvalid)
	}
	n := len(params.Events)
	ids := make([]string, n)
	types := make([]string, n)
	keys := make([]*string, n)
	payloads := make([][]byte, n)
	headers := make([][]byte, n)
	handlers := make([][]byte, n)
	createdAts := make([]time.Time, n)
	for i, ep := range params.Events {
		e := ep.Event
		ids[i], types[i], payloads[i] = e.ID, e.Type, e.Payload
		if e.Key != "" {
			keys[i] = &e.Key
		}
		// nil headers stay NULL and an empty map stays {}, so both read
		// back as they were given.
		if e.Headers != nil {
			b, err := json.Marshal(e.Headers)
			if err != nil {
				return nil, fmt.Errorf("relaybus/postgres: publish: event %q: encode headers: %w", e.ID, err)
			}
			headers[i] = b
		}
		names := make([]string, len(ep.Deliveries))
		for j, d := range ep.Deliveries {
			names[j] = d.Handler
		}
		b, err := json.Marshal(names)
		if err != nil {
			return nil, fmt.Errorf("relaybus/postgres: publish: event %q: encode handlers: %w", e.ID, err)
		}
		handlers[i] = b
		createdAts[i] = e.CreatedAt
		if e.CreatedAt.IsZero() {
			createdAts[i] = params.Now
		}
	}

	// Step 1: the events that are new.
	rows, err := tx.Query(ctx, s.q.publishEvents, ids, types, keys, payloads, jsonbArray(headers), createdAts, jsonbArray(handlers))
	if err != nil {
		return nil, errorFrom("publish: insert events", err)
	}
	inserted, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, errorFrom("publish: insert events", err)
	}
	isNew := make(map[string]bool, len(inserted))
	for _, id := range inserted {
		isNew[id] = true
	}

	res := &driver.EventPublishResult{Inserted: make([]bool, n), Sequences: make([]int64, n)}
	sequences := make(map[string]int64, n)

	// Step 2: sequences for the new keyed events, numbered per key in
	// call order.
	if err := s.takeSequences(ctx, tx, params.Events, isNew, sequences); err != nil {
		return nil, err
	}

	// Step 3: the events that existed, as stored, and the handlers they
	// lack.
	stored := map[string]*storedEvent{}
	if len(inserted) < n {
		var existing []string
		for _, id := range ids {
			if !isNew[id] {
				existing = append(existing, id)
			}
		}
		if stored, err = s.readExisting(ctx, tx, existing); err != nil {
			return nil, err
		}
	}

	// Step 4: the handlers added to existing events, and the deliveries.
	var dv deliveryRows
	var addedIDs []string
	var added [][]byte
	for i, ep := range params.Events {
		e := ep.Event
		res.Inserted[i] = isNew[e.ID]
		if isNew[e.ID] {
			res.Sequences[i] = sequences[e.ID]
			for _, d := range ep.Deliveries {
				dv.add(e.ID, d, e.Type, e.Key, sequences[e.ID], driver.AvailableAt(e, params.Now))
			}
			continue
		}
		st := stored[e.ID]
		if st == nil {
			// Step 1 found it, so only a concurrent delete (a Purge) can
			// make it vanish.
			return nil, fmt.Errorf("relaybus/postgres: publish: event %q vanished during the publish (purged concurrently?)", e.ID)
		}
		res.Sequences[i] = st.sequence
		var names []string
		for _, d := range ep.Deliveries {
			if slices.Contains(st.handlers, d.Handler) {
				continue
			}
			names = append(names, d.Handler)
			st.handlers = append(st.handlers, d.Handler)
			dv.add(e.ID, d, st.eventType, st.key, st.sequence, driver.AvailableAt(e, params.Now))
		}
		if len(names) > 0 {
			b, err := json.Marshal(names)
			if err != nil {
				return nil, fmt.Errorf("relaybus/postgres: publish: event %q: encode handlers: %w", e.ID, err)
			}
			addedIDs = append(addedIDs, e.ID)
			added = append(added, b)
		}
	}
	if len(dv.eventIDs) == 0 && len(addedIDs) == 0 {
		return res, nil
	}
	batch := &pgx.Batch{}
	var wake *publishWakeTry
	if len(addedIDs) > 0 {
		batch.Queue(s.q.publishHandlers, addedIDs, jsonbArray(added))
	}
	if len(dv.eventIDs) > 0 {
		batch.Queue(s.q.publishDeliveries, dv.eventIDs, dv.handlers, dv.types, dv.keys, dv.sequences, dv.lanes, dv.maxAttempts, params.Now, dv.availableAt).
			Exec(func(tag pgconn.CommandTag) error {
				res.Deliveries = int(tag.RowsAffected())
				return nil
			})
		wq, err := s.wakeQueries()
		if err != nil {
			return nil, err
		}
		if wake = s.wakeAtPublish(); wake != nil {
			// A notification is delivered at commit, and only then.
			batch.Queue(wq.publish, wake.prev).QueryRow(func(row pgx.Row) error {
				return row.Scan(&wake.xid, &wake.notified)
			})
		}
	}
	err = tx.SendBatch(ctx, batch).Close()
	if wake != nil {
		s.wakeTried(wake, err)
	}
	if err != nil {
		return nil, errorFrom("publish: insert deliveries", err)
	}
	return res, nil
}

// takeSequences runs step 2 of a publish for the new keyed events and
// records their sequences.
func (s *Store) takeSequences(ctx context.Context, tx pgx.Tx, events []*driver.EventPublish, isNew map[string]bool, sequences map[string]int64) error {
	var seqIDs, seqKeys []string
	var seqRanks []int64
	perKey := map[string]int64{}
	var keyOrder []string
	for _, ep := range events {
		e := ep.Event
		if e.Key == "" || !isNew[e.ID] {
			continue
		}
		if _, seen := perKey[e.Key]; !seen {
			keyOrder = append(keyOrder, e.Key)
		}
		perKey[e.Key]++
		seqIDs = append(seqIDs, e.ID)
		seqKeys = append(seqKeys, e.Key)
		seqRanks = append(seqRanks, perKey[e.Key])
	}
	if len(seqIDs) == 0 {
		return nil
	}
	counts := make([]int64, len(keyOrder))
	for i, k := range keyOrder {
		counts[i] = perKey[k]
	}
	seqTotals := make([]int64, len(seqIDs))
	for i, k := range seqKeys {
		seqTotals[i] = perKey[k]
	}
	rows, err := tx.Query(ctx, s.q.publishSequences, keyOrder, counts, seqIDs, seqKeys, seqRanks, seqTotals)
	if err != nil {
		return errorFrom("publish: take sequences", err)
	}
	var id string
	var seq int64
	if _, err := pgx.ForEachRow(rows, []any{&id, &seq}, func() error {
		sequences[id] = seq
		return nil
	}); err != nil {
		return errorFrom("publish: take sequences", err)
	}
	return nil
}

// storedEvent is an event that existed before a publish, as stored.
type storedEvent struct {
	eventType string
	key       string
	sequence  int64
	handlers  []string
}

// readExisting reads (and locks) the events of ids.
func (s *Store) readExisting(ctx context.Context, tx pgx.Tx, ids []string) (map[string]*storedEvent, error) {
	rows, err := tx.Query(ctx, s.q.publishExisting, ids)
	if err != nil {
		return nil, errorFrom("publish: read existing events", err)
	}
	out := make(map[string]*storedEvent, len(ids))
	var (
		id  string
		key *string
		st  storedEvent
	)
	if _, err := pgx.ForEachRow(rows, []any{&id, &st.eventType, &key, &st.sequence, &st.handlers}, func() error {
		e := st
		e.key = deref(key)
		e.handlers = slices.Clone(st.handlers)
		out[id] = &e
		return nil
	}); err != nil {
		return nil, errorFrom("publish: read existing events", err)
	}
	return out, nil
}

// deliveryRows are the columns of the deliveries a publish inserts.
type deliveryRows struct {
	eventIDs, handlers, types []string
	keys                      []*string
	sequences                 []int64
	lanes                     []int16
	maxAttempts               []int32
	availableAt               []time.Time
}

func (r *deliveryRows) add(eventID string, spec driver.DeliverySpec, eventType, key string, sequence int64, availableAt time.Time) {
	r.availableAt = append(r.availableAt, availableAt)
	r.eventIDs = append(r.eventIDs, eventID)
	r.handlers = append(r.handlers, spec.Handler)
	r.types = append(r.types, eventType)
	if key != "" {
		r.keys = append(r.keys, &key)
	} else {
		r.keys = append(r.keys, nil)
	}
	r.sequences = append(r.sequences, sequence)
	r.lanes = append(r.lanes, int16(driver.LaneOf(key, eventID)))  // < LaneCount
	r.maxAttempts = append(r.maxAttempts, int32(spec.MaxAttempts)) // bounded by driver.MaxAttemptsLimit
}

// jsonbArray turns encoded JSON documents into a value pgx sends as
// jsonb[]: a nil entry is NULL.
func jsonbArray(docs [][]byte) []*string {
	out := make([]*string, len(docs))
	for i, d := range docs {
		if d != nil {
			s := string(d)
			out[i] = &s
		}
	}
	return out
}
