package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/berkcansavur/relaybus/internal/dbenv/dbtest"
	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/postgres"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

// TestDatabaseCrashAfterAClaim crashes the server for real (an immediate
// shutdown: no checkpoint, the WAL it still buffers is lost) right after
// a claim, and checks that no lease token is issued twice and that the
// stale holder's writes are refused. The server's WAL writer runs every
// 10 s, so that a claim whose commit did not wait for its WAL flush is
// lost by the crash for certain. A store that let that happen would hand
// the delivery to the same holder's next claim again under the token it
// is running, rebuild that same token at another holder's takeover, and
// let the stale holder's completion delete the row the new holder runs:
// the claim's epoch must be durable before its token is handed out.
func TestDatabaseCrashAfterAClaim(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts and crashes a server of its own (a few seconds); not in -short")
	}
	ctx := t.Context()
	pg := dbtest.PrivatePostgres(t, map[string]string{"wal_writer_delay": "10000ms"})

	// Two databases on the server, each with a claim made just before
	// the one crash: in one the same holder claims again, in the other
	// another holder takes the lane over.
	type world struct {
		a, b   *postgres.Store
		pools  []*pgxpool.Pool
		first  *relaytype.Delivery
		tokenA string
	}
	const lease = time.Minute
	claimAt := func(s *postgres.Store, owner string, now time.Time) []*relaytype.Delivery {
		t.Helper()
		var ds []*relaytype.Delivery
		var err error
		// The first call after the crash may meet a connection the crash
		// broke; the pool replaces it.
		require.Eventually(t, func() bool {
			ds, err = s.DeliveryClaim(ctx, &driver.DeliveryClaimParams{
				Owner: owner, Handlers: []string{"h1"}, Limit: 10, LeaseDuration: lease, Now: now})
			return err == nil
		}, 30*time.Second, 50*time.Millisecond, "claim after the crash: %v", err)
		return ds
	}
	newWorld := func(name string) *world {
		dsn, err := pg.CreateDatabase(ctx, name)
		require.NoError(t, err)
		connect := func() *pgxpool.Pool {
			pool, err := pgxpool.New(ctx, dsn)
			require.NoError(t, err)
			t.Cleanup(pool.Close)
			return pool
		}
		poolA, poolB := connect(), connect()
		w := &world{pools: []*pgxpool.Pool{poolA, poolB}}
		w.a, err = postgres.New(poolA, nil)
		require.NoError(t, err)
		require.NoError(t, w.a.Setup(ctx))
		w.b, err = postgres.New(poolB, nil)
		require.NoError(t, err)
		// Two deliveries of one key, published with an ordinary
		// (synchronous) commit: they survive the crash.
		ev := func(id string) *driver.EventPublish {
			return &driver.EventPublish{Event: &relaytype.Event{ID: id, Type: "t", Key: "k"},
				Deliveries: []driver.DeliverySpec{{Handler: "h1", MaxAttempts: 5}}}
		}
		publish(t, w.a, poolA, []*driver.EventPublish{ev("e1"), ev("e2")})
		return w
	}
	same, other := newWorld("crash_same"), newWorld("crash_other")
	for _, w := range []*world{same, other} {
		ds := claimAt(w.a, "owner-a", t0)
		require.Len(t, ds, 1)
		require.Equal(t, "e1", ds[0].EventID)
		w.first, w.tokenA = ds[0], ds[0].LeaseToken
	}

	crashCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	require.NoError(t, pg.Crash(crashCtx))
	// Every connection the crash broke is closed: a call through a pool
	// must not meet one (claimAt would retry it, the others would fail on
	// it: "unexpected EOF", which is about the connection, not the lease).
	// A process's pool meets each broken connection once, and its calls
	// are retried.
	for _, w := range []*world{same, other} {
		for _, p := range w.pools {
			p.Reset()
		}
	}

	t.Run("the same holder claims again", func(t *testing.T) {
		// e1 is in flight under tokenA, so it must not be handed out
		// again while the lease runs (and e2 waits behind it).
		again := claimAt(same.a, "owner-a", t0.Add(time.Second))
		for _, d := range again {
			require.NotEqual(t, "e1", d.EventID, "the crash lost the claim: e1 was handed out again to its holder (token %s, first %s)", d.LeaseToken, same.tokenA)
		}
		require.Empty(t, again, "a claim while e1 runs handed out %d deliveries of its key", len(again))
	})

	t.Run("another holder takes the lane", func(t *testing.T) {
		w := other
		// After A's lease expired: B takes the lane over. Its token must
		// differ from A's, and A's writes must be refused.
		taken := claimAt(w.b, "owner-b", t0.Add(lease+time.Second))
		require.Len(t, taken, 1)
		require.Equal(t, "e1", taken[0].EventID)
		require.NotEqual(t, w.tokenA, taken[0].LeaseToken, "the takeover reissued the token of the claim the crash lost")

		renewed, err := w.a.LeaseExtend(ctx, &driver.LeaseExtendParams{Owner: "owner-a",
			Leases: []relaytype.Lease{w.first.Lease()}, ExpiresAt: t0.Add(2*lease + time.Second), Now: t0.Add(lease + 2*time.Second)})
		require.NoError(t, err)
		require.Equal(t, []bool{false}, renewed, "the stale holder renewed its lease")
		done, err := w.a.DeliveryComplete(ctx, &driver.DeliveryCompleteParams{Lease: w.first.Lease(), Now: t0.Add(lease + 2*time.Second)})
		require.NoError(t, err)
		require.False(t, done, "the stale holder's completion was accepted (it would delete the row the new holder runs)")

		// While B runs e1, e2 is not handed out; B's completion holds.
		require.Empty(t, claimAt(w.b, "owner-b", t0.Add(lease+3*time.Second)), "e2 was handed out while e1 runs")
		done, err = w.b.DeliveryComplete(ctx, &driver.DeliveryCompleteParams{Lease: taken[0].Lease(), Now: t0.Add(lease + 4*time.Second)})
		require.NoError(t, err)
		require.True(t, done, "the new holder's completion was refused")
		next := claimAt(w.b, "owner-b", t0.Add(lease+5*time.Second))
		require.Len(t, next, 1)
		require.Equal(t, "e2", next[0].EventID)
	})
}

