package worker

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/berkcansavur/relaybus/bench/worker/workerkit"
	"github.com/berkcansavur/relaybus/relaybus"
)

// publish plays preload and publisher with workerkit's loop; each call
// publishes its events through the Bus's Publish, in one transaction of
// the store's (see publishOnce).
func publish[TTx any](ctx context.Context, w *worker, st relaybus.Store[TTx]) error {
	wl := &w.Cfg.Workload
	bus, err := relaybus.New(st, relaybus.Config{Logger: w.Log, MaxPayloadBytes: relaybus.DefaultMaxPayloadBytes})
	if err != nil {
		return err
	}
	for _, h := range wl.Handlers {
		if err := bus.Declare(wl.EventType, h, w.workloadHandlerOptions()); err != nil {
			return err
		}
	}
	normal, poison := workerkit.Payloads(wl.PayloadBytes)
	return w.Publish(ctx, func(ctx context.Context, evs []workerkit.Event) (workerkit.Outcome, error) {
		events := make([]*relaybus.Event, len(evs))
		for i, e := range evs {
			payload := normal
			if e.Poison {
				payload = poison
			}
			events[i] = &relaybus.Event{ID: e.ID, Type: e.Type, Key: e.Key, Payload: payload}
		}
		return publishOnce(ctx, bus, events)
	})
}

// publishOnce publishes events with the Bus's Publish: one transaction
// of the store's (with the PostgreSQL store, one round trip), which the
// bus gathers with the calls of the process's other publishers into
// group commits. A call the bus refused before writing anything
// (ErrInvalid, ErrClosed) published nothing; so did one whose
// transaction the server answered with an error (it was rolled back
// whole). Any other error (a connection lost, a call that stopped
// waiting for its group) leaves the outcome unknown, and the validator
// accepts either for it.
func publishOnce[TTx any](ctx context.Context, bus *relaybus.Bus[TTx], events []*relaybus.Event) (workerkit.Outcome, error) {
	err := bus.Publish(ctx, events...)
	switch {
	case err == nil:
		return workerkit.Committed, nil
	case errors.Is(err, relaybus.ErrInvalid), errors.Is(err, relaybus.ErrClosed):
		return workerkit.Failed, err
	}
	return commitOutcome(err), err
}

// commitOutcome classifies a failed commit: definitely not committed
// when the server answered (PostgreSQL: any server error, or the
// rollback pgx reports for a commit of a failed transaction; MongoDB: a
// server error without the UnknownTransactionCommitResult label), else
// unknown.
func commitOutcome(err error) workerkit.Outcome {
	var pgErr *pgconn.PgError
	var mongoErr mongo.ServerError
	switch {
	case errors.Is(err, pgx.ErrTxCommitRollback), errors.As(err, &pgErr):
		return workerkit.Failed
	case errors.As(err, &mongoErr):
		if mongoErr.HasErrorLabel("UnknownTransactionCommitResult") || mongo.IsNetworkError(err) || mongo.IsTimeout(err) {
			return workerkit.Uncertain
		}
		return workerkit.Failed
	}
	return workerkit.Uncertain
}
