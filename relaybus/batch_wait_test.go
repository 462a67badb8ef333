package relaybus_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/berkcansavur/relaybus/relaybus"
	"github.com/berkcansavur/relaybus/relaybus/memory"
)

// batchWait is the BatchOptions.MaxWait of the tests below: long enough
// that the test publishes the rest of a batch before it runs out on a
// loaded machine, short enough for a unit test.
const batchWait = 2 * time.Second

// waitCalls records a batch handler's calls: when, and what each held.
type waitCalls struct {
	mu    sync.Mutex
	at    []time.Time
	calls [][]*relaybus.Delivery
}

func (w *waitCalls) handler(_ context.Context, _ string, ds []*relaybus.Delivery) []error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.at = append(w.at, time.Now())
	w.calls = append(w.calls, ds)
	return nil
}

func (w *waitCalls) sizes() []int {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []int
	for _, c := range w.calls {
		out = append(out, len(c))
	}
	return out
}

// newWaitBus is a bus on a fresh memory store with one batch handler of
// MaxSize 5 and MaxWait batchWait, started.
func newWaitBus(t *testing.T) (*relaybus.Bus[*memory.Tx], *memory.Store, *waitCalls) {
	t.Helper()
	store := memory.New(nil)
	cfg := memConfig("w")
	cfg.BatchSize = 100
	b, err := relaybus.New[*memory.Tx](store, cfg)
	require.NoError(t, err)
	w := &waitCalls{}
	require.NoError(t, b.HandleBatch("t", "h", w.handler, &relaybus.BatchOptions{MaxSize: 5, MaxWait: batchWait}))
	runAll(t, b)
	return b, store, w
}

// MaxWait: a keyed batch shorter than MaxSize is given back to fill and
// runs once its oldest delivery has waited MaxWait, with the deliveries
// of its key published meanwhile, in one call, in order; nothing of it
// ran before then, and no attempt was spent.
func TestMemoryBatchMaxWaitKeyed(t *testing.T) {
	t.Parallel()
	b, store, w := newWaitBus(t)
	ctx := context.Background()
	start := time.Now()
	require.NoError(t, b.Publish(ctx, &relaybus.Event{Type: "t", Key: "k"}))
	waitUntil(t, "the first batch given back", func() bool { return b.DispatcherStats().HeldBack >= 1 })
	for range 4 {
		require.NoError(t, b.Publish(ctx, &relaybus.Event{Type: "t", Key: "k"}))
	}
	waitUntil(t, "all handled", settled(t, store))
	require.Equal(t, []int{5}, w.sizes(), "one call of the filled batch")
	w.mu.Lock()
	defer w.mu.Unlock()
	require.False(t, w.at[0].Before(start.Add(batchWait)), "ran %v after the first publish, before MaxWait %v", w.at[0].Sub(start), batchWait)
	for i, d := range w.calls[0] {
		require.EqualValues(t, i+1, d.Sequence)
		require.Equal(t, 1, d.Attempts, "a batch given back spent an attempt")
	}
	st := b.DispatcherStats()
	require.EqualValues(t, st.HeldBack, st.Released, "every release was a batch given back")
}

// A full batch runs at once: MaxWait holds back only a batch shorter than
// MaxSize.
func TestMemoryBatchMaxWaitFullRunsAtOnce(t *testing.T) {
	t.Parallel()
	b, store, w := newWaitBus(t)
	events := make([]*relaybus.Event, 5)
	for i := range events {
		events[i] = &relaybus.Event{Type: "t", Key: "k"}
	}
	require.NoError(t, b.Publish(context.Background(), events...)) // one transaction: claimed together
	waitUntil(t, "all handled", settled(t, store))
	require.Equal(t, []int{5}, w.sizes())
	require.Zero(t, b.DispatcherStats().HeldBack, "a full batch was given back")
}

// Unkeyed: the batches given back while one is waiting come due with it,
// so the claim then takes them as one batch.
func TestMemoryBatchMaxWaitUnkeyed(t *testing.T) {
	t.Parallel()
	b, store, w := newWaitBus(t)
	ctx := context.Background()
	require.NoError(t, b.Publish(ctx, &relaybus.Event{Type: "t"}))
	waitUntil(t, "the first batch given back", func() bool { return b.DispatcherStats().HeldBack >= 1 })
	for i := range 2 {
		require.NoError(t, b.Publish(ctx, &relaybus.Event{Type: "t", ID: fmt.Sprintf("later-%d", i)}))
	}
	waitUntil(t, "all handled", settled(t, store))
	require.Equal(t, []int{3}, w.sizes(), "the batches given back ran as one")
}

// MaxWait out of range is refused at registration.
func TestBatchMaxWaitOutOfRange(t *testing.T) {
	t.Parallel()
	b, err := relaybus.New[*memory.Tx](memory.New(nil), memConfig("w"))
	require.NoError(t, err)
	h := func(context.Context, string, []*relaybus.Delivery) []error { return nil }
	for _, wait := range []time.Duration{-time.Millisecond, relaybus.MaxBatchMaxWait + time.Millisecond} {
		err := b.HandleBatch("t", "h", h, &relaybus.BatchOptions{MaxWait: wait})
		require.ErrorIs(t, err, relaybus.ErrInvalid)
		require.Contains(t, err.Error(), "MaxWait")
	}
	require.NoError(t, b.HandleBatch("t", "h", h, &relaybus.BatchOptions{MaxWait: relaybus.MaxBatchMaxWait}))
}
