package postgres_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/berkcansavur/relaybus/relaybus"
	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/postgres"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

// keyedBatches checks a keyed batch handler's calls as they happen: the
// deliveries are the key's next ones in sequence order, and no two calls
// of one key overlap, across buses.
type keyedBatches struct {
	mu         sync.Mutex
	applied    map[string]int64
	running    map[string]bool
	violations []string
	calls      [][]*relaybus.Delivery
}

func (l *keyedBatches) handler(fail func(d *relaybus.Delivery) bool) relaybus.BatchHandlerFunc {
	return func(_ context.Context, key string, ds []*relaybus.Delivery) []error {
		l.mu.Lock()
		l.calls = append(l.calls, ds)
		if l.running[key] {
			l.violations = append(l.violations, fmt.Sprintf("two batches of key %q at once", key))
		}
		l.running[key] = true
		l.mu.Unlock()
		time.Sleep(2 * time.Millisecond)
		l.mu.Lock()
		defer l.mu.Unlock()
		l.running[key] = false
		errs := make([]error, len(ds))
		for i, d := range ds {
			if d.Key != key || d.Sequence != l.applied[key]+1 {
				l.violations = append(l.violations, fmt.Sprintf("key %q: %s#%d after %d", key, d.Key, d.Sequence, l.applied[key]))
			}
			if fail != nil && fail(d) {
				errs[i] = fmt.Errorf("failure of %s#%d", key, d.Sequence)
				return errs
			}
			l.applied[key] = d.Sequence
		}
		return nil
	}
}

func batchConfig(owner string) relaybus.Config {
	return relaybus.Config{
		Owner: owner, Concurrency: 8, BatchSize: 100, PollInterval: 5 * time.Millisecond,
		RetryBaseDelay: time.Millisecond, RetryMaxDelay: 4 * time.Millisecond, RetryJitter: relaybus.Disabled,
	}
}

func settledPG(t *testing.T, s *postgres.Store) func() bool {
	return func() bool {
		st, err := s.Statistics(t.Context(), &driver.StatisticsParams{Now: time.Now()})
		require.NoError(t, err)
		return st.Pending+st.Processing == 0
	}
}

func waitPG(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func startBus(t *testing.T, b *relaybus.Bus[pgx.Tx]) {
	t.Helper()
	require.NoError(t, b.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, b.Stop(ctx))
	})
}

// Two dispatchers (two store instances, as two processes), four hot
// keys, failures in the middle of batches: each key's deliveries are
// applied in order, one batch of a key at a time, in batches larger than
// one.
func TestBatchKeyedOrderAcrossDispatchers(t *testing.T) {
	t.Parallel()
	s, pool := setup(t, nil)
	l := &keyedBatches{applied: map[string]int64{}, running: map[string]bool{}}
	var buses []*relaybus.Bus[pgx.Tx]
	for i := range 2 {
		store := s
		if i > 0 {
			var err error
			store, err = postgres.New(pool, nil)
			require.NoError(t, err)
		}
		b, err := relaybus.New[pgx.Tx](store, batchConfig(fmt.Sprintf("w%d", i)))
		require.NoError(t, err)
		require.NoError(t, b.HandleBatch("t", "h", l.handler(func(d *relaybus.Delivery) bool {
			return d.Sequence%9 == 0 && d.Attempts == 1
		}), &relaybus.BatchOptions{MaxSize: 20}))
		buses = append(buses, b)
	}
	events := make([]*relaybus.Event, 0, 240)
	for i := range cap(events) {
		events = append(events, &relaybus.Event{Type: "t", Key: fmt.Sprintf("k%d", i%4)})
	}
	require.NoError(t, buses[0].Publish(t.Context(), events...))
	for _, b := range buses {
		startBus(t, b)
	}
	waitPG(t, "all handled", settledPG(t, s))
	l.mu.Lock()
	defer l.mu.Unlock()
	require.Empty(t, l.violations)
	largest := 0
	for _, c := range l.calls {
		largest = max(largest, len(c))
	}
	for k := range 4 {
		require.Equal(t, int64(60), l.applied[fmt.Sprintf("k%d", k)])
	}
	require.Greater(t, largest, 1, "no batch held more than one delivery")
	require.LessOrEqual(t, largest, 20)
	require.Less(t, len(l.calls), 240/2, "batches of about one delivery")
}

