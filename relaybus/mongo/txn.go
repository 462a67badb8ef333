package mongo

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readconcern"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"
)

// Bounds of the store's own transactions (runTx). The driver's
// Session.WithTransaction retries for up to 120 s with no bound on the
// count; these make the bound explicit and the decision testable
// (txDecision).
const (
	// MaxTransactionAttempts bounds how often one store operation runs its
	// transaction from the start after a TransientTransactionError. Such
	// a conflict means another writer of the same documents committed
	// first; the next attempt reads its result (a new epoch, a deleted
	// delivery) and decides again, so more than a few in a row means
	// heavy contention, which the caller sees as an error.
	MaxTransactionAttempts = 10
	// MaxCommitAttempts bounds how often a commit whose outcome is
	// unknown (UnknownTransactionCommitResult) is sent again.
	MaxCommitAttempts = 5
	// txBackoffFirst and txBackoffMax bound the pause before a retried
	// transaction: growing by half each time, with jitter, so two
	// conflicting writers do not collide again in step.
	txBackoffFirst = 5 * time.Millisecond
	txBackoffMax   = 500 * time.Millisecond
)

// transactionOptions are used by every transaction the store starts:
// snapshot reads and majority writes. Snapshot is what the fences rely on:
// every read of a transaction sees one committed state, and a write to a
// document that another writer changed after that state is refused with
// a WriteConflict labelled TransientTransactionError instead of
// overwriting it. Majority, so a committed completion or publish survives
// a primary failover.
func transactionOptions() *options.TransactionOptionsBuilder {
	return options.Transaction().
		SetReadConcern(readconcern.Snapshot()).
		SetWriteConcern(writeconcern.Majority())
}

// errFenceLost is returned by a transaction body whose fence did not
// hold: runTx aborts the transaction (undoing its earlier writes) and the
// operation reports false. It carries no label, so it is never retried.
var errFenceLost = errors.New(errPrefix + "lease is no longer current")

// runTx runs body in a transaction of its own session: start, body,
// commit, retried as txDecision says. body must be safe to run again from
// the start: it gets a fresh snapshot each time and must recompute
// everything from what it reads. An error from body aborts the
// transaction.
func (s *Store) runTx(ctx context.Context, op string, body func(sctx context.Context) error) error {
	sess, err := s.client.StartSession()
	if err != nil {
		return errorFrom(op+": start session", err)
	}
	defer sess.EndSession(context.WithoutCancel(ctx))
	for attempt := 1; ; attempt++ {
		if attempt > 1 {
			if err := sleepCtx(ctx, txBackoff(attempt-1)); err != nil {
				return errorFrom(op, err)
			}
		}
		if err := sess.StartTransaction(transactionOptions()); err != nil {
			return errorFrom(op+": start transaction", err)
		}
		sctx := mongo.NewSessionContext(ctx, sess)
		if err := body(sctx); err != nil {
			// Abort even when the server has aborted already: it ends the
			// transaction on the client side so the session can start
			// another. Its own error changes nothing we could act on.
			_ = sess.AbortTransaction(context.WithoutCancel(ctx))
			if txDecision(err, false, attempt) == txRetry {
				continue
			}
			if errors.Is(err, errFenceLost) {
				return err
			}
			return errorFrom(op, err)
		}
		retry, err := commitTx(ctx, sess)
		if err == nil {
			return nil
		}
		if retry && attempt < MaxTransactionAttempts {
			continue
		}
		return errorFrom(op+": commit", err)
	}
}

// commitTx commits sess's transaction, again while the outcome is
// unknown. retry reports a commit refused with TransientTransactionError:
// the transaction was aborted and may be run again from the start.
func commitTx(ctx context.Context, sess *mongo.Session) (retry bool, err error) {
	for attempt := 1; ; attempt++ {
		err = sess.CommitTransaction(ctx)
		switch txDecision(err, true, attempt) {
		case txRetryCommit:
			continue
		case txRetry:
			return true, err
		}
		return false, err
	}
}

// txBackoff is the pause before retry number n (1 = first retry).
func txBackoff(n int) time.Duration {
	d := txBackoffFirst
	for i := 1; i < n && d < txBackoffMax; i++ {
		d += d / 2
	}
	d = min(d, txBackoffMax)
	// Full jitter over the upper half: at least d/2, at most d.
	return d/2 + rand.N(d/2+1)
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
