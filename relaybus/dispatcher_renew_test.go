package relaybus

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/berkcansavur/relaybus/relaybus/driver"
)

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

func (failingExtend) LeaseExtend(context.Context, *driver.LeaseExtendParams) ([]bool, error) {
	return nil, errors.New("store unreachable")
}

// TestFinishingLeaseIsRenewed: a delivery whose final write has begun
// keeps its lease renewed while the write is stuck (a completion that
// outlived its lease would let another worker run the delivery again), and
// the renewals go on while that write is stuck: they never wait for a
// completion.
func TestFinishingLeaseIsRenewed(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.Concurrency = 2
	cfg.BatchSize = 2
	cfg.LeaseRenewInterval = 2 * time.Millisecond
	tb := setup(t, cfg)
	completing, unblock := make(chan struct{}), make(chan struct{})
	var once sync.Once
	tb.spy.completeMHook = func(int) error {
		once.Do(func() { close(completing) })
		<-unblock
		return nil
	}
	running, finish := make(chan string, 1), make(chan struct{})
	require.NoError(t, tb.bus.Handle("t", "h", func(_ context.Context, d *Delivery) error {
		if d.EventID == "t-001" {
			running <- d.ID
			<-finish // keeps a lease that must be renewed
		}
		return nil
	}, nil))
	publishN(t, tb.bus, "t", 2, nil)
	stop := tb.start(t)
	runningID := <-running
	<-completing // t-000's completion has begun and is stuck
	var finishingID string
	for _, d := range tb.store.snapshot() {
		if d.EventID == "t-000" {
			finishingID = d.ID
		}
	}
	var from int
	tb.spy.with(func(s *spyStore[*fakeTx]) { from = len(s.extended) })
	waitFor(t, "renewals while the completion is stuck", func() bool {
		var n int
		tb.spy.with(func(s *spyStore[*fakeTx]) { n = len(s.extended) })
		return n >= from+3
	})
	tb.spy.with(func(s *spyStore[*fakeTx]) {
		for _, leases := range s.extended[from:] {
			ids := make([]string, len(leases))
			for i, l := range leases {
				ids[i] = l.DeliveryID
			}
			require.ElementsMatch(t, []string{runningID, finishingID}, ids, "a renewal that is not of the running and the finishing lease")
		}
	})
	require.NotEqual(t, runningID, finishingID)
	close(unblock)
	close(finish)
	waitFor(t, "both completed", func() bool { return tb.countStatus(StatusCompleted) == 2 })
	stop()
	require.Zero(t, tb.bus.DispatcherStats().LeasesLost)
}
