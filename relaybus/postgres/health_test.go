package postgres_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/berkcansavur/relaybus/internal/dbenv/dbtest"
	"github.com/berkcansavur/relaybus/relaybus"
	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/postgres"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

// healthDeliveries are the deliveries the health tests complete: each
// leaves a dead row version behind.
const healthDeliveries = 300

// healthSetup returns a set-up store on a fresh database whose pool has
// one connection, so that every statement of the store runs on it and
// flushing its statistics (flushStats) is one statement; and the
// database's DSN. Autovacuum is off on the deliveries table, so that
// only the test's own VACUUMs remove dead rows.
func healthSetup(t *testing.T) (*postgres.Store, *pgxpool.Pool, string) {
	t.Helper()
	dsn := dbtest.TestDatabase(t)
	cfg, err := pgxpool.ParseConfig(dsn)
	require.NoError(t, err)
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s, err := postgres.New(pool, nil)
	require.NoError(t, err)
	require.NoError(t, s.Setup(t.Context()))
	_, err = pool.Exec(t.Context(), "ALTER TABLE relaybus_deliveries SET (autovacuum_enabled = false)")
	require.NoError(t, err)
	return s, pool, dsn
}

// flushStats makes the pool's one server process report its table
// statistics now (they are otherwise reported at most once a second, or
// after 10 s idle): the flag takes effect when the statement ends.
func flushStats(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	_, err := pool.Exec(t.Context(), "SELECT pg_stat_force_next_flush()")
	require.NoError(t, err)
}

// completeMany publishes n unkeyed deliveries, claims them and completes
// them: n deletes, n dead row versions.
func completeMany(t *testing.T, s *postgres.Store, n int) {
	t.Helper()
	eps := make([]*driver.EventPublish, n)
	for i := range eps {
		eps[i] = &driver.EventPublish{
			Event:      &relaytype.Event{ID: fmt.Sprintf("health-%d-%d", time.Now().UnixNano(), i), Type: "t"},
			Deliveries: []driver.DeliverySpec{{Handler: "h", MaxAttempts: 3}},
		}
	}
	publish(t, s, nil, eps)
	done := 0
	for done < n {
		ds := claim(t, s, "w", n, t0.Add(time.Second), "h")
		require.NotEmpty(t, ds)
		oks, err := s.DeliveryCompleteMany(t.Context(), &driver.DeliveryCompleteManyParams{Leases: leasesOf(ds), Now: t0.Add(time.Second)})
		require.NoError(t, err)
		require.NotContains(t, oks, false)
		done += len(ds)
	}
	_, err := s.OwnerRelinquish(t.Context(), &driver.OwnerRelinquishParams{Owner: "w", Now: t0.Add(time.Second)})
	require.NoError(t, err)
}

func storeHealth(t *testing.T, s *postgres.Store) *relaytype.StoreHealth {
	t.Helper()
	h, err := s.StoreHealth(t.Context(), &driver.StoreHealthParams{})
	require.NoError(t, err)
	return h
}

// TestStoreHealthXminHolder: on a real PostgreSQL, a REPEATABLE READ
// transaction held open in another session is the xmin holder, with its
// pid, state, transaction and query start; the dead rows of completed
// deliveries show, and a VACUUM run while it holds the horizon leaves
// them; once it commits, nothing holds the horizon and a VACUUM removes
// them and is seen as the last vacuum. The lane updates of the claims
// show too, with their HOT share.
func TestStoreHealthXminHolder(t *testing.T) {
	t.Parallel()
	s, pool, dsn := healthSetup(t)
	ctx := t.Context()
	h := storeHealth(t, s)
	require.Nil(t, h.XminHolder, "nothing holds a snapshot: the pool's one connection is the reading's own")
	require.Zero(t, h.DeliveriesDeadRows)
	require.WithinDuration(t, time.Now(), h.At, time.Minute, "the database's clock")

	holder, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer holder.Close(context.Background())
	_, err = holder.Exec(ctx, "SET application_name = 'health-test-report'")
	require.NoError(t, err)
	tx, err := holder.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	var pid int
	var xactStart time.Time
	// The first statement takes the transaction's snapshot, which holds
	// the horizon from then on.
	require.NoError(t, tx.QueryRow(ctx, "SELECT pg_backend_pid(), now()").Scan(&pid, &xactStart))

	completeMany(t, s, healthDeliveries)
	flushStats(t, pool)
	h = storeHealth(t, s)
	x := h.XminHolder
	require.NotNil(t, x, "the held transaction")
	require.Equal(t, relaytype.XminHolderSession, x.Kind)
	require.Equal(t, pid, x.PID)
	require.Equal(t, "health-test-report", x.Name)
	require.Equal(t, "idle in transaction", x.State)
	require.Equal(t, "client backend", x.BackendType)
	require.NotEmpty(t, x.User)
	require.True(t, x.XactStart.Equal(xactStart), "xact_start %v, the transaction's now() %v", x.XactStart, xactStart)
	require.False(t, x.QueryStart.Before(x.XactStart), "the query started in the transaction")
	require.Equal(t, h.At.Sub(x.XactStart), x.Age)
	require.Positive(t, x.Age)
	require.Positive(t, x.XminAge, "transactions committed since its snapshot")
	require.GreaterOrEqual(t, h.DeliveriesDeadRows, int64(healthDeliveries))
	require.Positive(t, h.LaneUpdates, "the claims updated lanes")
	require.LessOrEqual(t, h.LaneHOTUpdates, h.LaneUpdates)

	// A VACUUM cannot remove what the snapshot may still see.
	_, err = pool.Exec(ctx, "VACUUM relaybus_deliveries")
	require.NoError(t, err)
	h = storeHealth(t, s)
	require.GreaterOrEqual(t, h.DeliveriesDeadRows, int64(healthDeliveries), "held back by pid %d", pid)
	require.False(t, h.DeliveriesLastVacuum.IsZero())
	require.True(t, h.DeliveriesLastAutovacuum.IsZero(), "autovacuum is off on the table")

	// The Bus's check names the holder past a threshold.
	r, err := relaybus.CheckStoreHealth(h, nil, &relaybus.HealthThresholds{XminAgeMax: time.Millisecond, DeadRowsMin: 1})
	require.NoError(t, err)
	var got []string
	for _, w := range r.Warnings {
		got = append(got, w.Check)
		if w.Check == relaybus.HealthCheckXmin {
			require.Contains(t, w.Message, fmt.Sprintf("pid %d (client backend", pid))
		}
	}
	require.Equal(t, []string{relaybus.HealthCheckDeadRows, relaybus.HealthCheckXmin}, got)

	require.NoError(t, tx.Commit(ctx))
	h = storeHealth(t, s)
	require.Nil(t, h.XminHolder, "the horizon is free")
	_, err = pool.Exec(ctx, "VACUUM relaybus_deliveries")
	require.NoError(t, err)
	h = storeHealth(t, s)
	require.Zero(t, h.DeliveriesDeadRows, "removed once nothing held them")
}

