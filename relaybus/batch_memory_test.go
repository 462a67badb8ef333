package relaybus_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/berkcansavur/relaybus/relaybus"
	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/memory"
)

// batchLog checks a keyed batch handler's calls as they happen: the key
// matches every delivery, the deliveries are the key's next ones in
// sequence order, and no two calls of one key overlap, across buses.
type batchLog struct {
	mu         sync.Mutex
	applied    map[string]int64 // last sequence applied per key
	running    map[string]bool
	violations []string
	calls      [][]*relaybus.Delivery
}

func newBatchLog() *batchLog {
	return &batchLog{applied: map[string]int64{}, running: map[string]bool{}}
}

// handler returns a batch handler that applies each delivery in order and
// fails the deliveries fail says, stopping at the key's first failure.
func (l *batchLog) handler(fail func(d *relaybus.Delivery) bool) relaybus.BatchHandlerFunc {
	return func(_ context.Context, key string, ds []*relaybus.Delivery) []error {
		l.mu.Lock()
		l.calls = append(l.calls, ds)
		if l.running[key] {
			l.violations = append(l.violations, fmt.Sprintf("two batches of key %q at once", key))
		}
		l.running[key] = true
		l.mu.Unlock()
		time.Sleep(time.Millisecond) // long enough to overlap with a second batch of the key, if one ran
		errs := make([]error, len(ds))
		l.mu.Lock()
		defer l.mu.Unlock()
		l.running[key] = false
		for i, d := range ds {
			if d.Key != key {
				l.violations = append(l.violations, fmt.Sprintf("delivery of key %q in a batch of key %q", d.Key, key))
			}
			if d.Sequence != l.applied[key]+1 {
				l.violations = append(l.violations, fmt.Sprintf("key %q: sequence %d after %d", key, d.Sequence, l.applied[key]))
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

func (l *batchLog) check(t *testing.T, keys int, perKey int64) (largest int) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	require.Empty(t, l.violations)
	for k := range keys {
		require.Equal(t, perKey, l.applied[fmt.Sprintf("k%d", k)])
	}
	for _, c := range l.calls {
		largest = max(largest, len(c))
	}
	return largest
}

// Two buses, four hot keys, a batch handler that fails some deliveries
// once: every key's deliveries are applied once each, in order, never two
// batches of a key at once, and in batches larger than one.
func TestMemoryBatchKeyedOrderAcrossBuses(t *testing.T) {
	t.Parallel()
	store := memory.New(nil)
	l := newBatchLog()
	var buses []*relaybus.Bus[*memory.Tx]
	for i := range 2 {
		cfg := memConfig(fmt.Sprintf("worker-%d", i))
		cfg.BatchSize = 100
		b, err := relaybus.New[*memory.Tx](store, cfg)
		require.NoError(t, err)
		require.NoError(t, b.HandleBatch("t", "h", l.handler(func(d *relaybus.Delivery) bool {
			return d.Sequence%7 == 0 && d.Attempts == 1
		}), &relaybus.BatchOptions{MaxSize: 10}))
		buses = append(buses, b)
	}
	for i := range 200 {
		require.NoError(t, buses[i%2].Publish(context.Background(), &relaybus.Event{Type: "t", Key: fmt.Sprintf("k%d", i%4)}))
	}
	runAll(t, buses...)
	waitUntil(t, "all handled", settled(t, store))
	largest := l.check(t, 4, 50)
	require.Greater(t, largest, 1, "no batch held more than one delivery")
	require.LessOrEqual(t, largest, 10, "a batch over MaxSize")
}

// A failure in the middle of a keyed batch: the deliveries before it are
// completed, the failed one is retried with its own attempts, and those
// after it are released (no attempt spent) and run again after it.
func TestMemoryBatchFailureInTheMiddle(t *testing.T) {
	t.Parallel()
	store := memory.New(nil)
	cfg := memConfig("w")
	cfg.BatchSize = 100
	var mu sync.Mutex
	outcomes := map[int64][]relaybus.FinishOutcome{}
	cfg.AfterFinish = func(_ context.Context, f relaybus.Finish) {
		mu.Lock()
		outcomes[f.Delivery.Sequence] = append(outcomes[f.Delivery.Sequence], f.Outcome)
		mu.Unlock()
	}
	b, err := relaybus.New[*memory.Tx](store, cfg)
	require.NoError(t, err)
	l := newBatchLog()
	require.NoError(t, b.HandleBatch("t", "h", l.handler(func(d *relaybus.Delivery) bool {
		return d.Sequence == 3 && d.Attempts == 1
	}), nil))
	for range 5 {
		require.NoError(t, b.Publish(context.Background(), &relaybus.Event{Type: "t", Key: "k0"}))
	}
	runAll(t, b)
	waitUntil(t, "all handled", settled(t, store))
	// AfterFinish is called after the store recorded the write: the last
	// one may come after the store shows everything done. Eight: five
	// completions, the reschedule and the two releases.
	waitUntil(t, "every AfterFinish", func() bool {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, o := range outcomes {
			n += len(o)
		}
		return n >= 8
	})
	l.check(t, 1, 5)
	l.mu.Lock()
	defer l.mu.Unlock()
	require.Len(t, l.calls, 2, "one batch, then one for the failed delivery and those after it")
	require.Len(t, l.calls[0], 5)
	second := l.calls[1]
	require.Len(t, second, 3)
	require.Equal(t, int64(3), second[0].Sequence)
	require.Equal(t, 2, second[0].Attempts, "the failed delivery's second attempt")
	require.Equal(t, 1, second[1].Attempts, "a released delivery spent an attempt")
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []relaybus.FinishOutcome{relaybus.FinishCompleted}, outcomes[1])
	require.Equal(t, []relaybus.FinishOutcome{relaybus.FinishRescheduled, relaybus.FinishCompleted}, outcomes[3])
	require.Equal(t, []relaybus.FinishOutcome{relaybus.FinishReleased, relaybus.FinishCompleted}, outcomes[5])
}

// Unkeyed deliveries come in batches of any mix, each delivery with its
// own outcome.
func TestMemoryBatchUnkeyed(t *testing.T) {
	t.Parallel()
	store := memory.New(nil)
	cfg := memConfig("w")
	cfg.BatchSize = 100
	b, err := relaybus.New[*memory.Tx](store, cfg)
	require.NoError(t, err)
	var mu sync.Mutex
	handled := map[string]int{}
	var sizes []int
	require.NoError(t, b.HandleBatch("t", "h", func(_ context.Context, key string, ds []*relaybus.Delivery) []error {
		mu.Lock()
		defer mu.Unlock()
		sizes = append(sizes, len(ds))
		errs := make([]error, len(ds))
		for i, d := range ds {
			if key != "" || d.Key != "" {
				errs[i] = relaybus.Permanent(errors.New("a keyed delivery in an unkeyed batch"))
				continue
			}
			handled[d.EventID]++
			if d.Attempts == 1 && handled[d.EventID] == 1 && len(handled)%3 == 0 {
				errs[i] = errors.New("once")
			}
		}
		return errs
	}, &relaybus.BatchOptions{MaxSize: 8}))
	for i := range 40 {
		require.NoError(t, b.Publish(context.Background(), &relaybus.Event{ID: fmt.Sprintf("e%d", i), Type: "t"}))
	}
	runAll(t, b)
	waitUntil(t, "all handled", settled(t, store))
	st, err := store.Statistics(context.Background(), &driver.StatisticsParams{Now: time.Now()})
	require.NoError(t, err)
	require.Zero(t, st.Dead)
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, handled, 40)
	for id, n := range handled {
		require.LessOrEqual(t, n, 2, "event %s", id)
	}
	require.LessOrEqual(t, slicesMax(sizes), 8)
	require.Greater(t, slicesMax(sizes), 1)
}

func slicesMax(xs []int) (m int) {
	for _, x := range xs {
		m = max(m, x)
	}
	return m
}

// A bus whose lease is taken over while its batch runs: the batch's ctx is
// cancelled, nothing of it is completed by the old holder (although the
// handler returns success), and the new holder runs each delivery, a
// suspect, alone and in order.
func TestMemoryBatchTakeoverMidBatch(t *testing.T) {
	t.Parallel()
	store := memory.New(nil)
	cfgA := memConfig("a")
	cfgA.BatchSize = 100
	cfgA.LeaseDuration = time.Second
	cfgA.LeaseRenewInterval = 5 * time.Millisecond
	a, err := relaybus.New[*memory.Tx](store, cfgA)
	require.NoError(t, err)
	started := make(chan int, 1)
	cause := make(chan error, 1)
	require.NoError(t, a.HandleBatch("t", "h", func(ctx context.Context, _ string, ds []*relaybus.Delivery) []error {
		started <- len(ds)
		<-ctx.Done()
		cause <- context.Cause(ctx)
		return nil // a success must not complete a lost lease
	}, nil))
	for range 4 {
		require.NoError(t, a.Publish(context.Background(), &relaybus.Event{Type: "t", Key: "k"}))
	}
	runAll(t, a)
	require.Equal(t, 4, <-started)

	// B's clock is an hour ahead: A's lease has expired for it.
	cfgB := memConfig("b")
	cfgB.BatchSize = 100
	cfgB.Now = func() time.Time { return time.Now().Add(time.Hour) }
	b, err := relaybus.New[*memory.Tx](store, cfgB)
	require.NoError(t, err)
	l := newBatchLog()
	require.NoError(t, b.HandleBatch("t", "h", l.handler(nil), nil))
	runAll(t, b)
	require.Error(t, <-cause)
	waitUntil(t, "all handled", settled(t, store))
	l.check(t, 0, 0)
	l.mu.Lock()
	defer l.mu.Unlock()
	require.Equal(t, int64(4), l.applied["k"])
	for _, c := range l.calls {
		if c[0].Suspect {
			require.Len(t, c, 1, "a suspect ran in a batch with others")
		}
	}
	require.True(t, l.calls[0][0].Suspect, "a delivery in flight at the takeover is a suspect")
	waitUntil(t, "a's lease lost", func() bool { return a.DispatcherStats().LeasesLost > 0 })
	require.Zero(t, a.DispatcherStats().Completed, "the old holder completed a delivery of its lost batch")
}

// Work runs a batch handler one delivery at a time, in key order, and
// records each delivery's error.
func TestMemoryBatchWork(t *testing.T) {
	t.Parallel()
	store := memory.New(nil)
	cfg := memConfig("w")
	cfg.RetryBaseDelay, cfg.RetryMaxDelay = time.Minute, time.Minute // not due again within the test
	b, err := relaybus.New[*memory.Tx](store, cfg)
	require.NoError(t, err)
	l := newBatchLog()
	require.NoError(t, b.HandleBatch("t", "h", l.handler(func(d *relaybus.Delivery) bool { return d.Sequence == 2 }), nil))
	for range 3 {
		require.NoError(t, b.Publish(context.Background(), &relaybus.Event{Type: "t", Key: "k0"}))
	}
	res, err := b.Work(context.Background(), nil)
	require.NoError(t, err)
	require.Len(t, res.Worked, 2, "the first, then the failed second, which blocks the third")
	require.NoError(t, res.Worked[0].HandlerErr)
	require.Error(t, res.Worked[1].HandlerErr)
	require.Equal(t, relaybus.FinishRescheduled, res.Worked[1].Outcome)
	l.mu.Lock()
	defer l.mu.Unlock()
	require.Empty(t, l.violations)
	for _, c := range l.calls {
		require.Len(t, c, 1)
	}
}

// A transactional batch handler: each call publishes one "applied" event
// per delivery in its transaction, and fails one delivery of a batch once.
// The failed call rolls back (its publishes with it), so every delivery
// ends with exactly one applied event, in key order, and the failed
// delivery spent its own attempt while the others spent none.
func TestMemoryBatchTxAllOrNothing(t *testing.T) {
	t.Parallel()
	store := memory.New(nil)
	cfg := memConfig("w")
	cfg.BatchSize = 100
	cfg.RetryBaseDelay, cfg.RetryMaxDelay = 100*time.Millisecond, 100*time.Millisecond
	b, err := relaybus.New[*memory.Tx](store, cfg)
	require.NoError(t, err)
	require.NoError(t, b.Declare("applied", "audit", nil))
	var mu sync.Mutex
	var sizes []int
	attempts := map[int64][]int{}
	require.NoError(t, b.HandleBatchTx("t", "h", func(ctx context.Context, tx *memory.Tx, key string, ds []*relaybus.Delivery) []error {
		mu.Lock()
		defer mu.Unlock()
		sizes = append(sizes, len(ds))
		errs := make([]error, len(ds))
		for i, d := range ds {
			attempts[d.Sequence] = append(attempts[d.Sequence], d.Attempts)
			// A new ID per call: a publish that was not rolled back would
			// show as a second event of the sequence.
			id := fmt.Sprintf("applied-%s-%d-call-%d", key, d.Sequence, len(sizes))
			if err := b.PublishTx(ctx, tx, &relaybus.Event{ID: id, Type: "applied", Key: key}); err != nil {
				errs[i] = err
				return errs
			}
			if d.Sequence == 4 && d.Attempts == 1 {
				errs[i] = errors.New("once")
				return errs
			}
		}
		return nil
	}, &relaybus.BatchOptions{MaxSize: 10}))
	for range 6 {
		require.NoError(t, b.Publish(context.Background(), &relaybus.Event{Type: "t", Key: "k0"}))
	}
	runAll(t, b)
	waitUntil(t, "all handled", func() bool {
		res, err := store.DeliveryList(context.Background(), &driver.DeliveryListParams{Handler: "h", Limit: 100})
		require.NoError(t, err)
		return len(res.Deliveries) == 0
	})
	res, err := store.DeliveryList(context.Background(), &driver.DeliveryListParams{Handler: "audit", Limit: 100})
	require.NoError(t, err)
	var applied []string
	for _, d := range res.Deliveries {
		id, _, _ := strings.Cut(d.EventID, "-call-")
		applied = append(applied, id)
	}
	require.ElementsMatch(t, []string{"applied-k0-1", "applied-k0-2", "applied-k0-3", "applied-k0-4", "applied-k0-5", "applied-k0-6"}, applied,
		"one applied event per delivery: the failed call's were rolled back")
	mu.Lock()
	defer mu.Unlock()
	// The whole run; then the prefix before the failure and, once the
	// failed one is due again, it and the rest ([6, 3, 3]); or, on a slow
	// machine where it is due again by the next claim, all six ([6, 6]).
	require.Equal(t, 6, sizes[0])
	require.Contains(t, [][]int{{6, 3, 3}, {6, 6}}, sizes)
	require.Equal(t, []int{1, 1}, attempts[1], "a delivery released by the rollback spent no attempt")
	require.Equal(t, []int{1, 2}, attempts[4], "the failed delivery's own attempt counted")
}
