package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/berkcansavur/relaybus/relaybus"
)

// EventPublishTx inserts events and their deliveries in tx, in at most
// four statements whatever the number of events: insert the events, take
// the sequences of the new keyed ones, then (one round trip) insert the
// deliveries and read back every event's sequence.
func (s *Store) EventPublishTx(ctx context.Context, tx pgx.Tx, params *relaybus.EventPublishParams) (*relaybus.EventPublishResult, error) {
	if err := params.Validate(s.maxPayloadBytes); err != nil {
		return nil, err
	}
	if tx == nil {
		return nil, fmt.Errorf("relaybus/postgres: publish: tx is nil: %w", relaybus.ErrInvalid)
	}
	n := len(params.Events)
	ids := make([]string, n)
	types := make([]string, n)
	keys := make([]*string, n)
	payloads := make([][]byte, n)
	headers := make([][]byte, n)
	createdAts := make([]time.Time, n)
	var deliveryEventIDs, deliveryHandlers []string
	var deliveryMaxAttempts []int32
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
		createdAts[i] = e.CreatedAt
		if e.CreatedAt.IsZero() {
			createdAts[i] = params.Now
		}
		for _, d := range ep.Deliveries {
			deliveryEventIDs = append(deliveryEventIDs, e.ID)
			deliveryHandlers = append(deliveryHandlers, d.Handler)
			deliveryMaxAttempts = append(deliveryMaxAttempts, int32(d.MaxAttempts)) // bounded by relaybus.MaxAttemptsLimit
		}
	}

	// Step 1: the events that are new.
	rows, err := tx.Query(ctx, s.q.publishEvents, ids, types, keys, payloads, jsonbArray(headers), createdAts)
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

	// Step 2: sequences for the new keyed events, numbered per key in
	// call order.
	var seqIDs, seqKeys []string
	var seqRanks []int64
	perKey := map[string]int64{}
	var keyOrder []string
	for _, ep := range params.Events {
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
	if len(seqIDs) > 0 {
		counts := make([]int64, len(keyOrder))
		for i, k := range keyOrder {
			counts[i] = perKey[k]
		}
		seqTotals := make([]int64, len(seqIDs))
		for i, k := range seqKeys {
			seqTotals[i] = perKey[k]
		}
		if _, err := tx.Exec(ctx, s.q.publishSequences, keyOrder, counts, seqIDs, seqKeys, seqRanks, seqTotals); err != nil {
			return nil, errorFrom("publish: take sequences", err)
		}
	}

	// Step 3: deliveries and the stored sequences, in one round trip.
	batch := &pgx.Batch{}
	var deliveriesInserted int64
	if len(deliveryEventIDs) > 0 {
		batch.Queue(s.q.publishDeliveries, deliveryEventIDs, deliveryHandlers, deliveryMaxAttempts, params.Now).
			Exec(func(tag pgconn.CommandTag) error {
				deliveriesInserted = tag.RowsAffected()
				return nil
			})
	}
	sequences := make(map[string]int64, n)
	batch.Queue(s.q.publishRead, ids).Query(func(rows pgx.Rows) error {
		var id string
		var seq int64
		_, err := pgx.ForEachRow(rows, []any{&id, &seq}, func() error {
			sequences[id] = seq
			return nil
		})
		return err
	})
	if err := tx.SendBatch(ctx, batch).Close(); err != nil {
		return nil, errorFrom("publish: insert deliveries", err)
	}

	res := &relaybus.EventPublishResult{
		Inserted:   make([]bool, n),
		Sequences:  make([]int64, n),
		Deliveries: int(deliveriesInserted),
	}
	for i, id := range ids {
		seq, ok := sequences[id]
		if !ok {
			// Step 1 inserted it or found it, so only a concurrent
			// delete (a Purge) can make it vanish.
			return nil, fmt.Errorf("relaybus/postgres: publish: event %q vanished during the publish (purged concurrently?)", id)
		}
		res.Inserted[i] = isNew[id]
		res.Sequences[i] = seq
	}
	return res, nil
}

// jsonbArray turns encoded headers into a value pgx sends as jsonb[]:
// a nil entry is NULL.
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
