package worker

import (
	"context"
	"fmt"
	"io"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

func TestCommitOutcome(t *testing.T) {
	t.Parallel()
	wrap := func(err error) error { return fmt.Errorf("relaybus/store: commit: %w", err) }
	for _, tc := range []struct {
		name string
		err  error
		want outcome
	}{
		{"server rolled back", wrap(pgx.ErrTxCommitRollback), outcomeFailed},
		{"server error", wrap(&pgconn.PgError{Code: "40001", Message: "could not serialize access"}), outcomeFailed},
		{"connection lost", wrap(io.ErrUnexpectedEOF), outcomeUncertain},
		{"timed out", wrap(context.DeadlineExceeded), outcomeUncertain},
		{"mongo unknown commit result", wrap(mongo.CommandError{Code: 50, Labels: []string{"UnknownTransactionCommitResult"}}), outcomeUncertain},
		{"mongo write conflict", wrap(mongo.CommandError{Code: 112, Name: "WriteConflict"}), outcomeFailed},
	} {
		if got := commitOutcome(tc.err); got != tc.want {
			t.Errorf("%s: outcome %d, want %d", tc.name, got, tc.want)
		}
	}
}
