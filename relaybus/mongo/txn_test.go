package mongo

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

var (
	transient     = mongo.CommandError{Code: codeWriteConflict, Name: "WriteConflict", Labels: []string{labelTransientTransaction}}
	unknownCommit = mongo.CommandError{Code: 91, Name: "ShutdownInProgress", Labels: []string{labelUnknownCommitResult}}
	commitTimeout = mongo.CommandError{Code: codeMaxTimeMSExpired, Name: "MaxTimeMSExpired", Labels: []string{labelUnknownCommitResult}}
	// A write conflict reported inside a bulk write still carries its
	// label: the driver puts labels on the exception.
	transientBulk = mongo.BulkWriteException{Labels: []string{labelTransientTransaction},
		WriteErrors: []mongo.BulkWriteError{{WriteError: mongo.WriteError{Code: codeWriteConflict}}}}
)

func TestTxDecision(t *testing.T) {
	t.Parallel()
	wrapped := func(err error) error { return fmt.Errorf("relaybus/mongo: op: %w", err) }
	tests := []struct {
		name    string
		err     error
		commit  bool
		attempt int
		want    txAction
	}{
		{"nil", nil, false, 1, txFail},
		{"write conflict in the body: run again", transient, false, 1, txRetry},
		{"wrapped: still recognised", wrapped(transient), false, 3, txRetry},
		{"bulk write conflict", transientBulk, false, 1, txRetry},
		{"write conflict at the last attempt", transient, false, MaxTransactionAttempts, txFail},
		{"write conflict at commit: run again", transient, true, 1, txRetry},
		{"unknown commit result: commit again", unknownCommit, true, 1, txRetryCommit},
		{"unknown commit result at the last commit", unknownCommit, true, MaxCommitAttempts, txFail},
		{"unknown commit result outside a commit is not a commit retry", unknownCommit, false, 1, txFail},
		{"commit out of time: not again", commitTimeout, true, 1, txFail},
		{"a fence that did not hold: never retried", errFenceLost, false, 1, txFail},
		{"write conflict without the label: not the retry contract", mongo.CommandError{Code: codeWriteConflict}, false, 1, txFail},
		{"duplicate key", mongo.WriteException{WriteErrors: []mongo.WriteError{{Code: codeDuplicateKey}}}, false, 1, txFail},
		{"canceled", context.Canceled, false, 1, txFail},
		{"deadline, even labelled", fmt.Errorf("%w: %w", context.DeadlineExceeded, transient), false, 1, txFail},
		{"other", errors.New("boom"), false, 1, txFail},
	}
	for _, tt := range tests {
		if got := txDecision(tt.err, tt.commit, tt.attempt); got != tt.want {
			t.Errorf("%s: txDecision = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestConflictClassification(t *testing.T) {
	t.Parallel()
	if !writeConflict(transient) || !writeConflict(transientBulk) || writeConflict(errors.New("x")) {
		t.Error("writeConflict")
	}
	if !indexNotFound(mongo.CommandError{Code: codeIndexNotFound}) || !indexNotFound(mongo.CommandError{Code: codeNamespaceNotFound}) ||
		indexNotFound(mongo.CommandError{Code: 1}) {
		t.Error("indexNotFound")
	}
	if !namespaceExists(mongo.CommandError{Code: codeNamespaceExists}) || namespaceExists(transient) {
		t.Error("namespaceExists")
	}
	if !TransientTransactionError(errorFrom("op", transientBulk)) {
		t.Error("TransientTransactionError does not see a bulk write's label through errorFrom")
	}
}

func TestTxBackoff(t *testing.T) {
	t.Parallel()
	prevMax := time.Duration(0)
	for n := 1; n < 40; n++ {
		upper := txBackoffFirst
		for i := 1; i < n && upper < txBackoffMax; i++ {
			upper += upper / 2
		}
		upper = min(upper, txBackoffMax)
		for range 50 {
			d := txBackoff(n)
			if d < upper/2 || d > upper || d > txBackoffMax {
				t.Fatalf("txBackoff(%d) = %v, want in [%v, %v]", n, d, upper/2, upper)
			}
		}
		if upper < prevMax {
			t.Fatalf("the bound shrank at retry %d", n)
		}
		prevMax = upper
	}
}

// offlineClient points at a port nothing listens on. Starting, aborting
// and committing a transaction that ran no operation send nothing, so
// runTx's loop runs without a server; any operation would fail.
func offlineClient(t *testing.T) *mongo.Client {
	t.Helper()
	client, err := mongo.Connect(options.Client().
		ApplyURI("mongodb://127.0.0.1:1/?directConnection=true").
		SetServerSelectionTimeout(100 * time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
	return client
}

func offlineInternalStore(t *testing.T) *Store {
	t.Helper()
	s, err := New(offlineClient(t), &Options{Database: "offline"})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestRunTx(t *testing.T) {
	t.Parallel()
	s := offlineInternalStore(t)
	ctx := context.Background()

	calls := 0
	err := s.runTx(ctx, "op", func(sctx context.Context) error {
		calls++
		if mongo.SessionFromContext(sctx) == nil {
			t.Error("the body's context carries no session")
		}
		return nil
	})
	if err != nil || calls != 1 {
		t.Fatalf("a body that succeeds: %v after %d calls", err, calls)
	}

	calls = 0
	err = s.runTx(ctx, "op", func(context.Context) error { calls++; return transient })
	if calls != MaxTransactionAttempts || !TransientTransactionError(err) || err.Error()[:len("relaybus/mongo: op: ")] != "relaybus/mongo: op: " {
		t.Fatalf("a body that always conflicts: %v after %d calls, want %d attempts and the labelled error", err, calls, MaxTransactionAttempts)
	}

	calls = 0
	err = s.runTx(ctx, "op", func(context.Context) error {
		calls++
		if calls < 3 {
			return transient
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Fatalf("a body that conflicts twice: %v after %d calls", err, calls)
	}

	calls = 0
	err = s.runTx(ctx, "op", func(context.Context) error { calls++; return errFenceLost })
	if !errors.Is(err, errFenceLost) || calls != 1 {
		t.Fatalf("a fence that does not hold: %v after %d calls, want errFenceLost at once", err, calls)
	}

	cctx, cancel := context.WithCancel(ctx)
	calls = 0
	err = s.runTx(cctx, "op", func(context.Context) error { calls++; cancel(); return transient })
	if !errors.Is(err, context.Canceled) || calls != 1 {
		t.Fatalf("canceled between attempts: %v after %d calls", err, calls)
	}
}
