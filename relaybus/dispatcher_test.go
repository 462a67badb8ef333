package relaybus

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var errBoom = errors.New("boom")

// seen records handler calls per (event, handler).
type seen struct {
	mu    sync.Mutex
	calls map[string]int
}

func (s *seen) add(d *Delivery) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.calls == nil {
		s.calls = map[string]int{}
	}
	s.calls[d.EventID+"/"+d.Handler]++
}

func (s *seen) snapshot() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int{}
	for k, v := range s.calls {
		out[k] = v
	}
	return out
}

func publishN(t *testing.T, b *Bus[*fakeTx], typ string, n int, key func(i int) string) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range n {
		e := &Event{ID: fmt.Sprintf("%s-%03d", typ, i), Type: typ}
		if key != nil {
			e.Key = key(i)
		}
		require.NoError(t, b.Publish(context.Background(), e))
		ids[i] = e.ID
	}
	return ids
}

func TestDispatchRunsEveryHandlerForEveryEvent(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.Concurrency = 4
	cfg.BatchSize = 3
	tb := setup(t, cfg)
	var s seen
	h := func(_ context.Context, d *Delivery) error { s.add(d); return nil }
	require.NoError(t, tb.bus.Handle("a", "a1", h, nil))
	require.NoError(t, tb.bus.Handle("a", "a2", h, nil))
	require.NoError(t, tb.bus.Handle("b", "b1", h, nil))
	aIDs := publishN(t, tb.bus, "a", 40, nil)
	bIDs := publishN(t, tb.bus, "b", 20, nil)
	stop := tb.start(t)
	waitFor(t, "all completed", func() bool { return tb.countStatus(StatusCompleted) == 100 })
	stop() // counters are final once the dispatcher has stopped

	want := map[string]int{}
	for _, id := range aIDs {
		want[id+"/a1"], want[id+"/a2"] = 1, 1
	}
	for _, id := range bIDs {
		want[id+"/b1"] = 1
	}
	require.Equal(t, want, s.snapshot())
	st := tb.bus.DispatcherStats()
	require.Equal(t, int64(100), st.Claimed)
	require.Equal(t, int64(100), st.Succeeded)
	require.Equal(t, int64(100), st.Completed)
	require.Zero(t, st.Failed+st.Buried+st.Rescheduled+st.LeasesLost+st.Panics)
	require.Positive(t, st.Claims)
}

func TestDispatchRespectsConcurrency(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.Concurrency = 3
	cfg.BatchSize = 10
	tb := setup(t, cfg)
	var running, peak atomic.Int64
	require.NoError(t, tb.bus.Handle("t", "h", func(context.Context, *Delivery) error {
		n := running.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		time.Sleep(2 * time.Millisecond)
		running.Add(-1)
		return nil
	}, nil))
	publishN(t, tb.bus, "t", 30, nil)
	stop := tb.start(t)
	waitFor(t, "all completed", func() bool { return tb.countStatus(StatusCompleted) == 30 })
	stop() // counters are final once the dispatcher has stopped
	require.LessOrEqual(t, peak.Load(), int64(3))
	require.Equal(t, int64(3), peak.Load(), "the slots were used")
}

