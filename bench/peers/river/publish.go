package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/berkcansavur/relaybus/bench/worker/workerkit"
)

// publish plays preload and publisher with the relaybus worker's loop
// (workerkit.Session.Publish), which takes the events, records them and
// measures the calls. Each call inserts one job per (event, handler)
// with InsertManyTx in one transaction.
func publish(ctx context.Context, w *worker, pool *pgxpool.Pool) error {
	wl := &w.Cfg.Workload
	// An insert-only client: no queues, no workers, so nothing but
	// inserts (and River's insert notifications) runs here.
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Logger: w.riverLogger()})
	if err != nil {
		return fmt.Errorf("river: client: %w", err)
	}
	normalBytes, poisonBytes := workerkit.Payloads(wl.PayloadBytes)
	normal, poison := string(normalBytes), string(poisonBytes)
	var opts *river.InsertOpts
	if wl.MaxAttempts > 0 {
		opts = &river.InsertOpts{MaxAttempts: wl.MaxAttempts}
	}
	return w.Publish(ctx, func(ctx context.Context, events []workerkit.Event) (workerkit.Outcome, error) {
		jobs := make([]river.InsertManyParams, 0, len(events)*len(wl.Handlers))
		for _, e := range events {
			payload := normal
			if e.Poison {
				payload = poison
			}
			for _, h := range wl.Handlers {
				jobs = append(jobs, river.InsertManyParams{
					Args:       deliveryArgs{EventID: e.ID, Handler: h, Key: e.Key, Payload: payload},
					InsertOpts: opts,
				})
			}
		}
		return insertOnce(ctx, pool, client, jobs)
	})
}

// insertOnce inserts jobs in one transaction. An error before the commit
// means nothing was published; an error from the commit itself means the
// outcome is unknown (the connection may have died after the server
// committed), and the validator accepts either.
func insertOnce(ctx context.Context, pool *pgxpool.Pool, client *river.Client[pgx.Tx], jobs []river.InsertManyParams) (workerkit.Outcome, error) {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return workerkit.Failed, fmt.Errorf("river: begin: %w", err)
	}
	if _, err := client.InsertManyTx(ctx, tx, jobs); err != nil {
		rbErr := tx.Rollback(context.WithoutCancel(ctx))
		return workerkit.Failed, errors.Join(fmt.Errorf("river: insert: %w", err), rbErr)
	}
	if err := tx.Commit(ctx); err != nil {
		return workerkit.Uncertain, fmt.Errorf("river: commit: %w", err)
	}
	return workerkit.Committed, nil
}
