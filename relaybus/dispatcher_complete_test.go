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

// TestCompletionErrors: a completion that fails is retried with backoff
// until its lease would expire, and never past it. A completion that gave
// up after a few tries (tens of milliseconds, shorter than a database
// restart) would make finished work run again.
func TestCompletionErrors(t *testing.T) {
	t.Parallel()
	// Completions fail for a while, then succeed: the delivery is
	// completed once and its handler never runs again. The first outage
	// is shorter than the lease (a database restart); the second lasts
	// three leases while renewals succeed (a completion stuck behind a
	// busy database): the renewed lease keeps the delivery ours, and the
	// retries go on with it.
	for _, tc := range []struct {
		name         string
		lease, renew time.Duration // 0: testConfig's (a 5 s lease)
		outage       time.Duration
		minTries     int
	}{
		{name: "an outage shorter than the lease: completed once", outage: 300 * time.Millisecond, minTries: 4},
		{name: "a completion outage longer than the lease, renewals working: completed once",
			lease: 300 * time.Millisecond, renew: 50 * time.Millisecond, outage: 900 * time.Millisecond, minTries: 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := testConfig()
			if tc.lease > 0 {
				cfg.LeaseDuration, cfg.LeaseRenewInterval = tc.lease, tc.renew
			}
			tb := setup(t, cfg)
			var firstFailure atomic.Int64
			tb.spy.completeMHook = func(int) error {
				firstFailure.CompareAndSwap(0, time.Now().UnixNano())
				if time.Since(time.Unix(0, firstFailure.Load())) < tc.outage {
					return errors.New("connection refused: the database is unavailable")
				}
				return nil
			}
			var calls atomic.Int64
			require.NoError(t, tb.bus.Handle("t", "h", func(context.Context, *Delivery) error { calls.Add(1); return nil }, nil))
			publishN(t, tb.bus, "t", 1, nil)
			stop := tb.start(t)
			waitFor(t, "completed", func() bool { return tb.countStatus(StatusCompleted) == 1 })
			stop() // counters are final once the dispatcher has stopped
			require.Equal(t, int64(1), calls.Load(), "the finished handler ran again")
			st := tb.bus.DispatcherStats()
			require.Equal(t, int64(1), st.Completed)
			require.Zero(t, st.LeasesLost+st.Released)
			tb.spy.with(func(s *spyStore[*fakeTx]) {
				require.GreaterOrEqual(t, len(s.completeMany), tc.minTries, "the completion gave up after a few tries, before its lease expired")
			})
		})
	}
	t.Run("given up when the lease would expire, never past it", func(t *testing.T) {
		t.Parallel()
		cfg := testConfig()
		cfg.LeaseDuration = time.Second
		tb := setup(t, cfg)
		tb.spy.completeMHook = func(int) error { return errors.New("down") }
		// Renewals fail too: the lease's expiry stays where the claim put
		// it, so the test knows the deadline.
		b, err := New[*fakeTx](&failingExtend{Store: tb.spy}, cfg)
		require.NoError(t, err)
		tb.bus = b
		expiries := make(chan time.Time, 2)
		require.NoError(t, b.Handle("t", "h", func(_ context.Context, d *Delivery) error {
			select {
			case expiries <- d.LeaseExpiresAt:
			default:
			}
			return nil
		}, nil))
		publishN(t, b, "t", 1, nil)
		stop := tb.start(t)
		first := <-expiries
		// After the lease expired the delivery is claimed again (by this
		// bus, the only one): at-least-once, nothing lost.
		second := <-expiries
		stop()
		require.False(t, second.Before(first), "claimed again before the first lease expired")
		tb.spy.with(func(s *spyStore[*fakeTx]) {
			token := s.completeMCalls[0].leases[0].Token
			tries := 0
			for _, c := range s.completeMCalls {
				if c.leases[0].Token != token {
					continue
				}
				tries++
				if tries == 1 {
					continue // bounded by LeaseDuration from when it started, before the lease expired
				}
				// A retry starts before the lease expires and its context
				// ends by then, so it cannot act past the lease whenever
				// the scheduler lets it run (1 ms: the lease's expiry is on
				// the store's clock, the deadline on the real one).
				require.False(t, c.deadline.IsZero(), "a retry without a deadline")
				require.False(t, c.deadline.After(first.Add(time.Millisecond)), "a retry whose context ends at %v, after the lease expired at %v", c.deadline, first)
			}
			require.Greater(t, tries, 3, "the completion gave up after a few tries, before its lease expired")
		})
	})
	t.Run("an invalid completion is not retried", func(t *testing.T) {
		t.Parallel()
		tb := setup(t, testConfig())
		tb.spy.completeMHook = func(int) error { return invalidf("the store refuses these leases") }
		require.NoError(t, tb.bus.Handle("t", "h", noop, nil))
		publishN(t, tb.bus, "t", 1, nil)
		stop := tb.start(t)
		waitFor(t, "the completion refused", func() bool {
			var n int
			tb.spy.with(func(s *spyStore[*fakeTx]) { n = len(s.completeMany) })
			return n > 0
		})
		stop()
		tb.spy.with(func(s *spyStore[*fakeTx]) { require.Len(t, s.completeMany, 1) })
		require.Zero(t, tb.bus.DispatcherStats().Completed)
	})
}

