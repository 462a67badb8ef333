// Package workerpg is the part of a protocol 1 worker that talks to
// PostgreSQL through pgx v5 without going through a store: opening the
// pool the config describes, and reading the key states role inspect
// reports. The relaybus worker (bench/worker) and the peers on
// PostgreSQL (bench/peers/river, bench/peers/ceiling) use it, so that
// their sessions are tagged and their key states read alike.
//
// It is apart from workerkit so that workerkit links no database
// driver; it imports pgx, bench/protocol and nothing of relaybus.
package workerpg

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/berkcansavur/relaybus/bench/protocol"
)

// OpenPool opens the pool of the config's store: its dsn, at most
// pool_size connections when that is set, and every session tagged with
// applicationName (application_name), so that pg_stat_activity and
// pg_stat_statements tell the worker's sessions from the harness's.
// configure, when not nil, changes the pool's config before the pool is
// opened; the config stays readable as pool.Config(). Errors start with
// pkg.
func OpenPool(ctx context.Context, pkg string, st *protocol.Store, applicationName string, configure func(*pgxpool.Config)) (*pgxpool.Pool, error) {
	pcfg, err := pgxpool.ParseConfig(st.DSN)
	if err != nil {
		return nil, fmt.Errorf("%s: postgres dsn: %w", pkg, err)
	}
	if st.PoolSize > 0 {
		pcfg.MaxConns = int32(st.PoolSize)
	}
	pcfg.ConnConfig.RuntimeParams["application_name"] = applicationName
	if configure != nil {
		configure(pcfg)
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("%s: postgres pool: %w", pkg, err)
	}
	return pool, nil
}

// Querier is what KeyStates reads with: a *pgxpool.Pool, a *pgx.Conn or a
// pgx.Tx.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// KeyStates reads every key's sequence counter from keys (columns key,
// last_sequence) beside the events events holds for it (columns key,
// sequence; an empty or NULL key is unkeyed), in key order, at most
// protocol.MaxKeyStates keys; truncated says there were more. A key with
// events but no counter row, or a counter without events, is reported
// too, with 0 for what is missing: those are what the validator looks
// for.
func KeyStates(ctx context.Context, q Querier, keys, events pgx.Identifier) (states []protocol.KeyState, truncated bool, err error) {
	rows, err := q.Query(ctx, `
SELECT coalesce(k.key, e.key), coalesce(k.last_sequence, 0), coalesce(e.events, 0), coalesce(e.max_sequence, 0)
FROM `+keys.Sanitize()+` k
FULL JOIN (
	SELECT key, count(*) AS events, max(sequence) AS max_sequence
	FROM `+events.Sanitize()+`
	WHERE key IS NOT NULL AND key <> ''
	GROUP BY key
) e ON e.key = k.key
ORDER BY 1
LIMIT $1`, protocol.MaxKeyStates+1)
	if err != nil {
		return nil, false, err
	}
	states, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (protocol.KeyState, error) {
		var k protocol.KeyState
		err := r.Scan(&k.Key, &k.LastSequence, &k.Events, &k.MaxSequence)
		return k, err
	})
	if err != nil {
		return nil, false, err
	}
	if len(states) > protocol.MaxKeyStates {
		return states[:protocol.MaxKeyStates], true, nil
	}
	return states, false, nil
}
