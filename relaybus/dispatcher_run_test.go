package relaybus

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

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
	cfg, err := Config{RetryBaseDelay: time.Second, RetryJitter: 0.5}.withDefaults()
	require.NoError(t, err)
	p := retryPolicyOf(cfg)
	distinct := map[time.Duration]bool{}
	for range 50 {
		d := p.delay(1)
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