func TestCompletionBatching(t *testing.T) {
	t.Parallel()
	t.Run("window groups completions", func(t *testing.T) {
		t.Parallel()
		cfg := testConfig()
		cfg.Concurrency = 50
		cfg.BatchSize = 50
		cfg.CompletionBatchWindow = 50 * time.Millisecond
		tb := setup(t, cfg)
		require.NoError(t, tb.bus.Handle("t", "h", noop, nil))
		publishN(t, tb.bus, "t", 40, nil)
		stop := tb.start(t)
		waitFor(t, "all completed", func() bool { return tb.countStatus(StatusCompleted) == 40 })
		stop() // counters are final once the dispatcher has stopped
		tb.spy.with(func(s *spyStore[*fakeTx]) {
			total := 0
			for _, n := range s.completeMany {
				total += n
			}
			require.Equal(t, 40, total)
			// One claim of 40, handlers that return at once, and a 50ms
			// window: far fewer calls than deliveries.
			require.LessOrEqual(t, len(s.completeMany), 4, "calls: %v", s.completeMany)
			require.Zero(t, s.completeCalls)
		})
	})
	t.Run("max sends a full batch at once", func(t *testing.T) {
		t.Parallel()
		cfg := testConfig()
		cfg.Concurrency = 50
		cfg.BatchSize = 50
		cfg.CompletionBatchWindow = MaxCompletionBatchWindow // the test would take seconds if max did not flush
		cfg.CompletionBatchMax = 5
		tb := setup(t, cfg)
		require.NoError(t, tb.bus.Handle("t", "h", noop, nil))
		publishN(t, tb.bus, "t", 20, nil)
		stop := tb.start(t)
		start := time.Now()
		waitFor(t, "all completed", func() bool { return tb.countStatus(StatusCompleted) == 20 })
		stop() // counters are final once the dispatcher has stopped
		require.Less(t, time.Since(start), MaxCompletionBatchWindow)
		tb.spy.with(func(s *spyStore[*fakeTx]) {
			require.Equal(t, []int{5, 5, 5, 5}, s.completeMany)
		})
	})
	t.Run("disabled completes each alone", func(t *testing.T) {
		t.Parallel()
		cfg := testConfig()
		cfg.CompletionBatchWindow = Disabled
		tb := setup(t, cfg)
		require.NoError(t, tb.bus.Handle("t", "h", noop, nil))
		publishN(t, tb.bus, "t", 10, nil)
		stop := tb.start(t)
		waitFor(t, "all completed", func() bool { return tb.countStatus(StatusCompleted) == 10 })
		stop() // counters are final once the dispatcher has stopped
		tb.spy.with(func(s *spyStore[*fakeTx]) {
			require.Equal(t, 10, s.completeCalls)
			require.Empty(t, s.completeMany)
		})
		require.Equal(t, int64(10), tb.bus.DispatcherStats().Completed)
	})
}

func TestRetryWithBackoff(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.RetryBaseDelay = 2 * time.Millisecond
	cfg.RetryMaxDelay = 5 * time.Millisecond
	tb := setup(t, cfg)
	var attempts []int
	var mu sync.Mutex
	require.NoError(t, tb.bus.Handle("t", "h", func(_ context.Context, d *Delivery) error {
		mu.Lock()
		defer mu.Unlock()
		attempts = append(attempts, d.Attempts)
		if d.Attempts < 4 {
			return fmt.Errorf("attempt %d: %w", d.Attempts, errBoom)
		}
		return nil
	}, nil))
	publishN(t, tb.bus, "t", 1, nil)
	stop := tb.start(t)
	waitFor(t, "completed", func() bool { return tb.countStatus(StatusCompleted) == 1 })
	stop() // counters are final once the dispatcher has stopped
	mu.Lock()
	require.Equal(t, []int{1, 2, 3, 4}, attempts)
	mu.Unlock()
	tb.spy.with(func(s *spyStore[*fakeTx]) {
		require.Len(t, s.reschedules, 3)
		// base*2^(attempt-1) capped at max; no jitter in testConfig.
		for i, want := range []time.Duration{2 * time.Millisecond, 4 * time.Millisecond, 5 * time.Millisecond} {
			r := s.reschedules[i]
			require.Equal(t, want, r.AvailableAt.Sub(r.Now), "reschedule %d", i)
			require.Equal(t, fmt.Sprintf("attempt %d: boom", i+1), r.Error)
		}
	})
	st := tb.bus.DispatcherStats()
	require.Equal(t, int64(3), st.Failed)
	require.Equal(t, int64(3), st.Rescheduled)
	require.Equal(t, int64(1), st.Completed)
}

func TestRetryJitterSpreads(t *testing.T) {
	t.Parallel()
	b, err := New[*fakeTx](newFakeStore(), Config{RetryBaseDelay: time.Second, RetryJitter: 0.5})
	require.NoError(t, err)
	distinct := map[time.Duration]bool{}
	for range 50 {
		d := b.backoff(1)
		require.GreaterOrEqual(t, d, 500*time.Millisecond)
		require.LessOrEqual(t, d, 1500*time.Millisecond)
		distinct[d] = true
	}
	require.Greater(t, len(distinct), 10)
}

