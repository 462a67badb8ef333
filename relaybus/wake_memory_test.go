package relaybus_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/berkcansavur/relaybus/relaybus"
	"github.com/berkcansavur/relaybus/relaybus/memory"
)

// These tests run wake-ups end to end on the memory store, with a poll of
// an hour: whatever runs within them ran because of a wake-up.

func wakeConfig(owner string) relaybus.Config {
	cfg := memConfig(owner)
	cfg.PollInterval = relaybus.MaxPollInterval
	return cfg
}

// TestMemoryWakeupRunsAPublishAtOnce: an idle bus runs what another
// publishes as soon as it commits.
func TestMemoryWakeupRunsAPublishAtOnce(t *testing.T) {
	t.Parallel()
	store := memory.New(nil)
	b, err := relaybus.New[*memory.Tx](store, wakeConfig("worker"))
	require.NoError(t, err)
	var handled atomic.Int32
	require.NoError(t, b.Handle("t", "h", func(context.Context, *relaybus.Delivery) error {
		handled.Add(1)
		return nil
	}, nil))
	runAll(t, b)
	time.Sleep(20 * time.Millisecond) // the first claims found nothing: the bus is idle
	for i := range 3 {
		require.NoError(t, b.Publish(context.Background(), &relaybus.Event{Type: "t"}))
		waitUntil(t, "the publish handled", func() bool { return handled.Load() == int32(i+1) })
	}
}

// TestMemoryWakeupLanesHandedBack: a bus that shuts down hands its lanes
// back and wakes the others, which take them at once. The first bus holds
// a key's lane (its handler runs the key's first delivery, which the
// shutdown releases), so the other cannot claim the key until then.
func TestMemoryWakeupLanesHandedBack(t *testing.T) {
	t.Parallel()
	store := memory.New(nil)
	first, err := relaybus.New[*memory.Tx](store, wakeConfig("first"))
	require.NoError(t, err)
	started := make(chan struct{}, 1)
	require.NoError(t, first.Handle("t", "h", func(ctx context.Context, _ *relaybus.Delivery) error {
		started <- struct{}{}
		<-ctx.Done() // runs until the shutdown; released unfinished
		return ctx.Err()
	}, nil))
	second, err := relaybus.New[*memory.Tx](store, wakeConfig("second"))
	require.NoError(t, err)
	var handled atomic.Int32
	require.NoError(t, second.Handle("t", "h", func(context.Context, *relaybus.Delivery) error {
		handled.Add(1)
		return nil
	}, nil))

	stopFirst := runAll(t, first)
	require.NoError(t, first.Publish(context.Background(),
		&relaybus.Event{Type: "t", Key: "k"}, &relaybus.Event{Type: "t", Key: "k"}))
	<-started
	runAll(t, second)
	time.Sleep(20 * time.Millisecond)
	require.Zero(t, handled.Load(), "the second bus took a lane the first holds")
	stopFirst()
	waitUntil(t, "the second bus to run the key's deliveries", func() bool { return handled.Load() == 2 })
}
