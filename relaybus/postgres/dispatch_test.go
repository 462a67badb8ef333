package postgres_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/berkcansavur/relaybus/relaybus"
	"github.com/berkcansavur/relaybus/relaybus/postgres"
)

// deadlockCounter wraps a store and counts the deadlock errors (40P01) of
// the writes a dispatcher makes while it holds leases.
type deadlockCounter struct {
	relaybus.Store[pgx.Tx]
	mu sync.Mutex
	n  int
}

func (c *deadlockCounter) note(err error) {
	if isDeadlock(err) {
		c.mu.Lock()
		c.n++
		c.mu.Unlock()
	}
}

func (c *deadlockCounter) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

func (c *deadlockCounter) LeaseExtend(ctx context.Context, p *relaybus.LeaseExtendParams) ([]bool, error) {
	oks, err := c.Store.LeaseExtend(ctx, p)
	c.note(err)
	return oks, err
}

func (c *deadlockCounter) DeliveryCompleteMany(ctx context.Context, p *relaybus.DeliveryCompleteManyParams) ([]bool, error) {
	oks, err := c.Store.DeliveryCompleteMany(ctx, p)
	c.note(err)
	return oks, err
}

func (c *deadlockCounter) DeliveryComplete(ctx context.Context, p *relaybus.DeliveryCompleteParams) (bool, error) {
	ok, err := c.Store.DeliveryComplete(ctx, p)
	c.note(err)
	return ok, err
}

func (c *deadlockCounter) OwnerRelinquish(ctx context.Context, p *relaybus.OwnerRelinquishParams) (int, error) {
	n, err := c.Store.OwnerRelinquish(ctx, p)
	c.note(err)
	return n, err
}

// TestBusesWithSlowHandlersHandleEachDeliveryOnce runs several buses, each
// with its own pool as separate processes would have, against one database,
// with handlers that take time and a short lease that is renewed often: many
// renewals overlap completions of the same deliveries. No store write may
// deadlock, no lease may be lost, and every delivery runs exactly once. In
// 0.1.0 renewals and completions locked rows in different orders:
// PostgreSQL broke the deadlocks after deadlock_timeout, and leases expired
// into duplicate runs. Bounded by counts only: a slow machine makes the
// test slower, not different.
func TestBusesWithSlowHandlersHandleEachDeliveryOnce(t *testing.T) {
	t.Parallel()
	_, pool := setup(t, nil)
	const buses, events, handlerSleep = 3, 1500, 20 * time.Millisecond

	var mu sync.Mutex
	calls := map[string]int{}
	counters := make([]*deadlockCounter, buses)
	bs := make([]*relaybus.Bus[pgx.Tx], buses)
	for i := range bs {
		p, err := pgxpool.NewWithConfig(t.Context(), pool.Config().Copy())
		require.NoError(t, err)
		t.Cleanup(p.Close)
		s, err := postgres.New(p, nil)
		require.NoError(t, err)
		counters[i] = &deadlockCounter{Store: s}
		b, err := relaybus.New[pgx.Tx](counters[i], relaybus.Config{
			Owner:              fmt.Sprintf("bus%d", i),
			Concurrency:        16,
			BatchSize:          16,
			PollInterval:       5 * time.Millisecond,
			LeaseDuration:      2 * time.Second,
			LeaseRenewInterval: 20 * time.Millisecond,
		})
		require.NoError(t, err)
		require.NoError(t, b.Handle("t", "h", func(ctx context.Context, d *relaybus.Delivery) error {
			mu.Lock()
			calls[d.ID]++
			mu.Unlock()
			time.Sleep(handlerSleep) // work that outlasts many renewals' overlap with completions
			return nil
		}, nil))
		bs[i] = b
	}
	eps := make([]*relaybus.Event, events)
	for i := range eps {
		eps[i] = &relaybus.Event{ID: fmt.Sprintf("e%05d", i), Type: "t"}
	}
	for i := 0; i < events; i += 500 {
		require.NoError(t, bs[0].Publish(t.Context(), eps[i:i+500]...))
	}
	for _, b := range bs {
		require.NoError(t, b.Start(context.Background()))
	}
	s, err := postgres.New(pool, nil)
	require.NoError(t, err)
	deadline := time.Now().Add(2 * time.Minute) // a hang, not a speed target
	for {
		st, err := s.Statistics(t.Context(), &relaybus.StatisticsParams{Now: time.Now()})
		require.NoError(t, err)
		if st.Counts.Completed+st.Counts.Dead == events {
			break
		}
		require.False(t, time.Now().After(deadline), "not finished: %+v", st.Counts)
		time.Sleep(20 * time.Millisecond)
	}
	var lost, completed int64
	for _, b := range bs {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		require.NoError(t, b.Stop(ctx))
		cancel()
		st := b.DispatcherStats()
		lost += st.LeasesLost
		completed += st.Completed
	}
	deadlocks := 0
	for _, c := range counters {
		deadlocks += c.count()
	}
	require.Zero(t, deadlocks, "store writes chosen as deadlock victims")
	require.Zero(t, lost, "leases lost")
	require.Len(t, calls, events)
	for id, n := range calls {
		require.Equal(t, 1, n, "delivery %s handled %d times", id, n)
	}
	require.Equal(t, int64(events), completed)
}
