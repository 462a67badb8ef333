package postgres_test

import (
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/berkcansavur/relaybus/internal/dbenv/dbtest"
	"github.com/berkcansavur/relaybus/relaybus/postgres"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// testPoolMaxConns bounds each test database's pool: the suite runs many
// databases in parallel on one shared server.
const testPoolMaxConns = 8

// newPool connects to a fresh database of the shared test server.
func newPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dbtest.TestDatabase(t))
	require.NoError(t, err)
	cfg.MaxConns = testPoolMaxConns
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	// Registered after TestDatabase's cleanup, so it runs first: the pool
	// is closed before the database is dropped.
	t.Cleanup(pool.Close)
	return pool
}

// setup returns a set-up store on a fresh database, and its pool.
func setup(t *testing.T, opts *postgres.Options) (*postgres.Store, *pgxpool.Pool) {
	t.Helper()
	pool := newPool(t)
	s, err := postgres.New(pool, opts)
	require.NoError(t, err)
	require.NoError(t, s.Setup(t.Context()))
	return s, pool
}
