package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/berkcansavur/relaybus/internal/dbenv/dbtest"
	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/postgres"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

// Sizes of TestNoDeadlockUnderMixedLoad.
const (
	mixedInstances = 4 // store instances (postgres.New) on one database
	mixedWorkers   = 3 // workers per instance, besides its renewer
	mixedLanes     = 3 // the lanes all the work lives in
	mixedKeysLane  = 2 // ordering keys per lane
	// mixedLease is the lease of every claim and renewal. An instance
	// pauses now and then for longer (mixedPause), so that the others
	// take its lanes over.
	mixedLease = 400 * time.Millisecond
	mixedPause = 600 * time.Millisecond
	// mixedBacklog is how many deliveries the publisher keeps
	// outstanding (published and not completed).
	mixedBacklog   = 300
	mixedPublishes = 20 // events per publish
	// The bounds of a run: the first reached ends it.
	mixedDuration      = 20 * time.Second
	mixedDurationShort = 5 * time.Second
	mixedMaxCalls      = 200_000
	mixedOvertime      = 10 * time.Second // at most this much longer, for an operation not called yet
	// mixedRelinquish: a worker relinquishes its instance's lanes once in
	// this many rounds (the workers at different rounds).
	mixedRelinquish = 150
	// mixedSlow is only reported: the calls that took this long.
	mixedSlow = 900 * time.Millisecond
	// mixedStatsFlush covers PostgreSQL's interval for flushing a
	// backend's statistics (PGSTAT_MIN_INTERVAL, 1 s) with a margin.
	mixedStatsFlush = 1500 * time.Millisecond
)

// mixedStart is the store's clock at the start of
// TestNoDeadlockUnderMixedLoad.
var mixedStart = time.Date(2031, time.March, 1, 12, 0, 0, 0, time.UTC)

// mixedOps are the operations TestNoDeadlockUnderMixedLoad runs, each
// at least once.
var mixedOps = []string{"claim", "extend", "complete many", "complete tx", "reschedule", "release", "bury",
	"relinquish", "requeue", "publish"}

// mixedHandlers are the handlers of the events of
// TestNoDeadlockUnderMixedLoad; every worker claims for both.
var mixedHandlers = []string{"h1", "h2"}