// A takeover while a batch runs: the old holder's batch is cancelled and
// completes nothing; the new holder runs each delivery alone (suspects),
// in order.
func TestBatchTakeoverMidBatch(t *testing.T) {
	t.Parallel()
	s, pool := setup(t, nil)
	cfgA := batchConfig("a")
	cfgA.LeaseDuration, cfgA.LeaseRenewInterval = time.Second, 10*time.Millisecond
	a, err := relaybus.New[pgx.Tx](s, cfgA)
	require.NoError(t, err)
	started := make(chan int, 1)
	cancelled := make(chan error, 1)
	require.NoError(t, a.HandleBatch("t", "h", func(ctx context.Context, _ string, ds []*relaybus.Delivery) []error {
		started <- len(ds)
		<-ctx.Done()
		cancelled <- context.Cause(ctx)
		return nil
	}, nil))
	events := make([]*relaybus.Event, 4)
	for i := range events {
		events[i] = &relaybus.Event{Type: "t", Key: "k"}
	}
	require.NoError(t, a.Publish(t.Context(), events...))
	startBus(t, a)
	require.Equal(t, 4, <-started)

	other, err := postgres.New(pool, nil)
	require.NoError(t, err)
	cfgB := batchConfig("b")
	cfgB.Now = func() time.Time { return time.Now().Add(time.Hour) } // a's lease has expired for b
	b, err := relaybus.New[pgx.Tx](other, cfgB)
	require.NoError(t, err)
	l := &keyedBatches{applied: map[string]int64{}, running: map[string]bool{}}
	require.NoError(t, b.HandleBatch("t", "h", l.handler(nil), nil))
	startBus(t, b)
	require.Error(t, <-cancelled)
	waitPG(t, "all handled", func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.applied["k"] == 4
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	require.Empty(t, l.violations)
	require.True(t, l.calls[0][0].Suspect)
	for _, c := range l.calls {
		if c[0].Suspect {
			require.Len(t, c, 1, "a suspect ran beside others")
		}
	}
	require.Zero(t, a.DispatcherStats().Completed, "the old holder completed a delivery of its lost batch")
}

// A transactional batch handler on PostgreSQL: each call inserts one row
// per delivery in its transaction and fails one delivery once. The failed
// call rolls back with its rows, so every delivery has exactly one row,
// and the key's rows are in sequence order.
func TestBatchTxAllOrNothing(t *testing.T) {
	t.Parallel()
	s, pool := setup(t, nil)
	_, err := pool.Exec(t.Context(), "CREATE TABLE applied (seq bigint NOT NULL, call int NOT NULL, n bigserial PRIMARY KEY)")
	require.NoError(t, err)
	cfg := batchConfig("w")
	cfg.RetryBaseDelay, cfg.RetryMaxDelay = 50*time.Millisecond, 50*time.Millisecond
	b, err := relaybus.New[pgx.Tx](s, cfg)
	require.NoError(t, err)
	var calls atomic32
	require.NoError(t, b.HandleBatchTx("t", "h", func(ctx context.Context, tx pgx.Tx, _ string, ds []*relaybus.Delivery) []error {
		call := calls.add()
		errs := make([]error, len(ds))
		for i, d := range ds {
			if _, err := tx.Exec(ctx, "INSERT INTO applied (seq, call) VALUES ($1, $2)", d.Sequence, call); err != nil {
				errs[i] = err
				return errs
			}
			if d.Sequence == 5 && d.Attempts == 1 {
				errs[i] = fmt.Errorf("once")
				return errs
			}
		}
		return nil
	}, &relaybus.BatchOptions{MaxSize: 20}))
	events := make([]*relaybus.Event, 8)
	for i := range events {
		events[i] = &relaybus.Event{Type: "t", Key: "k"}
	}
	require.NoError(t, b.Publish(t.Context(), events...))
	startBus(t, b)
	waitPG(t, "all handled", settledPG(t, s))
	rows, err := pool.Query(t.Context(), "SELECT seq FROM applied ORDER BY n")
	require.NoError(t, err)
	seqs, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	require.Equal(t, []int64{1, 2, 3, 4, 5, 6, 7, 8}, seqs, "one row per delivery, in order: the failed call's rows were rolled back")
	require.GreaterOrEqual(t, calls.load(), int32(2))
}

// atomic32 counts calls.
type atomic32 struct {
	mu sync.Mutex
	n  int32
}

func (a *atomic32) add() int32 {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.n++
	return a.n
}

func (a *atomic32) load() int32 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.n
}

