package postgres_test

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/berkcansavur/relaybus/internal/dbenv/dbtest"
	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/postgres"
	"github.com/berkcansavur/relaybus/relaybus/storetest"
)

// conformancePoolMaxConns bounds the pool every conformance subtest
// shares: they run in parallel against one server.
const conformancePoolMaxConns = 16

// TestConformance runs the shared suite, with and without the completion
// history. Each subtest gets a fresh store in a schema of its own, all in
// one database: creating a schema is a few milliseconds of catalog work, a
// database (with fsync on) much more, and the suite creates one store per
// subtest.
func TestConformance(t *testing.T) {
	t.Parallel()
	cfg, err := pgxpool.ParseConfig(dbtest.TestDatabase(t))
	require.NoError(t, err)
	cfg.MaxConns = conformancePoolMaxConns
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	// Runs before the database is dropped, after every parallel subtest.
	t.Cleanup(pool.Close)

	var schemas atomic.Int64
	for _, history := range []bool{false, true} {
		t.Run(fmt.Sprintf("CompletionHistory=%v", history), func(t *testing.T) {
			t.Parallel()
			storetest.Run(t, func(t *testing.T) driver.Store[pgx.Tx] {
				s, err := postgres.New(pool, &postgres.Options{
					Schema:            fmt.Sprintf("conformance_%d", schemas.Add(1)),
					CompletionHistory: history,
				})
				require.NoError(t, err)
				require.NoError(t, s.Setup(t.Context()))
				return s
			}, &storetest.Options{KeepsCompleted: history})
		})
	}
}
