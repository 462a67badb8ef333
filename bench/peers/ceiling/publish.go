package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/berkcansavur/relaybus/bench/worker/workerkit"
)

// publishSQL inserts one call's events and their deliveries (one per
// handler) in one statement, so one round trip and one implicit
// transaction, committed synchronously:
//
//   - seq takes n sequence numbers for each key of the call, keys in a
//     fixed order (two publishers of several keys cannot deadlock); the
//     upsert keeps each key's counter row locked until the commit, so a
//     second publisher of the key waits and sequences follow commit
//     order (relaybus's publish does the same);
//   - ev inserts the events, numbering each key's events in call order;
//   - the deliveries are inserted from ev's rows, one per handler, with
//     the lane computed by the caller (laneOf).
//
// The foreign key from deliveries to events is checked at the end of
// the statement, when ev's rows are there.
//
// $1 ids, $2 keys (NULL: unkeyed), $3 lanes, $4 rank of the event among
// its key's in the call, $5 events of its key in the call, $6 poison;
// $7, $8 the call's keys and their counts; $9 event type, $10 handlers,
// $11 the payload, $12 the poison payload, $13 max attempts.
const publishSQL = `
WITH seq AS (
	INSERT INTO ceiling_keys AS k (key, last_sequence)
	SELECT t.key, t.n FROM unnest($7::text[], $8::bigint[]) AS t(key, n)
	ORDER BY t.key
	ON CONFLICT (key) DO UPDATE SET last_sequence = k.last_sequence + EXCLUDED.last_sequence
	RETURNING k.key, k.last_sequence
), u AS (
	SELECT * FROM unnest($1::text[], $2::text[], $3::smallint[], $4::bigint[], $5::bigint[], $6::bool[])
		AS u(id, key, lane, rank, total, poison)
), ev AS (
	INSERT INTO ceiling_events (id, type, key, sequence, payload, created_at, handlers)
	SELECT u.id, $9, u.key, coalesce(s.last_sequence - u.total + u.rank, 0),
		CASE WHEN u.poison THEN $12::bytea ELSE $11::bytea END, now(), $10::text[]
	FROM u LEFT JOIN seq s ON s.key = u.key
	RETURNING id, key, sequence
)
INSERT INTO ceiling_deliveries (event_id, handler, event_type, key, sequence, lane, max_attempts,
	available_at, created_at, updated_at)
SELECT ev.id, h.handler, $9, ev.key, ev.sequence, u.lane, $13, now(), now(), now()
FROM ev JOIN u ON u.id = ev.id CROSS JOIN unnest($10::text[]) AS h(handler)`

// publishArgs are publishSQL's arguments for one call.
type publishArgs struct {
	ids        []string
	keys       []*string
	lanes      []int16
	ranks      []int64
	totals     []int64
	poison     []bool
	callKeys   []string
	callCounts []int64
	perKey     map[string]int64
}

// build fills the arguments for events.
func (a *publishArgs) build(events []workerkit.Event) {
	n := len(events)
	a.ids, a.keys, a.lanes = make([]string, n), make([]*string, n), make([]int16, n)
	a.ranks, a.totals, a.poison = make([]int64, n), make([]int64, n), make([]bool, n)
	a.callKeys, a.callCounts = a.callKeys[:0], a.callCounts[:0]
	a.perKey = map[string]int64{}
	for i, e := range events {
		a.ids[i], a.lanes[i], a.poison[i] = e.ID, laneOf(e.Key, e.ID), e.Poison
		if e.Key == "" {
			continue
		}
		a.keys[i] = &events[i].Key
		if _, seen := a.perKey[e.Key]; !seen {
			a.callKeys = append(a.callKeys, e.Key)
		}
		a.perKey[e.Key]++
		a.ranks[i] = a.perKey[e.Key]
	}
	for i, e := range events {
		if e.Key != "" {
			a.totals[i] = a.perKey[e.Key]
		}
	}
	for _, k := range a.callKeys {
		a.callCounts = append(a.callCounts, a.perKey[k])
	}
}

// publish plays preload and publisher with the relaybus worker's loop
// (workerkit.Session.Publish), which takes the events, records them and
// measures the calls; each call is one publishSQL.
func publish(ctx context.Context, w *worker, pool *pgxpool.Pool) error {
	wl := &w.Cfg.Workload
	normal, poison := workerkit.Payloads(wl.PayloadBytes)
	maxAttempts := maxAttemptsOf(wl)
	return w.Publish(ctx, func(ctx context.Context, events []workerkit.Event) (workerkit.Outcome, error) {
		var a publishArgs
		a.build(events)
		_, err := pool.Exec(ctx, publishSQL, a.ids, a.keys, a.lanes, a.ranks, a.totals, a.poison,
			a.callKeys, a.callCounts, wl.EventType, wl.Handlers, normal, poison, maxAttempts)
		return outcomeOf(err)
	})
}

// outcomeOf says what a failed one-statement transaction did: nothing
// when the server refused it or it was never sent, unknown otherwise
// (the connection may have died after the server committed), which the
// validator accepts either way.
func outcomeOf(err error) (workerkit.Outcome, error) {
	if err == nil {
		return workerkit.Committed, nil
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) || pgconn.SafeToRetry(err) {
		return workerkit.Failed, fmt.Errorf("ceiling: publish: %w", err)
	}
	return workerkit.Uncertain, fmt.Errorf("ceiling: publish: %w", err)
}
