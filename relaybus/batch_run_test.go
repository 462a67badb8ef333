package relaybus_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/berkcansavur/relaybus/relaybus"
	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/memory"
)

// A keyed run of several calls (BatchOptions.MaxCalls): the backlog of a
// key, claimed at once, goes to the handler MaxSize at a time, in
// sequence order, one call after the other, from one claim.
func TestMemoryBatchRunOfSeveralCalls(t *testing.T) {
	t.Parallel()
	store := &claimCounter{Store: memory.New(nil)}
	cfg := memConfig("w")
	cfg.BatchSize = 100
	b, err := relaybus.New[*memory.Tx](store, cfg)
	require.NoError(t, err)
	l := newBatchLog()
	require.NoError(t, b.HandleBatch("t", "h", l.handler(nil), &relaybus.BatchOptions{MaxSize: 3, MaxCalls: 4}))
	for range 12 {
		require.NoError(t, b.Publish(context.Background(), &relaybus.Event{Type: "t", Key: "k0"}))
	}
	runAll(t, b)
	waitUntil(t, "all handled", settled(t, store.Store))
	l.check(t, 1, 12)
	l.mu.Lock()
	defer l.mu.Unlock()
	var sizes []int
	for _, c := range l.calls {
		sizes = append(sizes, len(c))
	}
	require.Equal(t, []int{3, 3, 3, 3}, sizes, "the run of 12 in four calls of MaxSize")
	require.Equal(t, []int{12}, store.claimed(), "one claim took the whole run")
}

// claimCounter is a memory store that records how many deliveries each
// claim that returned any gave.
type claimCounter struct {
	*memory.Store
	mu    sync.Mutex
	sizes []int
}

func (c *claimCounter) DeliveryClaim(ctx context.Context, p *driver.DeliveryClaimParams) ([]*relaybus.Delivery, error) {
	ds, err := c.Store.DeliveryClaim(ctx, p)
	if len(ds) > 0 {
		c.mu.Lock()
		c.sizes = append(c.sizes, len(ds))
		c.mu.Unlock()
	}
	return ds, err
}

func (c *claimCounter) claimed() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.sizes)
}

// A failure in the second call of a run: the first call's successes and
// the second's before the failure are completed, the failed delivery is
// retried with its own attempts, and the rest of the run, the third and
// fourth calls' deliveries included, is released without running and
// without spending an attempt; all of them run again after the failed one.
func TestMemoryBatchRunFailureInALaterCall(t *testing.T) {
	t.Parallel()
	store := memory.New(nil)
	cfg := memConfig("w")
	cfg.BatchSize = 100
	outcomes := &finishLog{}
	cfg.AfterFinish = outcomes.record
	b, err := relaybus.New[*memory.Tx](store, cfg)
	require.NoError(t, err)
	l := newBatchLog()
	require.NoError(t, b.HandleBatch("t", "h", l.handler(func(d *relaybus.Delivery) bool {
		return d.Sequence == 5 && d.Attempts == 1
	}), &relaybus.BatchOptions{MaxSize: 3, MaxCalls: 4}))
	for range 12 {
		require.NoError(t, b.Publish(context.Background(), &relaybus.Event{Type: "t", Key: "k0"}))
	}
	runAll(t, b)
	waitUntil(t, "all handled", settled(t, store))
	// 12 completions, the reschedule of 5, the releases of 6 to 12.
	waitUntil(t, "every AfterFinish", func() bool { return outcomes.count() >= 20 })
	l.check(t, 1, 12)
	l.mu.Lock()
	defer l.mu.Unlock()
	require.GreaterOrEqual(t, len(l.calls), 3)
	require.Len(t, l.calls[0], 3)
	require.Equal(t, int64(4), l.calls[1][0].Sequence)
	retry := l.calls[2]
	require.Equal(t, int64(5), retry[0].Sequence, "the run goes on from the failed delivery")
	require.Equal(t, 2, retry[0].Attempts, "the failed delivery's second attempt")
	for _, c := range l.calls[2:] {
		for _, d := range c {
			if d.Sequence > 5 {
				require.Equal(t, 1, d.Attempts, "delivery %d, released, spent an attempt", d.Sequence)
			}
		}
	}
	completed := []relaybus.FinishOutcome{relaybus.FinishCompleted}
	for seq := int64(1); seq <= 4; seq++ {
		require.Equal(t, completed, outcomes.of(seq), "delivery %d", seq)
	}
	require.Equal(t, []relaybus.FinishOutcome{relaybus.FinishRescheduled, relaybus.FinishCompleted}, outcomes.of(5))
	for seq := int64(6); seq <= 12; seq++ {
		require.Equal(t, []relaybus.FinishOutcome{relaybus.FinishReleased, relaybus.FinishCompleted}, outcomes.of(seq), "delivery %d", seq)
	}
}

