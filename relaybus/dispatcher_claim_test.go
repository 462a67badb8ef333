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

func (p *partialClaim) DeliveryClaim(ctx context.Context, params *driver.DeliveryClaimParams) ([]*Delivery, error) {
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

// longPoll configures a poll interval no test waits out: whatever runs
// within the test ran because the dispatcher claimed again at once.
func longPoll(cfg Config) Config {
	cfg.PollInterval = MaxPollInterval
	return cfg
}

func (tb *bundle) claimCalls() (n int) {
	tb.spy.with(func(s *spyStore[*fakeTx]) { n = s.claimCalls })
	return n
}

// TestClaimAgainWhenAKeyIsFreed: a keyed delivery that completes, or is
// buried, frees its key, and the dispatcher claims the key's next delivery
// at once instead of after the poll interval (waiting for the poll would
// move a hot key one delivery per poll interval).
func TestClaimAgainWhenAKeyIsFreed(t *testing.T) {
	t.Parallel()
	tb := setup(t, longPoll(testConfig()))
	var mu sync.Mutex
	var seqs []int64
	require.NoError(t, tb.bus.Handle("t", "h", func(_ context.Context, d *Delivery) error {
		mu.Lock()
		seqs = append(seqs, d.Sequence)
		mu.Unlock()
		if d.Sequence == 3 {
			return Permanent(errBoom) // buried: frees the key too
		}
		return nil
	}, nil))
	publishN(t, tb.bus, "t", 10, func(int) string { return "hot" })
	stop := tb.start(t)
	waitFor(t, "the hot key drained", func() bool {
		return tb.countStatus(StatusCompleted) == 9 && tb.countStatus(StatusDead) == 1
	})
	stop()
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, seqs)
}

// TestClaimDoesNotSpin: with nothing due the dispatcher waits for the poll;
// neither an unkeyed completion nor a keyed reschedule (its key stays
// blocked until the retry is due) wakes it.
func TestClaimDoesNotSpin(t *testing.T) {
	t.Parallel()
	cfg := longPoll(testConfig())
	cfg.RetryBaseDelay = time.Hour
	cfg.RetryMaxDelay = time.Hour
	tb := setup(t, cfg)
	require.NoError(t, tb.bus.Handle("t", "h", func(_ context.Context, d *Delivery) error {
		if d.Key != "" {
			return errBoom
		}
		return nil
	}, nil))
	require.NoError(t, tb.bus.Publish(context.Background(), &Event{ID: "unkeyed", Type: "t"}, &Event{ID: "keyed", Type: "t", Key: "k"}))
	stop := tb.start(t)
	waitFor(t, "one completed, one rescheduled", func() bool {
		return tb.countStatus(StatusCompleted) == 1 && tb.bus.DispatcherStats().Rescheduled == 1
	})
	time.Sleep(20 * time.Millisecond) // room for claims that should not come
	require.Equal(t, 1, tb.claimCalls())
	stop()
}
