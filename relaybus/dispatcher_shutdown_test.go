package relaybus

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

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
