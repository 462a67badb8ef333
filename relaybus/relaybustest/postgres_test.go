package relaybustest_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/berkcansavur/relaybus/internal/dbenv/dbtest"
	"github.com/berkcansavur/relaybus/relaybus"
	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/memory"
	"github.com/berkcansavur/relaybus/relaybus/postgres"
	"github.com/berkcansavur/relaybus/relaybus/relaybustest"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

// testPoolMaxConns bounds each test database's pool (the tests share one
// server).
const testPoolMaxConns = 4

// setupPostgres returns a bus on a Recorder of a set-up PostgreSQL store
// on a fresh database, and its pool.
func setupPostgres(t *testing.T) (*relaybus.Bus[pgx.Tx], *relaybustest.Recorder[pgx.Tx], *pgxpool.Pool) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dbtest.TestDatabase(t))
	require.NoError(t, err)
	cfg.MaxConns = testPoolMaxConns
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close) // before the database is dropped
	store, err := postgres.New(pool, nil)
	require.NoError(t, err)
	require.NoError(t, store.Setup(t.Context()))
	rec := relaybustest.NewRecorder[pgx.Tx](store)
	bus, err := relaybus.New[pgx.Tx](rec, relaybus.Config{})
	require.NoError(t, err)
	return bus, rec, pool
}

// TestPostgres: on a real database, in the service's own pgx
// transaction: PublishedTx sees the publish before the commit, Stored
// only after it (and never a rolled back one), and Work runs a plain and
// a transactional handler, whose write commits with its completion.
func TestPostgres(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	bus, rec, pool := setupPostgres(t)
	_, err := pool.Exec(ctx, `CREATE TABLE orders (id text PRIMARY KEY, receipts int NOT NULL DEFAULT 0)`)
	require.NoError(t, err)
	var mailed []string
	require.NoError(t, bus.Handle("order.placed", "mailer", func(_ context.Context, d *relaybus.Delivery) error {
		mailed = append(mailed, d.Key)
		return nil
	}, nil))
	require.NoError(t, bus.HandleTx("order.placed", "receipts", func(ctx context.Context, tx pgx.Tx, d *relaybus.Delivery) error {
		_, err := tx.Exec(ctx, `UPDATE orders SET receipts = receipts + 1 WHERE id = $1`, d.Key)
		return err
	}, nil))

	// The service's code: its write and its event in one transaction.
	placeOrder := func(tx pgx.Tx, id string) {
		_, err := tx.Exec(ctx, `INSERT INTO orders (id) VALUES ($1)`, id)
		require.NoError(t, err)
		require.NoError(t, bus.PublishTx(ctx, tx, &relaybus.Event{Type: "order.placed", Key: id, Payload: []byte(`{"id": "` + id + `"}`)}))
	}

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	placeOrder(tx, "o-1")
	relaybustest.RequirePublished(t, rec.PublishedTx(tx), relaybustest.Want{
		Type: "order.placed", Key: new("o-1"), PayloadJSON: map[string]string{"id": "o-1"}, Handlers: []string{"mailer", "receipts"},
	})
	require.Empty(t, relaybustest.Stored(ctx, t, bus), "not committed yet")
	require.NoError(t, tx.Commit(ctx))

	rolledBack, err := pool.Begin(ctx)
	require.NoError(t, err)
	placeOrder(rolledBack, "o-2")
	require.NoError(t, rolledBack.Rollback(ctx))
	relaybustest.RequirePublished(t, rec.PublishedTx(rolledBack), relaybustest.Want{Type: "order.placed", Key: new("o-2")})

	stored := relaybustest.Stored(ctx, t, bus)
	relaybustest.RequirePublished(t, stored, relaybustest.Want{Type: "order.placed", Key: new("o-1"), Handlers: []string{"mailer", "receipts"}})
	relaybustest.RequireNotPublished(t, stored, relaybustest.Want{Type: "order.placed", Key: new("o-2")})

	res := relaybustest.Work(ctx, t, bus, nil)
	require.Len(t, res.Worked, 2)
	require.Equal(t, []string{"o-1"}, mailed)
	var receipts int
	require.NoError(t, pool.QueryRow(ctx, `SELECT receipts FROM orders WHERE id = 'o-1'`).Scan(&receipts))
	require.Equal(t, 1, receipts)
	require.Empty(t, relaybustest.Stored(ctx, t, bus), "completed deliveries are deleted")
}

// TestRecorderCompletesAndClaims: over a store that completes and claims
// in one call (driver.CompletingClaimer, the PostgreSQL store), a
// Recorder says so and passes the call through; over one that does not
// (the memory store), it says not and the call fails as unsupported.
func TestRecorderCompletesAndClaims(t *testing.T) {
	t.Parallel()
	_, rec, _ := setupPostgres(t)
	require.True(t, driver.ClaimsCompletions(rec))
	_, err := rec.DeliveryCompleteClaim(t.Context(), &driver.DeliveryCompleteClaimParams{})
	require.ErrorIs(t, err, relaytype.ErrInvalid, "the store's own validation, passed through")

	mem := relaybustest.NewRecorder[*memory.Tx](memory.New(nil))
	require.False(t, driver.ClaimsCompletions(mem))
	_, err = mem.DeliveryCompleteClaim(t.Context(), &driver.DeliveryCompleteClaimParams{})
	require.ErrorIs(t, err, errors.ErrUnsupported)
}