func TestBuryAfterBudgetAndRequeue(t *testing.T) {
	t.Parallel()
	tb := setup(t, testConfig())
	var fail atomic.Bool
	fail.Store(true)
	var calls atomic.Int64
	require.NoError(t, tb.bus.Handle("t", "h", func(context.Context, *Delivery) error {
		calls.Add(1)
		if fail.Load() {
			return errBoom
		}
		return nil
	}, &HandlerOptions{MaxAttempts: 3}))
	publishN(t, tb.bus, "t", 1, nil)
	stop := tb.start(t)
	waitFor(t, "dead", func() bool { return tb.bus.DispatcherStats().Buried == 1 })
	d := tb.store.snapshot()[0]
	require.Equal(t, StatusDead, d.Status)
	require.Equal(t, 3, d.Attempts)
	require.Equal(t, "boom", d.LastError)
	require.Equal(t, int64(3), calls.Load())
	st := tb.bus.DispatcherStats()
	require.Equal(t, int64(3), st.Failed)
	require.Equal(t, int64(2), st.Rescheduled)
	require.Equal(t, int64(1), st.Buried)

	fail.Store(false)
	require.NoError(t, tb.bus.Requeue(context.Background(), d.ID))
	waitFor(t, "completed after requeue", func() bool { return tb.countStatus(StatusCompleted) == 1 })
	require.Equal(t, int64(4), calls.Load())
	stop()
}

func TestPermanentBuriesAtOnce(t *testing.T) {
	t.Parallel()
	tb := setup(t, testConfig())
	require.NoError(t, tb.bus.Handle("t", "h", func(context.Context, *Delivery) error {
		return Permanent(errBoom)
	}, nil))
	publishN(t, tb.bus, "t", 1, nil)
	stop := tb.start(t)
	waitFor(t, "dead", func() bool { return tb.countStatus(StatusDead) == 1 })
	stop() // counters are final once the dispatcher has stopped
	d := tb.store.snapshot()[0]
	require.Equal(t, 1, d.Attempts)
	require.Contains(t, d.LastError, "boom")
	require.Equal(t, int64(1), tb.bus.DispatcherStats().Buried)
	require.Zero(t, tb.bus.DispatcherStats().Rescheduled)
}

func TestPanicIsRecovered(t *testing.T) {
	t.Parallel()
	tb := setup(t, testConfig())
	require.NoError(t, tb.bus.Handle("t", "h", func(_ context.Context, d *Delivery) error {
		if d.Attempts == 1 {
			panic("handler bug")
		}
		return nil
	}, nil))
	publishN(t, tb.bus, "t", 1, nil)
	stop := tb.start(t)
	waitFor(t, "completed", func() bool { return tb.countStatus(StatusCompleted) == 1 })
	stop() // counters are final once the dispatcher has stopped
	st := tb.bus.DispatcherStats()
	require.Equal(t, int64(1), st.Panics)
	require.Equal(t, int64(1), st.Rescheduled)
	tb.spy.with(func(s *spyStore[*fakeTx]) {
		require.Contains(t, s.reschedules[0].Error, "handler bug")
	})
}

func TestHandlerTimeout(t *testing.T) {
	t.Parallel()
	tb := setup(t, testConfig())
	require.NoError(t, tb.bus.Handle("t", "h", func(ctx context.Context, d *Delivery) error {
		<-ctx.Done()
		return ctx.Err()
	}, &HandlerOptions{Timeout: 5 * time.Millisecond, MaxAttempts: 2}))
	publishN(t, tb.bus, "t", 1, nil)
	stop := tb.start(t)
	waitFor(t, "dead", func() bool { return tb.countStatus(StatusDead) == 1 })
	stop() // counters are final once the dispatcher has stopped
	d := tb.store.snapshot()[0]
	require.Equal(t, 2, d.Attempts)
	require.Contains(t, d.LastError, "timed out")
	require.Equal(t, int64(2), tb.bus.DispatcherStats().Failed)
}