// TestNoDeadlockUnderMixedLoad runs a bounded mixed load: several store
// instances on one database, each with a few workers and a renewer, and
// every operation that locks a lane or a delivery at once, on the same
// few lane rows: claims (taking lanes, and taking over the lanes of an
// instance that paused past its lease), DeliveryCompleteMany in shuffled
// order, DeliveryCompleteTx in a transaction of the worker's, reschedule,
// release, bury, OwnerRelinquish, LeaseExtend of every held lease in
// random order, requeue of the dead, and publishes that keep the backlog
// up. Under the lock order of docs/lane-protocol.md no statement waits in
// a cycle: no call fails with 40P01 (deadlock_detected), and the server's
// deadlock counter of the database does not move.
//
// What it catches, besides an order that breaks the protocol's: a
// statement that locks a lane row in one CTE and updates it in another
// (a take, reschedule, release, bury, renewal, relinquish written so)
// locks the newest version of the row (following the update chain when
// the row changed since its snapshot), then updates it through the
// version its snapshot saw and queues for that version's tuple lock,
// which another locker of the lane (a claim's lock, a renewal, another
// reschedule) holds while it waits for the first: a cycle on one lane row
// within one instance. The load makes such a statement deadlock in every
// run, many times in 20 s and a few times even in the 5 s of -short.
//
// Every other error fails the test too; a false return (a lease lost to
// a takeover, a relinquish or a concurrent write) is an expected outcome.
// There is no timing assertion: calls slower than mixedSlow are only
// counted in the log.
func TestNoDeadlockUnderMixedLoad(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	duration := mixedDuration
	if testing.Short() {
		duration = mixedDurationShort
	}
	dsn := dbtest.TestDatabase(t)
	mixedPool := func(maxConns int32) *pgxpool.Pool {
		cfg, err := pgxpool.ParseConfig(dsn)
		require.NoError(t, err)
		cfg.MaxConns = maxConns
		cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
			// A waiter looks for a cycle after deadlock_timeout (1 s by
			// default): sooner, so that a deadlock stalls its lane for less
			// and a run of a few seconds meets more of them. Only a
			// superuser (or a role granted it) may set it; the default
			// finds the same cycles, fewer per second.
			_, err := c.Exec(ctx, "SET deadlock_timeout = '100ms'")
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && pgErr.Code == "42501" { // insufficient_privilege
				return nil
			}
			return err
		}
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		require.NoError(t, err)
		t.Cleanup(pool.Close) // before TestDatabase's drop
		return pool
	}
	adminPool := mixedPool(4)
	admin, err := postgres.New(adminPool, nil)
	require.NoError(t, err)
	require.NoError(t, admin.Setup(ctx))
	deadlocksBefore := mixedServerDeadlocks(t, adminPool)

	// The lanes, their keys, and unkeyed event ids in them.
	var lanes []int
	for lane := 7; len(lanes) < mixedLanes; lane += 83 {
		lanes = append(lanes, lane%driver.LaneCount)
	}
	inLanes := func(lane int) bool { return slices.Contains(lanes, lane) }
	var keys []string
	perLane := map[int]int{}
	for i := 0; len(keys) < mixedLanes*mixedKeysLane; i++ {
		k := fmt.Sprintf("key-%d", i)
		if lane := driver.LaneOf(k, ""); inLanes(lane) && perLane[lane] < mixedKeysLane {
			perLane[lane]++
			keys = append(keys, k)
		}
	}
	var nextID atomic.Int64
	unkeyedID := func() string {
		for {
			id := fmt.Sprintf("u-%d", nextID.Add(1))
			if inLanes(driver.LaneOf("", id)) {
				return id
			}
		}
	}

	// The store's clock: a fixed start plus the time the test has run.
	began := time.Now()
	now := func() time.Time { return mixedStart.Add(time.Since(began)) }

	var (
		stop      = make(chan struct{})
		stopOnce  sync.Once
		wg        sync.WaitGroup
		calls     atomic.Int64
		stats     = newMixedStats()
		published atomic.Int64 // deliveries
		completed atomic.Int64
		buried    = make(chan string, 1024)
	)
	halt := func() { stopOnce.Do(func() { close(stop) }) }
	stopped := func() bool {
		select {
		case <-stop:
			return true
		default:
			return false
		}
	}
	// record counts a call; it reports whether the call succeeded.
	record := func(op string, began time.Time, err error) bool {
		if calls.Add(1) >= mixedMaxCalls {
			halt()
		}
		stats.add(op, time.Since(began), err, ctx.Err() != nil)
		return err == nil
	}

	// The publisher keeps mixedBacklog deliveries outstanding: a third
	// of the events on the lanes' keys, the rest unkeyed in the lanes;
	// one in four has a delivery for each handler.
	wg.Go(func() {
		rng := rand.New(rand.NewPCG(7, 7))
		for n := 0; !stopped(); n++ {
			if published.Load()-completed.Load() >= mixedBacklog {
				time.Sleep(2 * time.Millisecond)
				continue
			}
			var eps []*driver.EventPublish
			deliveries := 0
			for range mixedPublishes {
				e := &relaytype.Event{Type: "t"}
				if rng.IntN(3) == 0 {
					e.Key = keys[rng.IntN(len(keys))]
					e.ID = fmt.Sprintf("k-%d", nextID.Add(1))
				} else {
					e.ID = unkeyedID()
				}
				specs := []driver.DeliverySpec{{Handler: "h1", MaxAttempts: 4}}
				if rng.IntN(4) == 0 {
					specs = append(specs, driver.DeliverySpec{Handler: "h2", MaxAttempts: 4})
				}
				deliveries += len(specs)
				eps = append(eps, &driver.EventPublish{Event: e, Deliveries: specs})
			}
			start := time.Now()
			tx, err := admin.TxBegin(ctx)
			if err != nil {
				record("publish", start, err)
				continue
			}
			_, err = admin.EventPublishTx(ctx, tx, &driver.EventPublishParams{Events: eps, Now: now()})
			if err == nil {
				err = admin.TxCommit(ctx, tx)
			} else {
				_ = admin.TxRollback(ctx, tx)
			}
			if record("publish", start, err) {
				published.Add(int64(deliveries))
			}
		}
	})

	// The requeuer: every delivery a worker buried, and now and then
	// every dead one (a takeover buries suspects at their budget), is
	// made pending again.
	wg.Go(func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		requeue := func(id string) {
			start := time.Now()
			err := admin.DeliveryRequeue(ctx, &driver.DeliveryRequeueParams{DeliveryID: id, Now: now()})
			if errors.Is(err, relaytype.ErrNotDead) || errors.Is(err, relaytype.ErrNotFound) {
				err = nil // requeued already (found twice), or purged: not this test's business
			}
			record("requeue", start, err)
		}
		for !stopped() {
			select {
			case <-stop:
			case id := <-buried:
				requeue(id)
			case <-tick.C:
				start := time.Now()
				res, err := admin.DeliveryList(ctx, &driver.DeliveryListParams{Status: relaytype.StatusDead, Limit: 100})
				if record("list dead", start, err) {
					for _, d := range res.Deliveries {
						requeue(d.ID)
					}
				}
			}
		}
	})

	var pools []*pgxpool.Pool
	for i := range mixedInstances {
		inst := &mixedInstance{owner: fmt.Sprintf("owner-%d", i), held: map[relaytype.Lease]bool{}}
		pool := mixedPool(mixedWorkers + 3)
		pools = append(pools, pool)
		inst.s, err = postgres.New(pool, nil)
		require.NoError(t, err)
		// The renewer: every held lease at once, in random order, every few
		// milliseconds; now and then it pauses the whole instance for longer
		// than the lease, so that the other instances take its lanes over.
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(i), 1))
			for !stopped() {
				inst.wait()
				if rng.IntN(400) == 0 {
					inst.pause(mixedPause)
					stats.count("pause")
					continue
				}
				ls := inst.leases()
				if len(ls) > 0 {
					rng.Shuffle(len(ls), func(a, b int) { ls[a], ls[b] = ls[b], ls[a] })
					start := time.Now()
					_, err := inst.s.LeaseExtend(ctx, &driver.LeaseExtendParams{Owner: inst.owner, Leases: ls,
						ExpiresAt: now().Add(mixedLease), Now: now()})
					record("extend", start, err)
				}
				time.Sleep(time.Duration(1+rng.IntN(5)) * time.Millisecond)
			}
		})
		for w := range mixedWorkers {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(i), uint64(10+w)))
				relinquishAt := (i*mixedWorkers + w) * 13 % mixedRelinquish
				mixedWorker(ctx, rng, inst, relinquishAt, now, stopped, record, stats, &completed, buried)
			})
		}
	}

	// The run ends at its duration, once every operation has been called
	// (on a slow machine a few rare ones may take longer), at the latest
	// mixedOvertime later, or after mixedMaxCalls calls.
	for !stopped() {
		if ran := time.Since(began); ran >= duration+mixedOvertime || ran >= duration && stats.allCalled(mixedOps) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	halt()
	wg.Wait()

	t.Logf("%d calls in %v, %d deliveries published, %d completed", calls.Load(),
		time.Since(began).Round(time.Millisecond), published.Load(), completed.Load())
	stats.log(t)
	// The instances' connections end before the server's counter is read:
	// a backend reports its counters when it exits, or at most once a
	// second.
	for _, p := range pools {
		p.Close()
	}
	time.Sleep(mixedStatsFlush)
	serverDeadlocks := mixedServerDeadlocks(t, adminPool) - deadlocksBefore
	t.Logf("the server broke %d deadlocks in the test's database", serverDeadlocks)

	deadlocks, byOp := stats.deadlocks()
	if deadlocks > 0 || serverDeadlocks > 0 {
		// To read the relations in the errors' details.
		rows, err := adminPool.Query(ctx, `SELECT oid, relname FROM pg_class WHERE relname LIKE 'relaybus\_%' AND relkind = 'r' ORDER BY oid`)
		require.NoError(t, err)
		for rows.Next() {
			var oid uint32
			var name string
			require.NoError(t, rows.Scan(&oid, &name))
			t.Logf("relation %d is %s", oid, name)
		}
		require.NoError(t, rows.Err())
	}
	require.Zero(t, deadlocks, "calls failed with 40P01 (deadlock detected), per operation: %v", byOp)
	require.Empty(t, stats.unexpected(), "unexpected errors")
	require.Zero(t, serverDeadlocks, "the server broke deadlocks")
	for _, op := range mixedOps {
		require.NotZero(t, stats.calls(op), "no %s call ran", op)
	}
}

