package main

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/berkcansavur/relaybus/bench/protocol"
	"github.com/berkcansavur/relaybus/bench/worker/workerkit"
	"github.com/berkcansavur/relaybus/bench/worker/workerkit/workerpg"
)

// ApplicationName tags this worker's PostgreSQL sessions, so that they
// can be told from the harness's and from a relaybus worker's in
// pg_stat_activity.
const ApplicationName = "relaybus-bench-ceiling"

// run opens the pool (setup, inspect, publishing) and plays the role; a
// dispatcher opens its own connections, one per claim stream.
func (w *worker) run(ctx context.Context) error {
	pool, err := workerpg.OpenPool(ctx, peerName, &w.Cfg.Store, ApplicationName, func(pcfg *pgxpool.Config) {
		if w.Cfg.Role == protocol.RoleDispatcher {
			// The dispatcher's streams connect on their own (dispatch.go).
			pcfg.MaxConns = 1
		}
	})
	if err != nil {
		return err
	}
	defer pool.Close()
	return w.RunRole(ctx, workerkit.Roles{
		Setup:    func(ctx context.Context) error { return setup(ctx, pool) },
		Inspect:  func(ctx context.Context) (*protocol.Inspect, error) { return inspect(ctx, pool) },
		Publish:  func(ctx context.Context) error { return publish(ctx, w, pool) },
		Dispatch: func(ctx context.Context) error { return dispatch(ctx, w, pool.Config().ConnConfig) },
	})
}

// inspect reads the tables' state: pending and dead deliveries by
// status, completed ones as the deliveries the events were published
// with (events.handlers) less those left, and the dead letters. Nothing
// is processing between two transactions: a delivery is in flight only
// inside a dispatcher's open transaction, where it is still a pending
// row to everyone else.
func inspect(ctx context.Context, pool *pgxpool.Pool) (*protocol.Inspect, error) {
	in := &protocol.Inspect{}
	var published int64
	err := pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM ceiling_deliveries WHERE status = 'pending'),
		(SELECT count(*) FROM ceiling_deliveries WHERE status = 'dead'),
		(SELECT coalesce(sum(cardinality(handlers)), 0)::bigint FROM ceiling_events)`).Scan(&in.Pending, &in.Dead, &published)
	if err != nil {
		return nil, fmt.Errorf("ceiling: counting deliveries: %w", err)
	}
	in.Completed = published - in.Pending - in.Dead
	if in.Keys, in.KeysTruncated, err = keyStates(ctx, pool); err != nil {
		return nil, fmt.Errorf("ceiling: inspect: key states: %w", err)
	}
	in.KeysReported = true
	if in.Dead == 0 {
		return in, nil
	}
	rows, err := pool.Query(ctx, `SELECT event_id, handler, attempts, coalesce(last_error, '')
		FROM ceiling_deliveries WHERE status = 'dead' ORDER BY id LIMIT $1`, protocol.MaxDeadLetters+1)
	if err != nil {
		return nil, fmt.Errorf("ceiling: listing dead letters: %w", err)
	}
	in.DeadLetters, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (protocol.DeadLetter, error) {
		var dl protocol.DeadLetter
		err := row.Scan(&dl.EventID, &dl.Handler, &dl.Attempts, &dl.Error)
		return dl, err
	})
	if err != nil {
		return nil, fmt.Errorf("ceiling: listing dead letters: %w", err)
	}
	if len(in.DeadLetters) > protocol.MaxDeadLetters {
		in.DeadLetters, in.DeadLettersTruncated = in.DeadLetters[:protocol.MaxDeadLetters], true
	}
	return in, nil
}

// keyStates reads the key states of ceiling_keys and ceiling_events, as
// the relaybus worker reads its store's.
func keyStates(ctx context.Context, pool *pgxpool.Pool) ([]protocol.KeyState, bool, error) {
	return workerpg.KeyStates(ctx, pool, pgx.Identifier{"ceiling_keys"}, pgx.Identifier{"ceiling_events"})
}