func TestLeaseRenewal(t *testing.T) {
	t.Parallel()
	// A fake clock that moves only when the test says so: the handler runs
	// for five lease durations of it, and only renewals keep the lease.
	var mu sync.Mutex
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	cfg := testConfig()
	cfg.LeaseDuration = time.Minute
	cfg.LeaseRenewInterval = time.Millisecond // real time
	cfg.Now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	tb := setup(t, cfg)
	started, finish := make(chan struct{}), make(chan struct{})
	require.NoError(t, tb.bus.Handle("t", "h", func(ctx context.Context, d *Delivery) error {
		close(started)
		select {
		case <-finish:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}, nil))
	publishN(t, tb.bus, "t", 1, nil)
	stop := tb.start(t)
	<-started
	extends := func() (n int) { tb.spy.with(func(s *spyStore[*fakeTx]) { n = s.extendCalls }); return n }
	for range 10 {
		// Half a lease per renewal: never expired if each one lands.
		n := extends()
		waitFor(t, "a renewal", func() bool { return extends() > n+1 })
		mu.Lock()
		now = now.Add(cfg.LeaseDuration / 2)
		mu.Unlock()
	}
	close(finish)
	waitFor(t, "completed", func() bool { return tb.countStatus(StatusCompleted) == 1 })
	stop() // counters are final once the dispatcher has stopped
	require.Zero(t, tb.bus.DispatcherStats().LeasesLost)
	require.Equal(t, 1, tb.store.snapshot()[0].Attempts)
}

func TestLeaseLostCancelsHandler(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.LeaseDuration = time.Second
	cfg.LeaseRenewInterval = 2 * time.Millisecond
	tb := setup(t, cfg)
	started := make(chan string, 1)
	cause := make(chan error, 1)
	require.NoError(t, tb.bus.Handle("t", "h", func(ctx context.Context, d *Delivery) error {
		started <- d.ID
		<-ctx.Done()
		cause <- context.Cause(ctx)
		return nil // even a success must not complete a lost lease
	}, nil))
	publishN(t, tb.bus, "t", 1, nil)
	stop := tb.start(t)
	id := <-started
	tb.store.loseLease(id)
	require.ErrorIs(t, <-cause, errLeaseLost)
	waitFor(t, "lease lost counted", func() bool { return tb.bus.DispatcherStats().LeasesLost == 1 })
	stop() // counters are final once the dispatcher has stopped
	d := tb.store.snapshot()[0]
	require.Equal(t, StatusProcessing, d.Status, "the new lease holder's delivery was not touched")
	require.Equal(t, "stolen", d.LeaseToken)
	st := tb.bus.DispatcherStats()
	require.Zero(t, st.Completed+st.Succeeded+st.Rescheduled+st.Released)
}

func TestLeaseExpiredByOurClockCancelsHandler(t *testing.T) {
	t.Parallel()
	var offset atomic.Int64
	cfg := testConfig()
	cfg.LeaseDuration = time.Second
	cfg.LeaseRenewInterval = 2 * time.Millisecond
	cfg.Now = func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	tb := setup(t, cfg)
	// Renewals fail: the store is unreachable for them.
	fs := &failingExtend{Store: tb.spy}
	b, err := New[*fakeTx](fs, cfg)
	require.NoError(t, err)
	tb.bus = b
	started := make(chan struct{}, 1)
	cause := make(chan error, 1)
	require.NoError(t, b.Handle("t", "h", func(ctx context.Context, d *Delivery) error {
		// The store sees the lease expire too, so the delivery is taken
		// over (by this same bus) and runs again: only the first run reports.
		select {
		case started <- struct{}{}:
		default:
		}
		<-ctx.Done()
		select {
		case cause <- context.Cause(ctx):
		default:
		}
		return ctx.Err()
	}, &HandlerOptions{MaxAttempts: 1}))
	publishN(t, b, "t", 1, nil)
	stop := tb.start(t)
	<-started
	offset.Store(int64(2 * time.Second)) // past the lease without a renewal
	require.ErrorIs(t, <-cause, errLeaseLost)
	waitFor(t, "lease lost counted", func() bool { return b.DispatcherStats().LeasesLost >= 1 })
	stop() // counters are final once the dispatcher has stopped
}

type failingExtend struct{ Store[*fakeTx] }

func (failingExtend) LeaseExtend(context.Context, *LeaseExtendParams) ([]bool, error) {
	return nil, errors.New("store unreachable")
}

func TestGracefulShutdown(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.Concurrency = 3
	tb := setup(t, cfg)
	var running sync.WaitGroup
	running.Add(3)
	require.NoError(t, tb.bus.Handle("t", "h", func(ctx context.Context, d *Delivery) error {
		running.Done()
		<-ctx.Done()
		if d.EventID == "t-000" {
			return nil // finished its work despite the shutdown: completed
		}
		return ctx.Err() // aborted: released, no attempt spent
	}, nil))
	publishN(t, tb.bus, "t", 5, nil)
	stop := tb.start(t)
	running.Wait()
	stop()

	status := map[string]Status{}
	for _, d := range tb.store.snapshot() {
		status[d.EventID] = d.Status
		if d.Status == StatusPending {
			require.Zero(t, d.Attempts, "%s: a released delivery spent an attempt", d.EventID)
		}
	}
	require.Equal(t, map[string]Status{
		"t-000": StatusCompleted, "t-001": StatusPending, "t-002": StatusPending,
		"t-003": StatusPending, "t-004": StatusPending,
	}, status)
	st := tb.bus.DispatcherStats()
	require.Equal(t, int64(2), st.Released)
	require.Equal(t, int64(1), st.Completed)
	require.Zero(t, st.Failed)
	tb.spy.with(func(s *spyStore[*fakeTx]) { require.Equal(t, 1, s.relinquishes) })
}

func TestShutdownReleasesClaimedButNotStarted(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.BatchSize = 4
	tb := setup(t, cfg)
	var calls atomic.Int64
	require.NoError(t, tb.bus.Handle("t", "h", func(context.Context, *Delivery) error {
		calls.Add(1)
		return nil
	}, nil))
	publishN(t, tb.bus, "t", 4, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The shutdown arrives while the claim is in flight.
	tb.spy.afterClaim = func([]*Delivery) { cancel() }
	require.NoError(t, tb.bus.Run(ctx))
	require.Zero(t, calls.Load())
	require.Equal(t, 4, tb.countStatus(StatusPending))
	for _, d := range tb.store.snapshot() {
		require.Zero(t, d.Attempts)
	}
	require.Equal(t, int64(4), tb.bus.DispatcherStats().Released)
}

func TestClaimErrorsAreRetried(t *testing.T) {
	t.Parallel()
	tb := setup(t, testConfig())
	tb.spy.claimHook = func(n int) error {
		if n <= 3 {
			return errors.New("connection refused")
		}
		return nil
	}
	require.NoError(t, tb.bus.Handle("t", "h", noop, nil))
	publishN(t, tb.bus, "t", 2, nil)
	stop := tb.start(t)
	waitFor(t, "completed", func() bool { return tb.countStatus(StatusCompleted) == 2 })
	stop() // counters are final once the dispatcher has stopped
}

// failingWrites is how many times the store fails a completion before it
// succeeds in TestCompletionErrors: its backoff adds up to 620ms, ten times
// what 0.1.0 retried for (three tries, 60ms) before it gave up.
const failingWrites = 5

func TestCompletionErrors(t *testing.T) {
	t.Parallel()
	fails := func(n int) error {
		if n <= failingWrites {
			return errors.New("relaybus test: database restarting")
		}
		return nil
	}
	t.Run("batch retried until it succeeds", func(t *testing.T) {
		t.Parallel()
		tb := setup(t, testConfig())
		tb.spy.completeMHook = fails
		var calls atomic.Int64
		require.NoError(t, tb.bus.Handle("t", "h", func(context.Context, *Delivery) error { calls.Add(1); return nil }, nil))
		publishN(t, tb.bus, "t", 1, nil)
		stop := tb.start(t)
		waitFor(t, "completed", func() bool { return tb.countStatus(StatusCompleted) == 1 })
		stop() // counters are final once the dispatcher has stopped
		tb.spy.with(func(s *spyStore[*fakeTx]) { require.Len(t, s.completeMany, failingWrites+1) })
		st := tb.bus.DispatcherStats()
		require.Equal(t, int64(1), st.Completed)
		require.Zero(t, st.LeasesLost)
		require.Equal(t, int64(1), calls.Load())
	})
	t.Run("one at a time retried until it succeeds", func(t *testing.T) {
		t.Parallel()
		cfg := testConfig()
		cfg.CompletionBatchWindow = Disabled
		tb := setup(t, cfg)
		tb.spy.completeHook = fails
		require.NoError(t, tb.bus.Handle("t", "h", noop, nil))
		publishN(t, tb.bus, "t", 1, nil)
		stop := tb.start(t)
		waitFor(t, "completed", func() bool { return tb.countStatus(StatusCompleted) == 1 })
		stop()
		tb.spy.with(func(s *spyStore[*fakeTx]) { require.Equal(t, failingWrites+1, s.completeCalls) })
		require.Equal(t, int64(1), tb.bus.DispatcherStats().Completed)
	})
	t.Run("given up when the lease expires: redelivered, never lost", func(t *testing.T) {
		t.Parallel()
		// A clock of the test's own: the third failed try moves it past
		// the lease, so no fourth try may start. Claims stop then, so that
		// the expired lease is not taken over (and run again) meanwhile.
		var mu sync.Mutex
		now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
		cfg := testConfig()
		cfg.Now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
		tb := setup(t, cfg)
		var paused atomic.Bool
		tb.spy.claimHook = func(int) error {
			if paused.Load() {
				return errors.New("relaybus test: claims paused")
			}
			return nil
		}
		const triesBeforeExpiry = 4
		tb.spy.completeMHook = func(n int) error {
			if n == triesBeforeExpiry {
				paused.Store(true)
				mu.Lock()
				now = now.Add(cfg.LeaseDuration + time.Second)
				mu.Unlock()
			}
			return errors.New("relaybus test: database down")
		}
		var calls atomic.Int64
		require.NoError(t, tb.bus.Handle("t", "h", func(context.Context, *Delivery) error { calls.Add(1); return nil }, nil))
		publishN(t, tb.bus, "t", 1, nil)
		stop := tb.start(t)
		waitFor(t, "the try that outlives the lease", func() bool {
			var n int
			tb.spy.with(func(s *spyStore[*fakeTx]) { n = len(s.completeMany) })
			return n >= triesBeforeExpiry
		})
		// The shutdown waits for the completer, which must give up: a
		// write that kept retrying past the lease would hold it past
		// stop's timeout.
		stop()
		tb.spy.with(func(s *spyStore[*fakeTx]) { require.Len(t, s.completeMany, triesBeforeExpiry) })
		// The relinquish at shutdown hands it back at once instead of
		// waiting for another worker's takeover.
		d := tb.store.snapshot()[0]
		require.Equal(t, StatusPending, d.Status)
		require.Zero(t, tb.bus.DispatcherStats().Completed)
		require.Equal(t, int64(1), calls.Load())
	})
}

// TestFinishingLeasesAreRenewed: a delivery whose completion is under way
// (or queued for the completer) keeps its lease renewed, like the leases of
// handlers still running, until the completion is done.
func TestFinishingLeasesAreRenewed(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.LeaseRenewInterval = time.Millisecond
	tb := setup(t, cfg)
	release := make(chan struct{})
	defer close(release)
	completing := make(chan struct{})
	var once sync.Once
	tb.spy.completeMHook = func(int) error {
		once.Do(func() { close(completing) })
		<-release // the completion stays under way until the test ends
		return nil
	}
	require.NoError(t, tb.bus.Handle("t", "h", func(ctx context.Context, d *Delivery) error {
		if d.EventID == "t-000" {
			<-ctx.Done() // keeps running, so renewals go on
			return ctx.Err()
		}
		return nil
	}, nil))
	publishN(t, tb.bus, "t", 2, nil)
	tb.start(t)
	<-completing
	extends := func() (n int) { tb.spy.with(func(s *spyStore[*fakeTx]) { n = len(s.extendLeases) }); return n }
	first := extends()
	// renew runs one call at a time: a call that starts after the next
	// one has begun collected its leases after the completion began.
	waitFor(t, "renewals after the completion began", func() bool { return extends() >= first+5 })
	eventOf := map[string]string{}
	for _, d := range tb.store.snapshot() {
		eventOf[d.ID] = d.EventID
	}
	var running, finishing int
	tb.spy.with(func(s *spyStore[*fakeTx]) {
		for _, ls := range s.extendLeases[first+2:] {
			for _, l := range ls {
				if eventOf[l.DeliveryID] == "t-000" {
					running++
				} else {
					finishing++
				}
			}
		}
	})
	require.Positive(t, running, "the running handler's lease was renewed")
	require.Positive(t, finishing, "the lease whose completion was under way was renewed")
}

// TestCompletionSlowerThanTheLease: a completion that takes longer than the
// lease (the store blocks or fails it for 2.5 lease durations) while
// renewals work keeps its lease, and so does the completion queued behind
// it: each delivery is handled once and completed once. 0.1.1 stopped
// renewing a lease once its handler returned, so both leases expired, the
// deliveries were claimed again and their handlers ran twice (the harness
// found it on a loaded 2-core machine, completions waiting in the queue).
func TestCompletionSlowerThanTheLease(t *testing.T) {
	t.Parallel()
	const lease = time.Second
	for _, tc := range []struct {
		name string
		hook func(until time.Time) func(n int) error
	}{
		{"blocked", func(until time.Time) func(int) error {
			return func(n int) error {
				if n == 1 {
					time.Sleep(time.Until(until))
				}
				return nil
			}
		}},
		{"failing", func(until time.Time) func(int) error {
			return func(int) error {
				if time.Now().Before(until) {
					return errors.New("relaybus test: database overloaded")
				}
				return nil
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := testConfig()
			cfg.Concurrency = 2
			cfg.LeaseDuration = lease
			cfg.LeaseRenewInterval = 10 * time.Millisecond
			// One completion per batch: the second waits in the queue
			// while the first is stuck.
			cfg.CompletionBatchMax = 1
			tb := setup(t, cfg)
			var s seen
			require.NoError(t, tb.bus.Handle("t", "h", func(_ context.Context, d *Delivery) error { s.add(d); return nil }, nil))
			ids := publishN(t, tb.bus, "t", 2, nil)
			tb.spy.completeMHook = tc.hook(time.Now().Add(5 * lease / 2))
			stop := tb.start(t)
			deadline := time.Now().Add(5 * lease)
			for tb.countStatus(StatusCompleted) < 2 && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
			stop() // counters are final once the dispatcher has stopped
			want := map[string]int{ids[0] + "/h": 1, ids[1] + "/h": 1}
			require.Equal(t, want, s.snapshot(), "handler runs")
			require.Equal(t, 2, tb.countStatus(StatusCompleted))
			for _, d := range tb.store.snapshot() {
				require.Equal(t, 1, d.Attempts, d.EventID)
			}
			st := tb.bus.DispatcherStats()
			require.Equal(t, int64(2), st.Completed)
			require.Zero(t, st.LeasesLost)
		})
	}
}

func TestBeforeComplete(t *testing.T) {
	t.Parallel()
	t.Run("called before the completion with the batch", func(t *testing.T) {
		t.Parallel()
		cfg := testConfig()
		var tb *bundle
		var recorded atomic.Int64
		cfg.BeforeComplete = func(_ context.Context, ds []*Delivery) error {
			for _, d := range ds {
				// Not completed yet when the record is written.
				for _, sd := range tb.store.snapshot() {
					if sd.ID == d.ID && sd.Status != StatusProcessing {
						return fmt.Errorf("delivery %s is %s before BeforeComplete", d.ID, sd.Status)
					}
				}
			}
			recorded.Add(int64(len(ds)))
			return nil
		}
		tb = setup(t, cfg)
		require.NoError(t, tb.bus.Handle("t", "h", noop, nil))
		publishN(t, tb.bus, "t", 10, nil)
		stop := tb.start(t)
		waitFor(t, "completed", func() bool { return tb.countStatus(StatusCompleted) == 10 })
		stop() // counters are final once the dispatcher has stopped
		require.Equal(t, int64(10), recorded.Load())
		require.Zero(t, tb.bus.DispatcherStats().Released)
	})
	t.Run("an error releases the batch", func(t *testing.T) {
		t.Parallel()
		cfg := testConfig()
		var failures atomic.Int64
		failures.Store(2)
		cfg.BeforeComplete = func(context.Context, []*Delivery) error {
			if failures.Add(-1) >= 0 {
				return errors.New("disk full")
			}
			return nil
		}
		tb := setup(t, cfg)
		var calls atomic.Int64
		require.NoError(t, tb.bus.Handle("t", "h", func(context.Context, *Delivery) error { calls.Add(1); return nil }, nil))
		publishN(t, tb.bus, "t", 1, nil)
		stop := tb.start(t)
		waitFor(t, "completed", func() bool { return tb.countStatus(StatusCompleted) == 1 })
		stop() // counters are final once the dispatcher has stopped
		require.Equal(t, int64(3), calls.Load(), "run again after each failed record")
		st := tb.bus.DispatcherStats()
		require.Equal(t, int64(2), st.Released)
		require.Equal(t, 1, tb.store.snapshot()[0].Attempts, "released attempts are not spent")
	})
}

func TestTxHandler(t *testing.T) {
	t.Parallel()
	t.Run("writes commit with the completion", func(t *testing.T) {
		t.Parallel()
		tb := setup(t, testConfig())
		require.NoError(t, tb.bus.HandleTx("t", "h", func(_ context.Context, tx *fakeTx, d *Delivery) error {
			tx.Write(fmt.Sprintf("%s#%d", d.EventID, d.Attempts))
			if d.Attempts == 1 {
				return errBoom // rolled back: its write never lands
			}
			if d.Attempts == 2 {
				panic("tx bug") // rolled back too
			}
			return nil
		}, nil))
		publishN(t, tb.bus, "t", 1, nil)
		stop := tb.start(t)
		waitFor(t, "completed", func() bool { return tb.countStatus(StatusCompleted) == 1 })
		stop() // counters are final once the dispatcher has stopped
		tb.store.mu.Lock()
		require.Equal(t, []string{"t-000#3"}, tb.store.committed)
		tb.store.mu.Unlock()
		st := tb.bus.DispatcherStats()
		require.Equal(t, int64(2), st.Rescheduled)
		require.Equal(t, int64(1), st.Panics)
		require.Equal(t, int64(1), st.Completed)
	})
	t.Run("lease lost at completion rolls back", func(t *testing.T) {
		t.Parallel()
		tb := setup(t, testConfig())
		var stolen atomic.Bool
		tb.spy.completeTxHook = func() {
			if !stolen.Swap(true) {
				for _, d := range tb.store.snapshot() {
					tb.store.loseLease(d.ID)
				}
			}
		}
		require.NoError(t, tb.bus.HandleTx("t", "h", func(_ context.Context, tx *fakeTx, d *Delivery) error {
			tx.Write(d.EventID)
			return nil
		}, nil))
		publishN(t, tb.bus, "t", 1, nil)
		stop := tb.start(t)
		waitFor(t, "lease lost", func() bool { return tb.bus.DispatcherStats().LeasesLost == 1 })
		stop() // counters are final once the dispatcher has stopped
		tb.store.mu.Lock()
		require.Empty(t, tb.store.committed)
		tb.store.mu.Unlock()
		require.Zero(t, tb.bus.DispatcherStats().Completed)
	})
}

func TestKeyedOrderingEndToEnd(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.Concurrency = 8
	cfg.BatchSize = 5
	tb := setup(t, cfg)
	var mu sync.Mutex
	lastSeq := map[string]int64{} // handler/key -> last sequence handled successfully
	violations := 0
	h := func(name string) HandlerFunc {
		return func(_ context.Context, d *Delivery) error {
			mu.Lock()
			defer mu.Unlock()
			k := name + "/" + d.Key
			if d.Sequence <= lastSeq[k] {
				violations++
			}
			// Every fifth event fails once: a retry must hold back its key.
			if d.Sequence%5 == 0 && d.Attempts == 1 {
				return errBoom
			}
			lastSeq[k] = d.Sequence
			return nil
		}
	}
	require.NoError(t, tb.bus.Handle("t", "h1", h("h1"), nil))
	require.NoError(t, tb.bus.Handle("t", "h2", h("h2"), nil))
	publishN(t, tb.bus, "t", 60, func(i int) string { return fmt.Sprintf("k%d", i%3) })
	stop := tb.start(t)
	waitFor(t, "all completed", func() bool { return tb.countStatus(StatusCompleted) == 120 })
	stop() // counters are final once the dispatcher has stopped
	mu.Lock()
	defer mu.Unlock()
	require.Zero(t, violations)
	for _, name := range []string{"h1", "h2"} {
		for k := range 3 {
			require.Equal(t, int64(20), lastSeq[fmt.Sprintf("%s/k%d", name, k)])
		}
	}
}

// partialClaim fails its first non-empty claim after claiming, returning
// what it claimed with the error, as a store that claims row by row does.
type partialClaim struct {
	Store[*fakeTx]
	failed atomic.Bool
}

func (p *partialClaim) DeliveryClaim(ctx context.Context, params *DeliveryClaimParams) ([]*Delivery, error) {
	ds, err := p.Store.DeliveryClaim(ctx, params)
	if err == nil && len(ds) > 0 && p.failed.CompareAndSwap(false, true) {
		return ds, errors.New("connection reset after the first rows")
	}
	return ds, err
}

func TestClaimErrorWithPartialResultRunsWhatWasClaimed(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.LeaseDuration = time.Hour // a delivery left to its lease would not run again in this test
	tb := setup(t, cfg)
	ps := &partialClaim{Store: tb.spy}
	b, err := New[*fakeTx](ps, cfg)
	require.NoError(t, err)
	tb.bus = b
	var s seen
	require.NoError(t, b.Handle("t", "h", func(_ context.Context, d *Delivery) error { s.add(d); return nil }, nil))
	ids := publishN(t, b, "t", 3, nil)
	stop := tb.start(t)
	waitFor(t, "all completed", func() bool { return tb.countStatus(StatusCompleted) == 3 })
	stop()
	require.True(t, ps.failed.Load(), "the partial claim was never exercised")
	want := map[string]int{}
	for _, id := range ids {
		want[id+"/h"] = 1
	}
	require.Equal(t, want, s.snapshot(), "each delivery runs once, on its first claim")
}
