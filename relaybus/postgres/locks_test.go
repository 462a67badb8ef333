package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/postgres"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

// Sizes of TestNoDeadlockRenewalsCompletionsClaims.
const (
	// statsFlushWait covers PostgreSQL's interval for flushing a backend's
	// statistics (PGSTAT_MIN_INTERVAL, 1 s) with a margin.
	statsFlushWait     = 1500 * time.Millisecond
	lockTestDeliveries = 600
	lockTestBatch      = 100
	lockTestCompleters = 3
)

// TestNoDeadlockRenewalsCompletionsClaims runs, at once and for the
// same deliveries, renewals and DeliveryCompleteMany calls of the same
// leases in reversed order (two statements that lock one set of rows in
// opposite orders deadlock when each locks rows in the order it is
// given) and everything else that locks lanes or deliveries: claims,
// renewals in random order, completions in reversed and shuffled order,
// reschedules and releases, and takeovers of expired lanes while their
// old holder still completes. The lock order of docs/lane-protocol.md (lanes before
// deliveries; ascending lane, ascending id; completions lock no lane,
// renewals no delivery) means no statement ever waits in a cycle: no
// 40P01, and the server's deadlock counter does not move.
func TestNoDeadlockRenewalsCompletionsClaims(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := newPool(t)
	s, err := postgres.New(pool, nil)
	require.NoError(t, err)
	require.NoError(t, s.Setup(ctx))
	deadlocksBefore := deadlocks(t, pool)

	var eps []*driver.EventPublish
	for i := range lockTestDeliveries {
		e := &relaytype.Event{ID: fmt.Sprintf("e%d", i), Type: "t"}
		if i%3 == 0 {
			e.Key = fmt.Sprintf("k%d", i%17)
		}
		eps = append(eps, &driver.EventPublish{Event: e, Deliveries: []driver.DeliverySpec{{Handler: "h", MaxAttempts: 100}}})
	}
	publish(t, s, pool, eps)

	var (
		failures  = make(chan error, 64)
		completed atomic.Int64
		wg        sync.WaitGroup
		mu        sync.Mutex
		held      = map[string]relaytype.Lease{} // owner-a's current leases
		done      = make(chan struct{})
	)
	check := func(what string, err error) bool {
		if err == nil {
			return true
		}
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "40P01" {
			failures <- fmt.Errorf("%s: deadlock: %w", what, err)
		} else if ctx.Err() == nil {
			failures <- fmt.Errorf("%s: %w", what, err)
		}
		return false
	}
	snapshot := func() []relaytype.Lease {
		mu.Lock()
		defer mu.Unlock()
		ls := make([]relaytype.Lease, 0, len(held))
		for _, l := range held {
			ls = append(ls, l)
		}
		return ls
	}
	forget := func(ls []relaytype.Lease, oks []bool) {
		mu.Lock()
		defer mu.Unlock()
		for i, l := range ls {
			if oks == nil || oks[i] {
				if held[l.DeliveryID] == l {
					delete(held, l.DeliveryID)
				}
			}
		}
	}
	// The store's clock: the publish's T0 plus the time the test has run.
	began := time.Now()
	now := func() time.Time { return t0.Add(time.Since(began)) }

	// The claimer: owner-a keeps claiming what it can hold.
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			ds, err := s.DeliveryClaim(ctx, &driver.DeliveryClaimParams{Owner: "owner-a", Handlers: []string{"h"},
				Limit: lockTestBatch, LeaseDuration: time.Minute, Now: now()})
			if !check("claim", err) {
				return
			}
			mu.Lock()
			for _, d := range ds {
				held[d.ID] = d.Lease()
			}
			mu.Unlock()
			time.Sleep(time.Millisecond)
		}
	})
	// The renewer: every lease at once, in a random order each time.
	wg.Go(func() {
		rng := rand.New(rand.NewPCG(1, 2))
		for {
			select {
			case <-done:
				return
			default:
			}
			ls := snapshot()
			if len(ls) == 0 {
				time.Sleep(time.Millisecond)
				continue
			}
			rng.Shuffle(len(ls), func(i, j int) { ls[i], ls[j] = ls[j], ls[i] })
			_, err := s.LeaseExtend(ctx, &driver.LeaseExtendParams{Owner: "owner-a", Leases: ls,
				ExpiresAt: now().Add(time.Minute), Now: now()})
			if !check("extend", err) {
				return
			}
		}
	})
	// Completers: reversed and shuffled batches; one in ten reschedules
	// or releases instead.
	for c := range lockTestCompleters {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(c), 3))
			for completed.Load() < lockTestDeliveries {
				select {
				case <-done:
					return
				default:
				}
				ls := snapshot()
				if len(ls) == 0 {
					time.Sleep(time.Millisecond)
					continue
				}
				ls = ls[:min(len(ls), 1+rng.IntN(lockTestBatch))]
				if c%2 == 0 {
					slices.Reverse(ls)
				} else {
					rng.Shuffle(len(ls), func(i, j int) { ls[i], ls[j] = ls[j], ls[i] })
				}
				if rng.IntN(10) == 0 {
					l := ls[0]
					var ok bool
					var err error
					if rng.IntN(2) == 0 {
						ok, err = s.DeliveryReschedule(ctx, &driver.DeliveryRescheduleParams{Lease: l, Error: "again", AvailableAt: now(), Now: now()})
					} else {
						ok, err = s.DeliveryRelease(ctx, &driver.DeliveryReleaseParams{Lease: l, Now: now()})
					}
					if !check("reschedule or release", err) {
						return
					}
					if ok {
						forget([]relaytype.Lease{l}, nil)
					}
					continue
				}
				oks, err := s.DeliveryCompleteMany(ctx, &driver.DeliveryCompleteManyParams{Leases: ls, Now: now()})
				if !check("complete", err) {
					return
				}
				for _, ok := range oks {
					if ok {
						completed.Add(1)
					}
				}
				forget(ls, oks)
			}
		})
	}

	deadline := time.After(time.Minute)
	for completed.Load() < lockTestDeliveries {
		select {
		case err := <-failures:
			close(done)
			wg.Wait()
			require.NoError(t, err)
		case <-deadline:
			close(done)
			wg.Wait()
			// What is left, to tell a lost lease from a stuck key.
			rows, err := pool.Query(ctx, `SELECT d.id, d.key, d.sequence, d.claims, l.lane, l.epoch, l.in_flight
				FROM relaybus_deliveries d JOIN relaybus_lanes l ON l.lane = d.lane ORDER BY d.id`)
			require.NoError(t, err)
			for rows.Next() {
				v, err := rows.Values()
				require.NoError(t, err)
				t.Logf("left (id, key, sequence, claims, lane, epoch, in flight): %v", v)
			}
			t.Logf("leases held: %v", snapshot())
			require.FailNow(t, "the deliveries did not all complete", "%d of %d", completed.Load(), lockTestDeliveries)
		case <-time.After(10 * time.Millisecond):
		}
	}
	close(done)
	wg.Wait()
	close(failures)
	for err := range failures {
		require.NoError(t, err)
	}
	require.Equal(t, int64(lockTestDeliveries), completed.Load(), "every delivery completed exactly once")
	var left int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM relaybus_deliveries`).Scan(&left))
	require.Zero(t, left)

	testTakeoverAgainstLateCompletions(t, s, pool)
	// Backends report their counters at most once a second.
	time.Sleep(statsFlushWait)
	require.Equal(t, deadlocksBefore, deadlocks(t, pool), "the server broke a deadlock")
}

// testTakeoverAgainstLateCompletions: owner-a claims with a short lease
// and lets it expire; owner-b takes the lanes over (locking them FOR
// UPDATE and charging the deliveries in id order) while owner-a completes
// late in reversed order. Every delivery ends completed by exactly one of
// them.
func testTakeoverAgainstLateCompletions(t *testing.T, s *postgres.Store, pool *pgxpool.Pool) {
	ctx := t.Context()
	var eps []*driver.EventPublish
	for i := range lockTestBatch * 2 {
		eps = append(eps, &driver.EventPublish{
			Event:      &relaytype.Event{ID: fmt.Sprintf("late%d", i), Type: "t"},
			Deliveries: []driver.DeliverySpec{{Handler: "h", MaxAttempts: 100}},
		})
	}
	publish(t, s, pool, eps)
	start := t0.Add(24 * time.Hour) // after phase one's leases
	ds := claim(t, s, "owner-a", len(eps), start, "h")
	require.Len(t, ds, len(eps))
	lateNow := start.Add(2 * time.Minute) // past the lease of a minute
	var wg sync.WaitGroup
	var lateOK, takenOK atomic.Int64
	errs := make(chan error, 2)
	wg.Go(func() {
		ls := make([]relaytype.Lease, len(ds))
		for i, d := range ds {
			ls[len(ds)-1-i] = d.Lease()
		}
		oks, err := s.DeliveryCompleteMany(ctx, &driver.DeliveryCompleteManyParams{Leases: ls, Now: lateNow})
		errs <- err
		for _, ok := range oks {
			if ok {
				lateOK.Add(1)
			}
		}
	})
	wg.Go(func() {
		// Claims by owner-b until it finds nothing: suspects come one at a
		// time.
		for {
			taken, err := s.DeliveryClaim(ctx, &driver.DeliveryClaimParams{Owner: "owner-b", Handlers: []string{"h"},
				Limit: len(eps), LeaseDuration: time.Minute, Now: lateNow})
			if err != nil || len(taken) == 0 {
				errs <- err
				return
			}
			ls := make([]relaytype.Lease, len(taken))
			for i, d := range taken {
				ls[i] = d.Lease()
			}
			oks, err := s.DeliveryCompleteMany(ctx, &driver.DeliveryCompleteManyParams{Leases: ls, Now: lateNow})
			if err != nil {
				errs <- err
				return
			}
			for _, ok := range oks {
				if ok {
					takenOK.Add(1)
				}
			}
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) {
			require.NotEqual(t, "40P01", pgErr.Code, "deadlock: %v", err)
		}
		require.NoError(t, err)
	}
	require.Equal(t, int64(len(eps)), lateOK.Load()+takenOK.Load(), "each delivery completed by exactly one of them")
	var left int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM relaybus_deliveries`).Scan(&left))
	require.Zero(t, left)
}