// TestKeyRunsNotCutByTheQuota: a hot key's runs of 20 come whole from a
// held lane until it is handed back, the last one past the lane's quota
// of 64 (20, 20, 20, 20), not cut to fit it (20, 20, 20, 4); and a run
// of 1,000 takes no more than twice the quota from one hold.
func TestKeyRunsNotCutByTheQuota(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		max  int
		want []int
	}{
		{20, []int{20, 20, 20, 20}},
		{1_000, []int{128}},
	} {
		t.Run(fmt.Sprint("max=", c.max), func(t *testing.T) {
			t.Parallel()
			s, _ := setup(t, nil)
			ctx := t.Context()
			now := time.Now()
			var eps []*driver.EventPublish
			for i := range 200 {
				eps = append(eps, &driver.EventPublish{
					Event:      &relaybus.Event{ID: fmt.Sprint("e", i), Type: "t", Key: "hot"},
					Deliveries: []driver.DeliverySpec{{Handler: "h", MaxAttempts: 3}},
				})
			}
			_, err := s.EventPublish(ctx, &driver.EventPublishParams{Events: eps, Now: now})
			require.NoError(t, err)
			var sizes []int
			for range len(c.want) {
				ds, err := s.DeliveryClaim(ctx, &driver.DeliveryClaimParams{Owner: "w", Handlers: []string{"h"}, Limit: 1_000,
					LeaseDuration: time.Minute, Now: now, KeyRuns: []driver.KeyRun{{Handler: "h", Max: c.max}}})
				require.NoError(t, err)
				sizes = append(sizes, len(ds))
				leases := make([]relaytype.Lease, len(ds))
				for i, d := range ds {
					leases[i] = d.Lease()
				}
				_, err = s.DeliveryCompleteMany(ctx, &driver.DeliveryCompleteManyParams{Leases: leases, Now: now})
				require.NoError(t, err)
			}
			require.Equal(t, c.want, sizes)
		})
	}
}

// TestCarriedCompletionFreesASpentLane: a claim that carries the
// completion of a hot key's run from a lane that gave its quota claims
// the key's next run in the same round trip (the lane handed back and
// taken again), however the runs fall against the quota. Before the fix,
// the store instance's ledger still counted the carried deliveries as in
// flight when the claim read its hints, so the claim kept the spent lane,
// claimed nothing from it, and the key waited for the next claim.
func TestCarriedCompletionFreesASpentLane(t *testing.T) {
	t.Parallel()
	for _, max := range []int{80, 20} {
		t.Run(fmt.Sprint("max=", max), func(t *testing.T) {
			t.Parallel()
			s, _ := setup(t, nil)
			ctx := t.Context()
			now := time.Now()
			const total = 200
			var eps []*driver.EventPublish
			for i := range total {
				eps = append(eps, &driver.EventPublish{
					Event:      &relaybus.Event{ID: fmt.Sprint("e", i), Type: "t", Key: "hot"},
					Deliveries: []driver.DeliverySpec{{Handler: "h", MaxAttempts: 3}},
				})
			}
			_, err := s.EventPublish(ctx, &driver.EventPublishParams{Events: eps, Now: now})
			require.NoError(t, err)
			claim := driver.DeliveryClaimParams{Owner: "w", Handlers: []string{"h"}, Limit: 1_000,
				LeaseDuration: time.Minute, Now: now, KeyRuns: []driver.KeyRun{{Handler: "h", Max: max}}}
			p := claim
			ds, err := s.DeliveryClaim(ctx, &p)
			require.NoError(t, err)
			var sizes []int
			next := 0
			for len(ds) > 0 {
				sizes = append(sizes, len(ds))
				leases := make([]relaytype.Lease, len(ds))
				for i, d := range ds {
					require.Equal(t, fmt.Sprint("e", next), d.EventID, "the key's deliveries in sequence order")
					next++
					leases[i] = d.Lease()
				}
				res, err := s.DeliveryCompleteClaim(ctx, &driver.DeliveryCompleteClaimParams{
					Complete: driver.DeliveryCompleteManyParams{Leases: leases, Now: now},
					Claim:    claim,
				})
				require.NoError(t, err)
				require.Equal(t, slices.Repeat([]bool{true}, len(leases)), res.Completed)
				ds = res.Claimed
				if len(ds) == 0 && next < total {
					t.Fatalf("a claim carrying the run of %d that ended at delivery %d claimed nothing; runs so far %v", len(leases), next, sizes)
				}
			}
			require.Equal(t, total, next)
		})
	}
}