// mixedInstance is one store instance of TestNoDeadlockUnderMixedLoad,
// with what its workers hold (which its renewer renews).
type mixedInstance struct {
	s     *postgres.Store
	owner string

	mu          sync.Mutex
	held        map[relaytype.Lease]bool
	pausedUntil time.Time
}

func (m *mixedInstance) hold(ds []*relaytype.Delivery) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, d := range ds {
		m.held[d.Lease()] = true
	}
}

func (m *mixedInstance) drop(ls []relaytype.Lease) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, l := range ls {
		delete(m.held, l)
	}
}

func (m *mixedInstance) leases() []relaytype.Lease {
	m.mu.Lock()
	defer m.mu.Unlock()
	ls := make([]relaytype.Lease, 0, len(m.held))
	for l := range m.held {
		ls = append(ls, l)
	}
	return ls
}

// pause stops every goroutine of the instance for d (at their next
// wait), as a stalled process would.
func (m *mixedInstance) pause(d time.Duration) {
	m.mu.Lock()
	m.pausedUntil = time.Now().Add(d)
	m.mu.Unlock()
	m.wait()
}

func (m *mixedInstance) wait() {
	m.mu.Lock()
	until := m.pausedUntil
	m.mu.Unlock()
	if d := time.Until(until); d > 0 {
		time.Sleep(d)
	}
}

