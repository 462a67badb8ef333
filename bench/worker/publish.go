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
// publishes its events through the Bus in one transaction of the store's.
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
		return publishOnce(ctx, bus, st, events)
	})
}

// publishOnce publishes events in one transaction of the store's. An
// error before the commit means nothing was published; so does a commit
// that the server answered with an error or reported rolled back. Only a
// commit whose answer never came (the connection died, the call timed
// out) has an unknown outcome, and the validator accepts either for it.
func publishOnce[TTx any](ctx context.Context, bus *relaybus.Bus[TTx], st relaybus.Store[TTx], events []*relaybus.Event) (workerkit.Outcome, error) {
	tx, err := st.TxBegin(ctx)
	if err != nil {
		return workerkit.Failed, err
	}
	if err := bus.PublishTx(ctx, tx, events...); err != nil {
		rbErr := st.TxRollback(ctx, tx)
		return workerkit.Failed, errors.Join(err, rbErr)
	}
	if err := st.TxCommit(ctx, tx); err != nil {
		return commitOutcome(err), err
	}
	return workerkit.Committed, nil
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