// TestStoreHealthPreparedTransaction: a prepared transaction, which no
// session holds, is reported with its GID. PREPARE TRANSACTION needs
// max_prepared_transactions, 0 by default and a server start setting:
// the test runs on a server of its own.
func TestStoreHealthPreparedTransaction(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts a server of its own (a few seconds); not in -short")
	}
	ctx := t.Context()
	pg := dbtest.PrivatePostgres(t, map[string]string{"max_prepared_transactions": "2"})
	dsn, err := pg.CreateDatabase(ctx, "health_prepared")
	require.NoError(t, err)
	pool, err := pgxpool.New(ctx, dsn)
	require.NoError(t, err)
	defer pool.Close()
	s, err := postgres.New(pool, nil)
	require.NoError(t, err)
	require.NoError(t, s.Setup(ctx))

	// One simple-protocol script: the transaction gets an ID and is
	// prepared on the connection that ran it, which is then free.
	_, err = pool.Exec(ctx, "BEGIN; SELECT txid_current(); PREPARE TRANSACTION 'health-test-gid'")
	require.NoError(t, err)
	defer func() {
		_, err := pool.Exec(context.Background(), "ROLLBACK PREPARED 'health-test-gid'")
		require.NoError(t, err)
	}()
	h := storeHealth(t, s)
	x := h.XminHolder
	require.NotNil(t, x)
	require.Equal(t, relaytype.XminHolderPrepared, x.Kind)
	require.Equal(t, "health-test-gid", x.Name)
	require.NotEmpty(t, x.User)
	require.Zero(t, x.PID)
	require.Empty(t, x.State)
	require.False(t, x.XactStart.IsZero(), "when it was prepared")
	require.True(t, x.QueryStart.IsZero())
	require.Equal(t, h.At.Sub(x.XactStart), x.Age)
}

// syncHandler keeps the messages and check attributes of what it is
// given.
type syncHandler struct {
	mu    sync.Mutex
	lines []string
}

func (h *syncHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *syncHandler) Handle(_ context.Context, r slog.Record) error {
	line := r.Level.String() + " " + r.Message
	r.Attrs(func(a slog.Attr) bool {
		line += " " + a.Key + "=" + a.Value.String()
		return true
	})
	h.mu.Lock()
	h.lines = append(h.lines, line)
	h.mu.Unlock()
	return nil
}
func (h *syncHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *syncHandler) WithGroup(string) slog.Handler      { return h }

// TestWatchStoreHealthWarnsOfAHeldTransaction: the Bus's watch on a
// PostgreSQL store logs the xmin warning, naming the holder's pid, while
// a REPEATABLE READ transaction is held past the threshold.
func TestWatchStoreHealthWarnsOfAHeldTransaction(t *testing.T) {
	t.Parallel()
	s, _, dsn := healthSetup(t)
	ctx := t.Context()
	logs := &syncHandler{}
	bus, err := relaybus.New[pgx.Tx](s, relaybus.Config{Logger: slog.New(logs)})
	require.NoError(t, err)

	holder, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer holder.Close(context.Background())
	tx, err := holder.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	var pid int
	require.NoError(t, tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid))
	time.Sleep(5 * time.Millisecond)

	wctx, cancel := context.WithCancel(ctx)
	reports := make(chan *relaybus.HealthReport, 1)
	done := make(chan error, 1)
	go func() {
		done <- bus.WatchStoreHealth(wctx, &relaybus.StoreHealthWatch{
			Thresholds: relaybus.HealthThresholds{XminAgeMax: time.Millisecond},
			OnReport:   func(_ context.Context, r *relaybus.HealthReport) { reports <- r },
		})
	}()
	r := <-reports
	cancel()
	require.NoError(t, <-done)
	require.Equal(t, pid, r.Health.XminHolder.PID)
	logs.mu.Lock()
	defer logs.mu.Unlock()
	require.Len(t, logs.lines, 1, "%q", logs.lines)
	require.True(t, strings.HasPrefix(logs.lines[0], "WARN relaybus: pid "+fmt.Sprint(pid)+" (client backend"), logs.lines[0])
	require.True(t, strings.HasSuffix(logs.lines[0], "check=xmin_horizon"), logs.lines[0])
}
