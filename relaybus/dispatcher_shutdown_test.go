package relaybus

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

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

// A shutdown that arrives while a claim is in flight: what the claim
// returns is released unstarted, no attempt spent. Arriving before the
// claim reaches the store, it does not cut the claim short: a claim
// cancelled on the client may still commit on the server after the final
// OwnerRelinquish has looked (a lane-lease store then keeps the lanes it
// took until their lease expires, and charges what they had in flight an
// attempt, as found by the harness: a 30 s stall of the drain after a
// dispatcher stopped mid-claim). The claim runs to its end.
func TestShutdownDuringAClaim(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		hook func(tb *bundle, cancel func())
	}{
		{"after the store claimed", func(tb *bundle, cancel func()) {
			tb.spy.afterClaim = func([]*Delivery) { cancel() }
		}},
		{"before the claim reached the store", func(tb *bundle, cancel func()) {
			tb.spy.claimHook = func(n int) error {
				if n == 1 {
					cancel()
				}
				return nil
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
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
			tc.hook(tb, cancel)
			require.NoError(t, tb.bus.Run(ctx))
			tb.spy.with(func(s *spyStore[*fakeTx]) {
				require.NotEmpty(t, s.claimCtxErrs)
				require.NoError(t, s.claimCtxErrs[0], "the claim in flight was cancelled by the shutdown")
				require.Equal(t, 1, s.relinquishes)
			})
			require.Zero(t, calls.Load())
			require.Equal(t, 4, tb.countStatus(StatusPending))
			for _, d := range tb.store.snapshot() {
				require.Zero(t, d.Attempts)
			}
			require.Equal(t, int64(4), tb.bus.DispatcherStats().Released)
		})
	}
}

// syncBuffer is a log sink the test reads while the bus writes.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestShutdownTimeout: a handler that ignores its cancelled context holds
// the shutdown at most Config.ShutdownTimeout; its lease is left to
// expire (neither relinquished nor released) and the shutdown says so.
// With Disabled the shutdown waits for it.
func TestShutdownTimeout(t *testing.T) {
	t.Parallel()
	t.Run("bounded", func(t *testing.T) {
		t.Parallel()
		cfg := testConfig()
		cfg.ShutdownTimeout = 20 * time.Millisecond
		var logs syncBuffer
		cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		tb := setup(t, cfg)
		started, release := make(chan struct{}), make(chan struct{})
		returned := make(chan struct{})
		require.NoError(t, tb.bus.Handle("t", "h", func(context.Context, *Delivery) error {
			defer close(returned)
			close(started)
			<-release // ignores its context
			return nil
		}, nil))
		publishN(t, tb.bus, "t", 1, nil)
		require.NoError(t, tb.bus.Start(context.Background()))
		<-started
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		require.NoError(t, tb.bus.Stop(ctx), "Stop returns once the shutdown timeout passed")
		d := tb.store.snapshot()[0]
		require.Equal(t, StatusProcessing, d.Status, "the lease is left to expire")
		tb.spy.with(func(s *spyStore[*fakeTx]) {
			require.Zero(t, s.relinquishes, "nothing relinquished while a handler runs")
		})
		out := logs.String()
		require.Contains(t, out, "dispatcher stopping")
		require.Contains(t, out, "in_flight=1")
		require.Contains(t, out, "shutdown timeout passed with handlers still running")
		require.Contains(t, out, "still running at the shutdown timeout")
		require.Contains(t, out, "event_id="+d.EventID)
		close(release)
		<-returned // no goroutine outlives the test
	})
	t.Run("disabled waits", func(t *testing.T) {
		t.Parallel()
		cfg := testConfig()
		cfg.ShutdownTimeout = Disabled
		tb := setup(t, cfg)
		started, release := make(chan struct{}), make(chan struct{})
		require.NoError(t, tb.bus.Handle("t", "h", func(context.Context, *Delivery) error {
			close(started)
			<-release
			return nil
		}, nil))
		publishN(t, tb.bus, "t", 1, nil)
		require.NoError(t, tb.bus.Start(context.Background()))
		<-started
		stopped := make(chan error, 1)
		go func() { stopped <- tb.bus.Stop(context.Background()) }()
		select {
		case err := <-stopped:
			t.Fatalf("Stop returned (%v) while the handler ran, with no shutdown timeout", err)
		case <-time.After(50 * time.Millisecond):
		}
		close(release)
		require.NoError(t, <-stopped)
		require.Equal(t, StatusCompleted, tb.store.snapshot()[0].Status, "it finished its work and was completed")
		tb.spy.with(func(s *spyStore[*fakeTx]) { require.Equal(t, 1, s.relinquishes) })
	})
	t.Run("out of range", func(t *testing.T) {
		t.Parallel()
		for _, d := range []time.Duration{-2, time.Microsecond, MaxShutdownTimeout + 1} {
			cfg := testConfig()
			cfg.ShutdownTimeout = d
			_, err := New[*fakeTx](spy[*fakeTx](newFakeStore()), cfg)
			require.ErrorIs(t, err, ErrInvalid, "%v", d)
			require.ErrorContains(t, err, "Config.ShutdownTimeout")
		}
	})
}