// deadlocks reads the server's count of deadlocks broken in the current
// database.
func deadlocks(t *testing.T, pool *pgxpool.Pool) int64 {
	t.Helper()
	_, err := pool.Exec(context.Background(), "SELECT pg_stat_clear_snapshot()")
	require.NoError(t, err)
	var n int64
	require.NoError(t, pool.QueryRow(t.Context(),
		`SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()`).Scan(&n))
	return n
}

// TestRelinquishAgainstARenewalOfALaneTakenMeanwhile is the deadlock
// TestNoDeadlockUnderMixedLoad met once in CI (a renewal against a
// relinquish of the same store instance), made deterministic. The
// relinquish's lock statement waits for lane A (a writer of the lane
// holds it); meanwhile a claim of the same instance takes lane B < A,
// and a renewal of both leases locks B and queues for A. When A is free,
// the relinquish gets it. If its second statement then hands back every
// lane the instance holds by its own snapshot, it locks B too, which it
// never locked in lane order: it waits for the renewal, which waits for
// it. The relinquish must hand back only the lanes its lock statement
// locked (B was taken after it began: the relinquish is ordered before
// that claim), and the renewal renews B's lease alone.
func TestRelinquishAgainstARenewalOfALaneTakenMeanwhile(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, pool := setup(t, nil)
	deadlocksBefore := deadlocks(t, pool)

	// Two unkeyed events, in lanes b < a.
	idIn := func(want func(lane int) bool) (string, int) {
		for i := 0; ; i++ {
			id := fmt.Sprintf("ev-%d", i)
			if lane := driver.LaneOf("", id); want(lane) {
				return id, lane
			}
		}
	}
	idA, laneA := idIn(func(lane int) bool { return lane > 128 })
	idB, laneB := idIn(func(lane int) bool { return lane < 64 })
	publish := func(id string, now time.Time) {
		t.Helper()
		_, err := s.EventPublish(ctx, &driver.EventPublishParams{Now: now, Events: []*driver.EventPublish{{
			Event: &relaytype.Event{ID: id, Type: "t"}, Deliveries: []driver.DeliverySpec{{Handler: "h", MaxAttempts: 5}}}}})
		require.NoError(t, err)
	}
	t0 := time.Date(2031, time.April, 1, 12, 0, 0, 0, time.UTC)
	claim := func(now time.Time, lease time.Duration) *relaytype.Delivery {
		t.Helper()
		ds, err := s.DeliveryClaim(ctx, &driver.DeliveryClaimParams{Owner: "o", Handlers: []string{"h"}, Limit: 1,
			LeaseDuration: lease, Now: now})
		require.NoError(t, err)
		require.Len(t, ds, 1)
		return ds[0]
	}

	// The instance holds lane a, its lease expired at t1.
	publish(idA, t0)
	da := claim(t0, time.Second)
	require.Equal(t, idA, da.EventID)
	publish(idB, t0)
	t1 := t0.Add(10 * time.Second)

	waiting := func(n int) {
		t.Helper()
		require.Eventually(t, func() bool {
			var got int
			require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
				WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&got))
			return got >= n
		}, 10*time.Second, 5*time.Millisecond, "%d sessions waiting for a lock", n)
	}

	// A writer of lane a holds it.
	writer, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = writer.Rollback(context.Background()) }()
	_, err = writer.Exec(ctx, `SELECT lane FROM relaybus_lanes WHERE lane = $1 FOR NO KEY UPDATE`, laneA)
	require.NoError(t, err)

	type result struct {
		n   int
		oks []bool
		err error
	}
	relinquished := make(chan result, 1)
	go func() {
		n, err := s.OwnerRelinquish(ctx, &driver.OwnerRelinquishParams{Owner: "o", Now: t1})
		relinquished <- result{n: n, err: err}
	}()
	waiting(1)

	// The claim passes lane a by (expired, and locked) and takes lane b.
	db := claim(t1, time.Minute)
	require.Equal(t, idB, db.EventID)

	renewed := make(chan result, 1)
	go func() {
		oks, err := s.LeaseExtend(ctx, &driver.LeaseExtendParams{Owner: "o",
			Leases: []relaytype.Lease{da.Lease(), db.Lease()}, ExpiresAt: t1.Add(time.Minute), Now: t1})
		renewed <- result{oks: oks, err: err}
	}()
	waiting(2)
	require.NoError(t, writer.Commit(ctx))

	rel, ren := <-relinquished, <-renewed
	require.NoError(t, rel.err, "relinquish")
	require.NoError(t, ren.err, "renewal")
	require.Equal(t, 1, rel.n, "the relinquish releases lane a's delivery")
	require.Equal(t, []bool{false, true}, ren.oks, "lane a was handed back; lane b's lease is current")
	require.Zero(t, deadlocks(t, pool)-deadlocksBefore, "the server broke deadlocks")

	var owner *string
	require.NoError(t, pool.QueryRow(ctx, `SELECT lease_owner FROM relaybus_lanes WHERE lane = $1`, laneB).Scan(&owner))
	require.NotNil(t, owner, "lane b is still held")
}