// TestLongKeyRunsDrain: batch handlers whose runs are longer than a
// lane's quota twice over (MaxSize 200, and MaxSize 20 with MaxCalls 8)
// drain four hot keys, in order, in calls longer than the quota. Before
// the fix, no claim ever returned such a run: every worker stayed idle
// with the whole backlog pending.
func TestLongKeyRunsDrain(t *testing.T) {
	t.Parallel()
	for _, o := range []relaybus.BatchOptions{{MaxSize: 200, MaxCalls: 1}, {MaxSize: 20, MaxCalls: 8}} {
		t.Run(fmt.Sprintf("size=%d/calls=%d", o.MaxSize, o.MaxCalls), func(t *testing.T) {
			t.Parallel()
			s, _ := setup(t, nil)
			l := &keyedBatches{applied: map[string]int64{}, running: map[string]bool{}}
			cfg := batchConfig("w")
			cfg.BatchSize = 1_000
			b, err := relaybus.New[pgx.Tx](s, cfg)
			require.NoError(t, err)
			require.NoError(t, b.HandleBatch("t", "h", l.handler(nil), &o))
			events := make([]*relaybus.Event, 0, 2_000)
			for i := range cap(events) {
				events = append(events, &relaybus.Event{Type: "t", Key: fmt.Sprintf("k%d", i%4)})
			}
			require.NoError(t, b.Publish(t.Context(), events...))
			startBus(t, b)
			waitPG(t, "all handled", settledPG(t, s))
			l.mu.Lock()
			defer l.mu.Unlock()
			require.Empty(t, l.violations)
			for k := range 4 {
				require.Equal(t, int64(500), l.applied[fmt.Sprintf("k%d", k)])
			}
		})
	}
}

// BatchOptions.MaxWait on PostgreSQL: a key's short batch is given back
// (a release with AvailableAt) and, once its oldest has waited MaxWait,
// claimed as one run with the key's deliveries published meanwhile.
func TestBatchMaxWaitFillsAKeyRun(t *testing.T) {
	t.Parallel()
	s, _ := setup(t, nil)
	l := &keyedBatches{applied: map[string]int64{}, running: map[string]bool{}}
	b, err := relaybus.New[pgx.Tx](s, batchConfig("w"))
	require.NoError(t, err)
	const wait = 2 * time.Second
	require.NoError(t, b.HandleBatch("t", "h", l.handler(nil), &relaybus.BatchOptions{MaxSize: 5, MaxWait: wait}))
	startBus(t, b)
	start := time.Now()
	require.NoError(t, b.Publish(t.Context(), &relaybus.Event{Type: "t", Key: "k"}))
	waitPG(t, "the first batch given back", func() bool { return b.DispatcherStats().HeldBack >= 1 })
	for range 4 {
		require.NoError(t, b.Publish(t.Context(), &relaybus.Event{Type: "t", Key: "k"}))
	}
	waitPG(t, "all handled", settledPG(t, s))
	require.GreaterOrEqual(t, time.Since(start), wait)
	l.mu.Lock()
	defer l.mu.Unlock()
	require.Empty(t, l.violations)
	require.Len(t, l.calls, 1, "one call of the filled batch")
	require.Len(t, l.calls[0], 5)
	for _, d := range l.calls[0] {
		require.Equal(t, 1, d.Attempts, "a batch given back spent an attempt")
	}
}
