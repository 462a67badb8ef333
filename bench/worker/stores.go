package worker

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

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
		return runRole(ctx, w, relaybus.Store[pgxTx](st))
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
		return runRole(ctx, w, relaybus.Store[context.Context](st))
	}
	return fmt.Errorf("worker: unknown store kind %q", w.Cfg.Store.Kind)
}
