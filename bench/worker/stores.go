package worker

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/berkcansavur/relaybus/bench/protocol"
	"github.com/berkcansavur/relaybus/relaybus"
	mongostore "github.com/berkcansavur/relaybus/relaybus/mongo"
	"github.com/berkcansavur/relaybus/relaybus/postgres"
)

// ApplicationName tags the worker's PostgreSQL sessions, so the harness
// can tell the store's statements from its own in pg_stat_statements
// and pg_stat_activity.
const ApplicationName = "relaybus-bench-worker"

// run opens the configured store and plays the role on it.
func (w *worker) run(ctx context.Context) error {
	so, err := parseStoreOptions(w.Cfg.Store.Options)
	if err != nil {
		return err
	}
	switch w.Cfg.Store.Kind {
	case "postgres":
		pcfg, err := pgxpool.ParseConfig(w.Cfg.Store.DSN)
		if err != nil {
			return fmt.Errorf("worker: postgres dsn: %w", err)
		}
		if w.Cfg.Store.PoolSize > 0 {
			pcfg.MaxConns = int32(w.Cfg.Store.PoolSize)
		}
		pcfg.ConnConfig.RuntimeParams["application_name"] = ApplicationName
		pool, err := pgxpool.NewWithConfig(ctx, pcfg)
		if err != nil {
			return fmt.Errorf("worker: postgres pool: %w", err)
		}
		defer pool.Close()
		st, err := postgres.New(pool, &postgres.Options{CompletionHistory: so.completionHistory})
		if err != nil {
			return err
		}
		return runRole(ctx, w, relaybus.Store[pgxTx](st), func(ctx context.Context) ([]protocol.KeyState, bool, error) {
			return pgKeyStates(ctx, pool)
		})
	case "mongo":
		opts := options.Client().ApplyURI(w.Cfg.Store.MongoURI).SetAppName(ApplicationName)
		if w.Cfg.Store.PoolSize > 0 {
			opts.SetMaxPoolSize(uint64(w.Cfg.Store.PoolSize))
		}
		client, err := mongo.Connect(opts)
		if err != nil {
			return fmt.Errorf("worker: mongo connect: %w", err)
		}
		defer client.Disconnect(context.WithoutCancel(ctx))
		st, err := mongostore.New(client, &mongostore.Options{Database: w.Cfg.Store.Database, CompletionHistory: so.completionHistory})
		if err != nil {
			return err
		}
		// The MongoDB store's key counters are not read (there is no
		// server here to test a reader against): inspect says so.
		return runRole(ctx, w, relaybus.Store[context.Context](st), nil)
	}
	return fmt.Errorf("worker: unknown store kind %q", w.Cfg.Store.Kind)
}

// pgKeyStates reads every key's sequence counter and the events the
// store holds for it, from the tables of the store's default schema and
// prefix (the worker's store uses them), in key order, at most
// protocol.MaxKeyStates keys. A key with events but no counter row, or a
// counter without events, is reported too (with 0 for what is missing).
func pgKeyStates(ctx context.Context, pool *pgxpool.Pool) ([]protocol.KeyState, bool, error) {
	keys := pgx.Identifier{postgres.DefaultSchema, postgres.DefaultTablePrefix + "keys"}.Sanitize()
	events := pgx.Identifier{postgres.DefaultSchema, postgres.DefaultTablePrefix + "events"}.Sanitize()
	rows, err := pool.Query(ctx, `
SELECT coalesce(k.key, e.key), coalesce(k.last_sequence, 0), coalesce(e.events, 0), coalesce(e.max_sequence, 0)
FROM `+keys+` k
FULL JOIN (
    SELECT key, count(*) AS events, max(sequence) AS max_sequence
    FROM `+events+`
    WHERE key IS NOT NULL AND key <> ''
    GROUP BY key
) e ON e.key = k.key
ORDER BY 1
LIMIT $1`, protocol.MaxKeyStates+1)
	if err != nil {
		return nil, false, err
	}
	ks, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (protocol.KeyState, error) {
		var k protocol.KeyState
		err := r.Scan(&k.Key, &k.LastSequence, &k.Events, &k.MaxSequence)
		return k, err
	})
	if err != nil {
		return nil, false, err
	}
	if len(ks) > protocol.MaxKeyStates {
		return ks[:protocol.MaxKeyStates], true, nil
	}
	return ks, false, nil
}