// mixedWorker claims (busy while it still holds leases from earlier
// claims) and ends a random part of what it holds: about half of it
// completed in one DeliveryCompleteMany in shuffled order, the rest by
// DeliveryCompleteTx (one in five of those rolled back, the delivery
// released then), reschedule, release or bury, or kept for a later
// round; once in mixedRelinquish rounds it first relinquishes everything
// its instance holds.
func mixedWorker(ctx context.Context, rng *rand.Rand, inst *mixedInstance, relinquishAt int, now func() time.Time,
	stopped func() bool, record func(string, time.Time, error) bool, stats *mixedStats, completed *atomic.Int64,
	buried chan<- string) {
	var mine []relaytype.Lease
	for round := 1; !stopped(); round++ {
		inst.wait()
		if round%mixedRelinquish == relinquishAt {
			start := time.Now()
			_, err := inst.s.OwnerRelinquish(ctx, &driver.OwnerRelinquishParams{Owner: inst.owner, Now: now()})
			record("relinquish", start, err)
		}
		start := time.Now()
		ds, err := inst.s.DeliveryClaim(ctx, &driver.DeliveryClaimParams{Owner: inst.owner, Handlers: mixedHandlers,
			Limit: 1 + rng.IntN(8), LeaseDuration: mixedLease, Now: now(), Busy: len(mine) > 0})
		record("claim", start, err)
		inst.hold(ds) // a failed claim may return what its earlier round trips claimed
		for _, d := range ds {
			mine = append(mine, d.Lease())
			if d.Suspect {
				stats.count("suspect claimed")
			}
		}
		if len(mine) == 0 {
			time.Sleep(time.Millisecond)
			continue
		}
		rng.Shuffle(len(mine), func(a, b int) { mine[a], mine[b] = mine[b], mine[a] })
		n := 1 + rng.IntN(len(mine))
		batch := slices.Clone(mine[:n])
		mine = mine[n:]
		var many []relaytype.Lease
		for _, l := range batch {
			inst.wait()
			switch r := rng.IntN(100); {
			case r < 50:
				many = append(many, l)
			case r < 62:
				start := time.Now()
				tx, err := inst.s.TxBegin(ctx)
				if err != nil {
					record("complete tx", start, err)
					continue
				}
				ok, err := inst.s.DeliveryCompleteTx(ctx, tx, &driver.DeliveryCompleteParams{Lease: l, Now: now()})
				switch {
				case err != nil:
					_ = inst.s.TxRollback(ctx, tx)
				case rng.IntN(5) == 0:
					err = inst.s.TxRollback(ctx, tx)
					if err == nil {
						// Still in flight under the same lease.
						start := time.Now()
						_, err := inst.s.DeliveryRelease(ctx, &driver.DeliveryReleaseParams{Lease: l, Now: now()})
						record("release", start, err)
					}
					ok = false
				default:
					err = inst.s.TxCommit(ctx, tx)
				}
				if record("complete tx", start, err) && ok {
					completed.Add(1)
				}
			case r < 72:
				start := time.Now()
				_, err := inst.s.DeliveryReschedule(ctx, &driver.DeliveryRescheduleParams{Lease: l, Error: "again",
					AvailableAt: now().Add(time.Duration(rng.IntN(30)) * time.Millisecond), Now: now()})
				record("reschedule", start, err)
			case r < 82:
				start := time.Now()
				_, err := inst.s.DeliveryRelease(ctx, &driver.DeliveryReleaseParams{Lease: l, Now: now()})
				record("release", start, err)
			case r < 87:
				start := time.Now()
				ok, err := inst.s.DeliveryBury(ctx, &driver.DeliveryBuryParams{Lease: l, Error: "poison", Now: now()})
				if record("bury", start, err) && ok {
					select {
					case buried <- l.DeliveryID:
					default: // the requeuer's listing finds it
					}
				}
			default:
				mine = append(mine, l) // later
				continue
			}
		}
		if len(many) > 0 {
			rng.Shuffle(len(many), func(a, b int) { many[a], many[b] = many[b], many[a] })
			start := time.Now()
			oks, err := inst.s.DeliveryCompleteMany(ctx, &driver.DeliveryCompleteManyParams{Leases: many, Now: now()})
			if record("complete many", start, err) {
				for _, ok := range oks {
					if ok {
						completed.Add(1)
					}
				}
			}
		}
		kept := map[relaytype.Lease]bool{}
		for _, l := range mine {
			kept[l] = true
		}
		inst.drop(slices.DeleteFunc(batch, func(l relaytype.Lease) bool { return kept[l] }))
	}
}