// HandleBatchTx in a run of several calls: each call's transaction commits
// before the next call; a call that fails rolls back alone, and the calls
// after it in the run do not run (their deliveries are released).
func TestMemoryBatchTxRunCommitsEachCall(t *testing.T) {
	t.Parallel()
	store := memory.New(nil)
	cfg := memConfig("w")
	cfg.BatchSize = 100
	var mu sync.Mutex
	outcomes := &finishLog{}
	cfg.AfterFinish = outcomes.record
	b, err := relaybus.New[*memory.Tx](store, cfg)
	require.NoError(t, err)
	var calls [][]int64
	require.NoError(t, b.HandleBatchTx("t", "h", func(_ context.Context, _ *memory.Tx, _ string, ds []*relaybus.Delivery) []error {
		mu.Lock()
		defer mu.Unlock()
		var seqs []int64
		errs := make([]error, len(ds))
		for i, d := range ds {
			seqs = append(seqs, d.Sequence)
			if d.Sequence == 3 && d.Attempts == 1 {
				errs[i] = errors.New("once")
			}
		}
		calls = append(calls, seqs)
		return errs
	}, &relaybus.BatchOptions{MaxSize: 2, MaxCalls: 3}))
	for range 6 {
		require.NoError(t, b.Publish(context.Background(), &relaybus.Event{Type: "t", Key: "k0"}))
	}
	runAll(t, b)
	waitUntil(t, "all handled", settled(t, store))
	waitUntil(t, "every AfterFinish", func() bool { return outcomes.count() >= 10 }) // 6 completions, the reschedule of 3, the releases of 4, 5, 6
	mu.Lock()
	defer mu.Unlock()
	require.GreaterOrEqual(t, len(calls), 3)
	require.Equal(t, [][]int64{{1, 2}, {3, 4}}, calls[:2], "the first call committed, the second failed, the third did not run")
	require.Equal(t, int64(3), calls[2][0], "the run goes on from the failed delivery")
	completed := []relaybus.FinishOutcome{relaybus.FinishCompleted}
	require.Equal(t, completed, outcomes.of(1))
	require.Equal(t, completed, outcomes.of(2))
	require.Equal(t, []relaybus.FinishOutcome{relaybus.FinishRescheduled, relaybus.FinishCompleted}, outcomes.of(3))
	for seq := int64(4); seq <= 6; seq++ {
		require.Equal(t, []relaybus.FinishOutcome{relaybus.FinishReleased, relaybus.FinishCompleted}, outcomes.of(seq), "delivery %d", seq)
	}
}

