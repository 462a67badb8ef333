package relaybus

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

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