// mixedStats counts the calls of TestNoDeadlockUnderMixedLoad per
// operation: all of them, the slow ones, the deadlocks, and keeps the
// first unexpected errors.
type mixedStats struct {
	mu        sync.Mutex
	n         map[string]int
	events    map[string]int
	slow      map[string]int
	deadlock  map[string]int
	surprises []string
}

func newMixedStats() *mixedStats {
	return &mixedStats{n: map[string]int{}, events: map[string]int{}, slow: map[string]int{}, deadlock: map[string]int{}}
}

// add counts a call of op that took d and ended with err; cancelled says
// the test's context is done (its errors are not the store's).
func (m *mixedStats) add(op string, d time.Duration, err error, cancelled bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.n[op]++
	if d >= mixedSlow {
		m.slow[op]++
	}
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
	case errors.As(err, &pgErr) && pgErr.Code == "40P01":
		m.deadlock[op]++
		if m.deadlock[op] <= 3 {
			m.surprises = append(m.surprises, fmt.Sprintf("%s: %v (%s)", op, err, pgErr.Detail))
		}
	case cancelled:
	default:
		if len(m.surprises) < 20 {
			m.surprises = append(m.surprises, fmt.Sprintf("%s: %v", op, err))
		}
	}
}

// count counts an event that is not a call (a pause, a suspect).
func (m *mixedStats) count(what string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.events[what]++
}

func (m *mixedStats) allCalled(ops []string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, op := range ops {
		if m.n[op] == 0 {
			return false
		}
	}
	return true
}

func (m *mixedStats) calls(op string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.n[op]
}

func (m *mixedStats) deadlocks() (int, map[string]int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	total := 0
	for _, n := range m.deadlock {
		total += n
	}
	return total, maps.Clone(m.deadlock)
}

// unexpected returns the errors other than deadlocks.
func (m *mixedStats) unexpected() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for _, s := range m.surprises {
		if !strings.Contains(s, "(SQLSTATE 40P01)") {
			out = append(out, s)
		}
	}
	return out
}

func (m *mixedStats) log(t *testing.T) {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, op := range slices.Sorted(maps.Keys(m.n)) {
		t.Logf("%-13s %7d calls, %3d deadlocks, %3d slower than %v", op, m.n[op], m.deadlock[op], m.slow[op], mixedSlow)
	}
	for _, what := range slices.Sorted(maps.Keys(m.events)) {
		t.Logf("%-15s %5d", what, m.events[what])
	}
	for _, s := range m.surprises {
		t.Log(s)
	}
}

// mixedServerDeadlocks reads the server's count of deadlocks broken in the
// current database.
func mixedServerDeadlocks(t *testing.T, pool *pgxpool.Pool) int64 {
	t.Helper()
	conn, err := pool.Acquire(t.Context())
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(t.Context(), "SELECT pg_stat_clear_snapshot()")
	require.NoError(t, err)
	var n int64
	require.NoError(t, conn.QueryRow(t.Context(),
		`SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()`).Scan(&n))
	return n
}
