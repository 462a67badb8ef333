package worker

import (
	"context"
	"fmt"
	"io"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/berkcansavur/relaybus/bench/worker/workerkit"
)

func TestCommitOutcome(t *testing.T) {
	t.Parallel()
	wrap := func(err error) error { return fmt.Errorf("relaybus/store: commit: %w", err) }
	for _, tc := range []struct {
		name string
		err  error
		want workerkit.Outcome
	}{
		{"server rolled back", wrap(pgx.ErrTxCommitRollback), workerkit.Failed},
		{"server error", wrap(&pgconn.PgError{Code: "40001", Message: "could not serialize access"}), workerkit.Failed},
		{"connection lost", wrap(io.ErrUnexpectedEOF), workerkit.Uncertain},
		{"timed out", wrap(context.DeadlineExceeded), workerkit.Uncertain},
		{"mongo unknown commit result", wrap(mongo.CommandError{Code: 50, Labels: []string{"UnknownTransactionCommitResult"}}), workerkit.Uncertain},
		{"mongo write conflict", wrap(mongo.CommandError{Code: 112, Name: "WriteConflict"}), workerkit.Failed},
	} {
		if got := commitOutcome(tc.err); got != tc.want {
			t.Errorf("%s: outcome %d, want %d", tc.name, got, tc.want)
		}
	}
}
