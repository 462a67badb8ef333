package relaybus

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestDispatcherStatsInFlight: InFlight is the deliveries whose lease the
// dispatcher holds: the handlers running (up to Concurrency; the rest is
// not claimed), less one whose lease was found lost even while its
// handler still runs, and 0 once everything has completed and after the
// dispatcher stopped.
func TestDispatcherStatsInFlight(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.Concurrency = 3
	cfg.BatchSize = 10
	cfg.LeaseRenewInterval = 2 * time.Millisecond
	tb := setup(t, cfg)
	require.Zero(t, tb.bus.DispatcherStats().InFlight, "before Start")
	gate := make(chan struct{})
	started := make(chan string, 5)
	require.NoError(t, tb.bus.Handle("t", "h", func(ctx context.Context, d *Delivery) error {
		started <- d.ID
		select {
		case <-gate:
		case <-ctx.Done(): // the lost lease
			<-gate
		}
		return nil
	}, nil))
	publishN(t, tb.bus, "t", 5, nil)
	stop := tb.start(t)
	first := <-started
	<-started
	<-started
	waitFor(t, "three in flight", func() bool { return tb.bus.DispatcherStats().InFlight == 3 })
	require.Never(t, func() bool { return tb.bus.DispatcherStats().InFlight > 3 }, 20*time.Millisecond, time.Millisecond,
		"no more than Concurrency is claimed")

	tb.store.loseLease(first)
	waitFor(t, "the lost lease left InFlight", func() bool {
		st := tb.bus.DispatcherStats()
		return st.LeasesLost == 1 && st.InFlight == 2
	})

	close(gate)
	waitFor(t, "the other four completed", func() bool { return tb.bus.DispatcherStats().Completed == 4 })
	waitFor(t, "nothing in flight", func() bool { return tb.bus.DispatcherStats().InFlight == 0 })
	stop()
	require.Zero(t, tb.bus.DispatcherStats().InFlight, "after Stop")
}