// TestDatabaseCrashAfterACompletingClaim crashes the server right after a
// DeliveryCompleteClaim whose claim found nothing, and checks that the
// completion survived: a claim round trip that issues no token commits
// without waiting for its flush (claimAsync), which must never apply to
// one that carries completions (a completion lost by a crash runs its
// delivery again, and the dispatcher was told it was done). As in
// TestDatabaseCrashAfterAClaim, the WAL writer runs every 10 s, so an
// asynchronous commit is lost for certain.
func TestDatabaseCrashAfterACompletingClaim(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts and crashes a server of its own (a few seconds); not in -short")
	}
	ctx := t.Context()
	pg := dbtest.PrivatePostgres(t, map[string]string{"wal_writer_delay": "10000ms"})
	dsn, err := pg.CreateDatabase(ctx, "crash_complete")
	require.NoError(t, err)
	pool, err := pgxpool.New(ctx, dsn)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s, err := postgres.New(pool, nil)
	require.NoError(t, err)
	require.NoError(t, s.Setup(ctx))
	publish(t, s, pool, []*driver.EventPublish{{Event: &relaytype.Event{ID: "e1", Type: "t"},
		Deliveries: []driver.DeliverySpec{{Handler: "h1", MaxAttempts: 5}}}})
	ds := claim(t, s, "owner-a", 10, t0, "h1")
	require.Len(t, ds, 1)

	now := t0.Add(time.Second)
	res, err := s.DeliveryCompleteClaim(ctx, &driver.DeliveryCompleteClaimParams{
		Complete: driver.DeliveryCompleteManyParams{Leases: []relaytype.Lease{ds[0].Lease()}, Now: now},
		Claim:    driver.DeliveryClaimParams{Owner: "owner-a", Handlers: []string{"h1"}, Limit: 10, LeaseDuration: time.Minute, Now: now},
	})
	require.NoError(t, err)
	require.Equal(t, []bool{true}, res.Completed)
	require.Empty(t, res.Claimed)

	crashCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	require.NoError(t, pg.Crash(crashCtx))
	pool.Reset() // the connections the crash broke

	var left int
	require.Eventually(t, func() bool {
		return pool.QueryRow(ctx, "SELECT count(*) FROM relaybus_deliveries").Scan(&left) == nil
	}, 30*time.Second, 50*time.Millisecond)
	require.Zero(t, left, "the crash lost a completion the store had reported committed")
}