// TestAfterFinish: every attempt the store recorded is reported once,
// with its outcome, after the write: a completion (batched, one at a time,
// or in a handler's transaction) once the store confirmed it; a reschedule
// and a burial; a completion that found its lease lost. A panic in the
// hook is logged and changes nothing.
func TestAfterFinish(t *testing.T) {
	t.Parallel()
	type seen struct {
		mu  sync.Mutex
		ids map[FinishOutcome][]string
	}
	collect := func(tb **bundle, s *seen) func(context.Context, Finish) {
		s.ids = map[FinishOutcome][]string{}
		return func(_ context.Context, f Finish) {
			s.mu.Lock()
			defer s.mu.Unlock()
			if f.Outcome == FinishCompleted {
				for _, sd := range (*tb).store.snapshot() {
					if sd.ID == f.Delivery.ID && sd.Status != StatusCompleted {
						panic(fmt.Sprintf("delivery %s is %s in AfterFinish", f.Delivery.ID, sd.Status))
					}
				}
			}
			s.ids[f.Outcome] = append(s.ids[f.Outcome], f.Delivery.ID)
		}
	}
	for _, tc := range []struct {
		name   string
		window time.Duration
		tx     bool
	}{
		{name: "batched", window: 20 * time.Millisecond},
		{name: "one at a time", window: Disabled},
		{name: "transactional handler", tx: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := testConfig()
			cfg.Concurrency = 10
			cfg.CompletionBatchWindow = tc.window
			var tb *bundle
			var s seen
			cfg.AfterFinish = collect(&tb, &s)
			tb = setup(t, cfg)
			if tc.tx {
				require.NoError(t, tb.bus.HandleTx("t", "h", func(context.Context, *fakeTx, *Delivery) error { return nil }, nil))
			} else {
				require.NoError(t, tb.bus.Handle("t", "h", noop, nil))
			}
			publishN(t, tb.bus, "t", 20, nil)
			stop := tb.start(t)
			waitFor(t, "completed", func() bool { return tb.countStatus(StatusCompleted) == 20 })
			stop() // every AfterFinish call has returned once the dispatcher stopped
			s.mu.Lock()
			defer s.mu.Unlock()
			var want []string
			for _, d := range tb.store.snapshot() {
				want = append(want, d.ID)
			}
			require.ElementsMatch(t, want, s.ids[FinishCompleted], "each completed delivery once")
			require.Len(t, s.ids, 1, "nothing but completions: %v", s.ids)
		})
	}
	t.Run("retries, dead letters and a lost lease", func(t *testing.T) {
		t.Parallel()
		cfg := testConfig()
		cfg.CompletionBatchWindow = Disabled
		cfg.MaxAttempts = 2
		var tb *bundle
		var s seen
		cfg.AfterFinish = collect(&tb, &s)
		tb = setup(t, cfg)
		require.NoError(t, tb.bus.Handle("t", "fails", func(context.Context, *Delivery) error { return errors.New("no") }, nil))
		var first atomic.Bool
		require.NoError(t, tb.bus.Handle("t", "loses", func(_ context.Context, d *Delivery) error {
			if !first.Swap(true) {
				tb.store.loseLease(d.ID) // the completion will find the lease gone
			}
			return nil
		}, nil))
		publishN(t, tb.bus, "t", 1, nil)
		stop := tb.start(t)
		waitFor(t, "dead and lost", func() bool {
			st := tb.bus.DispatcherStats()
			return st.Buried == 1 && st.LeasesLost == 1
		})
		stop()
		s.mu.Lock()
		defer s.mu.Unlock()
		require.Len(t, s.ids[FinishRescheduled], 1)
		require.Len(t, s.ids[FinishBuried], 1)
		require.Len(t, s.ids[FinishLeaseLost], 1)
	})
	t.Run("a panic is logged", func(t *testing.T) {
		t.Parallel()
		cfg := testConfig()
		var calls atomic.Int64
		cfg.AfterFinish = func(context.Context, Finish) {
			calls.Add(1)
			panic("recorder broke")
		}
		tb := setup(t, cfg)
		require.NoError(t, tb.bus.Handle("t", "h", noop, nil))
		publishN(t, tb.bus, "t", 3, nil)
		stop := tb.start(t)
		waitFor(t, "completed", func() bool { return tb.countStatus(StatusCompleted) == 3 })
		stop()
		require.Equal(t, int64(3), calls.Load())
		require.Equal(t, int64(3), tb.bus.DispatcherStats().Completed)
	})
}
