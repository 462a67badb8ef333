package worker

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/berkcansavur/relaybus/bench/protocol"
	"github.com/berkcansavur/relaybus/bench/worker/workerkit/workerpg"
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
		pool, err := workerpg.OpenPool(ctx, w.Pkg, &w.Cfg.Store, ApplicationName, nil)
		if err != nil {
			return err
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

// pgKeyStates reads the key states of the store's tables in its default
// schema and prefix, which the worker's store uses.
func pgKeyStates(ctx context.Context, pool *pgxpool.Pool) ([]protocol.KeyState, bool, error) {
	return workerpg.KeyStates(ctx, pool,
		pgx.Identifier{postgres.DefaultSchema, postgres.DefaultTablePrefix + "keys"},
		pgx.Identifier{postgres.DefaultSchema, postgres.DefaultTablePrefix + "events"})
}