// A shutdown during the first call of a run: the call's successes are
// completed, the calls after it do not run, and their deliveries are
// released (pending again, no attempt spent).
func TestMemoryBatchRunShutdownBetweenCalls(t *testing.T) {
	t.Parallel()
	store := memory.New(nil)
	cfg := memConfig("w")
	cfg.BatchSize = 100
	var mu sync.Mutex
	outcomes := &finishLog{}
	cfg.AfterFinish = outcomes.record
	b, err := relaybus.New[*memory.Tx](store, cfg)
	require.NoError(t, err)
	started := make(chan struct{})
	var calls [][]int64
	require.NoError(t, b.HandleBatch("t", "h", func(ctx context.Context, _ string, ds []*relaybus.Delivery) []error {
		mu.Lock()
		var seqs []int64
		for _, d := range ds {
			seqs = append(seqs, d.Sequence)
		}
		calls = append(calls, seqs)
		first := len(calls) == 1
		mu.Unlock()
		if first {
			close(started)
			<-ctx.Done() // the shutdown; the call still succeeds
		}
		return nil
	}, &relaybus.BatchOptions{MaxSize: 3, MaxCalls: 3}))
	for range 9 {
		require.NoError(t, b.Publish(context.Background(), &relaybus.Event{Type: "t", Key: "k0"}))
	}
	stop := runAll(t, b)
	<-started
	stop()
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, [][]int64{{1, 2, 3}}, calls, "the calls after the shutdown did not run")
	completed := []relaybus.FinishOutcome{relaybus.FinishCompleted}
	for seq := int64(1); seq <= 3; seq++ {
		require.Equal(t, completed, outcomes.of(seq), "delivery %d", seq)
	}
	for seq := int64(4); seq <= 9; seq++ {
		require.Equal(t, []relaybus.FinishOutcome{relaybus.FinishReleased}, outcomes.of(seq), "delivery %d", seq)
	}
	st, err := store.Statistics(context.Background(), &driver.StatisticsParams{Now: time.Now()})
	require.NoError(t, err)
	require.Equal(t, int64(6), st.Pending, "the rest of the run is pending again")
}

// finishLog records the outcomes of every delivery's final writes, by
// sequence (Config.AfterFinish).
type finishLog struct {
	mu       sync.Mutex
	outcomes map[int64][]relaybus.FinishOutcome
}

func (l *finishLog) record(_ context.Context, f relaybus.Finish) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.outcomes == nil {
		l.outcomes = map[int64][]relaybus.FinishOutcome{}
	}
	l.outcomes[f.Delivery.Sequence] = append(l.outcomes[f.Delivery.Sequence], f.Outcome)
}

// count is the number of outcomes recorded.
func (l *finishLog) count() (n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, o := range l.outcomes {
		n += len(o)
	}
	return n
}

// of returns the outcomes of the delivery of sequence seq, in order.
func (l *finishLog) of(seq int64) []relaybus.FinishOutcome {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.outcomes[seq])
}

// Batches whose successes outnumber Config.CompletionBatchMax: a keyed
// run of 150 (one call of MaxSize 150, and five calls of 30) and an
// unkeyed batch of 150 are completed, each group in one write, once.
// Before the fix the completer refused any group heavier than
// CompletionBatchMax (its MaxWeight), the jobs ended without a write,
// and the deliveries stayed pending, their leases held until they
// expired, to run again.
func TestMemoryBatchLargerThanCompletionBatchMax(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		key  string
		o    relaybus.BatchOptions
	}{
		{"keyed/one-call", "k0", relaybus.BatchOptions{MaxSize: 150, MaxCalls: 1}},
		{"keyed/five-calls", "k0", relaybus.BatchOptions{MaxSize: 30, MaxCalls: 5}},
		{"unkeyed", "", relaybus.BatchOptions{MaxSize: 150}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			store := memory.New(nil)
			cfg := memConfig("w")
			cfg.BatchSize = 150
			cfg.LeaseDuration = time.Hour // an unwritten completion must not come back by expiry
			outcomes := &finishLog{}
			cfg.AfterFinish = outcomes.record
			b, err := relaybus.New[*memory.Tx](store, cfg)
			require.NoError(t, err)
			l := newBatchLog()
			require.NoError(t, b.HandleBatch("t", "h", l.handler(nil), &c.o))
			events := make([]*relaybus.Event, 150)
			for i := range events {
				events[i] = &relaybus.Event{Type: "t", Key: c.key}
			}
			require.NoError(t, b.Publish(context.Background(), events...))
			runAll(t, b)
			waitUntil(t, "all handled", settled(t, store))
			waitUntil(t, "every AfterFinish", func() bool { return outcomes.count() >= 150 })
			require.Equal(t, 150, outcomes.count())
			l.mu.Lock()
			defer l.mu.Unlock()
			n := 0
			for _, call := range l.calls {
				n += len(call)
			}
			require.Equal(t, 150, n, "each delivery handled once")
		})
	}
}
