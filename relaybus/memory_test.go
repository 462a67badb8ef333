package relaybus_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/berkcansavur/relaybus/relaybus"
	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/memory"
	"github.com/berkcansavur/relaybus/relaybus/storetest"
)

// These tests run the dispatcher end to end on the real in-memory store,
// several buses competing for one store as several processes would.

func memConfig(owner string) relaybus.Config {
	return relaybus.Config{
		Owner:          owner,
		Concurrency:    8,
		BatchSize:      5,
		PollInterval:   time.Millisecond,
		RetryBaseDelay: time.Millisecond,
		RetryMaxDelay:  4 * time.Millisecond,
		RetryJitter:    relaybus.Disabled,
	}
}

// runAll starts every bus and stops them all when the test ends.
func runAll(t *testing.T, buses ...*relaybus.Bus[*memory.Tx]) (stop func()) {
	t.Helper()
	for _, b := range buses {
		require.NoError(t, b.Start(context.Background()))
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			for _, b := range buses {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				require.NoError(t, b.Stop(ctx))
				cancel()
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func settled(t *testing.T, store *memory.Store) func() bool {
	return func() bool {
		st, err := store.Statistics(context.Background(), &driver.StatisticsParams{Now: time.Now()})
		require.NoError(t, err)
		return st.Pending+st.Processing == 0
	}
}

func TestMemoryCompetingBusesHandleEachDeliveryOnce(t *testing.T) {
	t.Parallel()
	store := memory.New(nil)
	var mu sync.Mutex
	calls := map[string]int{}
	var buses []*relaybus.Bus[*memory.Tx]
	for i := range 3 {
		b, err := relaybus.New[*memory.Tx](store, memConfig(fmt.Sprintf("worker-%d", i)))
		require.NoError(t, err)
		for _, h := range []string{"h1", "h2"} {
			require.NoError(t, b.Handle("t", h, func(_ context.Context, d *relaybus.Delivery) error {
				mu.Lock()
				calls[d.EventID+"/"+d.Handler]++
				mu.Unlock()
				return nil
			}, nil))
		}
		buses = append(buses, b)
	}
	const events = 300
	batch := make([]*relaybus.Event, 0, events)
	for i := range events {
		batch = append(batch, &relaybus.Event{ID: fmt.Sprintf("e%03d", i), Type: "t"})
	}
	require.NoError(t, buses[0].Publish(context.Background(), batch...))
	stop := runAll(t, buses...)
	waitUntil(t, "all handled", settled(t, store))
	stop() // counters are final once the dispatchers have stopped

	mu.Lock()
	defer mu.Unlock()
	require.Len(t, calls, 2*events)
	for k, n := range calls {
		require.Equal(t, 1, n, k)
	}
	var completed int64
	for _, b := range buses {
		completed += b.DispatcherStats().Completed
	}
	require.Equal(t, int64(2*events), completed)
}

func TestMemoryKeyedOrderAcrossBuses(t *testing.T) {
	t.Parallel()
	store := memory.New(nil)
	var mu sync.Mutex
	last := map[string]int64{}
	violations := 0
	var buses []*relaybus.Bus[*memory.Tx]
	for i := range 2 {
		b, err := relaybus.New[*memory.Tx](store, memConfig(fmt.Sprintf("worker-%d", i)))
		require.NoError(t, err)
		require.NoError(t, b.Handle("t", "h", func(_ context.Context, d *relaybus.Delivery) error {
			mu.Lock()
			defer mu.Unlock()
			if d.Sequence <= last[d.Key] {
				violations++
			}
			if d.Sequence%4 == 0 && d.Attempts == 1 {
				return fmt.Errorf("transient failure of %s#%d", d.Key, d.Sequence)
			}
			last[d.Key] = d.Sequence
			return nil
		}, nil))
		buses = append(buses, b)
	}
	for i := range 80 {
		require.NoError(t, buses[i%2].Publish(context.Background(), &relaybus.Event{Type: "t", Key: fmt.Sprintf("k%d", i%4)}))
	}
	runAll(t, buses...)
	waitUntil(t, "all handled", settled(t, store))
	mu.Lock()
	defer mu.Unlock()
	require.Zero(t, violations)
	for k := range 4 {
		require.Equal(t, int64(20), last[fmt.Sprintf("k%d", k)])
	}
}

// Hot keys move at the speed of their handlers, not one delivery per poll:
// a keyed delivery that finishes makes its bus claim the key's next one at
// once. The poll interval is an hour, so nothing here waits for it.
func TestMemoryHotKeysDoNotWaitForThePoll(t *testing.T) {
	t.Parallel()
	store := memory.New(nil)
	var mu sync.Mutex
	handled := 0
	var buses []*relaybus.Bus[*memory.Tx]
	for i := range 2 {
		cfg := memConfig(fmt.Sprintf("worker-%d", i))
		cfg.PollInterval = relaybus.MaxPollInterval
		b, err := relaybus.New[*memory.Tx](store, cfg)
		require.NoError(t, err)
		require.NoError(t, b.Handle("t", "h", func(context.Context, *relaybus.Delivery) error {
			mu.Lock()
			handled++
			mu.Unlock()
			return nil
		}, nil))
		buses = append(buses, b)
	}
	events := make([]*relaybus.Event, 0, 100)
	for i := range cap(events) {
		events = append(events, &relaybus.Event{Type: "t", Key: fmt.Sprintf("k%d", i%4)})
	}
	require.NoError(t, buses[0].Publish(context.Background(), events...))
	runAll(t, buses...)
	waitUntil(t, "all handled", settled(t, store))
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, 100, handled)
}

// A worker that crashed holding a lease: after the lease expires, a bus
// takes the delivery over (the crashed attempt counts) and runs it.
func TestMemoryTakeoverAfterCrash(t *testing.T) {
	t.Parallel()
	store := memory.New(&memory.Options{RetainCompleted: true})
	b, err := relaybus.New[*memory.Tx](store, memConfig("survivor"))
	require.NoError(t, err)
	attempts := make(chan int, 1)
	require.NoError(t, b.Handle("t", "h", func(_ context.Context, d *relaybus.Delivery) error {
		attempts <- d.Attempts
		return nil
	}, nil))
	require.NoError(t, b.Publish(context.Background(), &relaybus.Event{Type: "t"}))
	ds, err := store.DeliveryClaim(context.Background(), &driver.DeliveryClaimParams{
		Owner: "crashed", Handlers: []string{"h"}, Limit: 1, LeaseDuration: 30 * time.Millisecond, Now: time.Now(),
	})
	require.NoError(t, err)
	require.Len(t, ds, 1)
	runAll(t, b)
	require.Equal(t, 2, <-attempts)
	waitUntil(t, "completed", settled(t, store))
}

// A process that crashed with deliveries in flight: the lane-lease memory
// store marks them suspect when their lanes are taken over, and the bus
// runs each of them alone.
func TestMemorySuspectsRunAlone(t *testing.T) {
	t.Parallel()
	store := memory.New(nil)
	b, err := relaybus.New[*memory.Tx](store, memConfig("survivor"))
	require.NoError(t, err)
	var mu sync.Mutex
	running, suspects, suspectsRunning := 0, 0, 0
	var overlaps []string
	require.NoError(t, b.Handle("t", "h", func(_ context.Context, d *relaybus.Delivery) error {
		mu.Lock()
		if running > 0 && (d.Suspect || suspectsRunning > 0) {
			overlaps = append(overlaps, d.EventID)
		}
		running++
		if d.Suspect {
			suspects++
			suspectsRunning++
		}
		mu.Unlock()
		time.Sleep(time.Millisecond) // long enough to overlap with anything that runs beside it
		mu.Lock()
		running--
		if d.Suspect {
			suspectsRunning--
		}
		mu.Unlock()
		return nil
	}, nil))
	for i := range 6 {
		require.NoError(t, b.Publish(context.Background(), &relaybus.Event{ID: fmt.Sprintf("e%d", i), Type: "t"}))
	}
	ds, err := store.DeliveryClaim(context.Background(), &driver.DeliveryClaimParams{
		Owner: "crashed", Handlers: []string{"h"}, Limit: 3, LeaseDuration: 30 * time.Millisecond, Now: time.Now(),
	})
	require.NoError(t, err)
	require.NotEmpty(t, ds)
	runAll(t, b)
	waitUntil(t, "all handled", settled(t, store))
	mu.Lock()
	defer mu.Unlock()
	if suspects == 0 {
		t.Skip("no delivery was claimed as a suspect, so there is nothing to check (a lane-lease store marks what a takeover finds in flight, docs/lane-protocol.md)")
	}
	require.Empty(t, overlaps, "suspects that ran beside another handler")
}

// Stop releases what the handlers were doing: nothing is left processing
// and no attempt is spent.
func TestMemoryShutdownLeavesNothingProcessing(t *testing.T) {
	t.Parallel()
	store := memory.New(nil)
	b, err := relaybus.New[*memory.Tx](store, memConfig("w"))
	require.NoError(t, err)
	var started atomic.Int64
	require.NoError(t, b.Handle("t", "h", func(ctx context.Context, d *relaybus.Delivery) error {
		started.Add(1)
		<-ctx.Done()
		return ctx.Err()
	}, nil))
	for range 20 {
		require.NoError(t, b.Publish(context.Background(), &relaybus.Event{Type: "t"}))
	}
	require.NoError(t, b.Start(context.Background()))
	waitUntil(t, "slots full", func() bool { return started.Load() == 8 })
	require.NoError(t, b.Stop(context.Background()))

	page, err := b.ListDeliveries(context.Background(), &relaybus.DeliveryListParams{})
	require.NoError(t, err)
	require.Len(t, page.Deliveries, 20)
	for _, d := range page.Deliveries {
		require.Equal(t, relaybus.StatusPending, d.Status)
		require.Zero(t, d.Attempts)
	}
	require.Equal(t, int64(8), b.DispatcherStats().Released)
}

// TestMemorySuspectWaitsForTheDispatcherToDrain: a suspect is the oldest
// due delivery while the dispatcher has other work in flight. Its busy
// claims get nothing (docs/lane-protocol.md, variant SUSPECT_BUSY), so it
// starts nothing more, drains, and then claims and runs the suspect with
// nothing beside it; the later delivery runs only after the suspect.
func TestMemorySuspectWaitsForTheDispatcherToDrain(t *testing.T) {
	t.Parallel()
	store := memory.New(nil)
	cfg := memConfig("worker")
	cfg.Concurrency, cfg.BatchSize = 4, 4
	b, err := relaybus.New[*memory.Tx](store, cfg)
	require.NoError(t, err)
	// Distinct lanes, so that no delivery shares a lane with another.
	a1, a2, s, b1 := storetest.IDInLane(1), storetest.IDInLane(2), storetest.IDInLane(3), storetest.IDInLane(4)
	gates := map[string]chan struct{}{a1: make(chan struct{}), a2: make(chan struct{}), s: make(chan struct{})}
	started := make(chan string, 10)
	var mu sync.Mutex
	running := map[string]bool{}
	var overlaps []string
	require.NoError(t, b.Handle("t", "h", func(ctx context.Context, d *relaybus.Delivery) error {
		mu.Lock()
		for other := range running {
			if d.EventID == s || other == s {
				overlaps = append(overlaps, d.EventID+" beside "+other)
			}
		}
		running[d.EventID] = true
		mu.Unlock()
		started <- d.EventID
		if g := gates[d.EventID]; g != nil {
			<-g
		}
		mu.Lock()
		delete(running, d.EventID)
		mu.Unlock()
		return nil
	}, nil))
	ctx := context.Background()

	// s was claimed by a process that died; its lease expires soon.
	require.NoError(t, b.Publish(ctx, &relaybus.Event{ID: s, Type: "t"}))
	crashed, err := store.DeliveryClaim(ctx, &driver.DeliveryClaimParams{Owner: "crashed", Handlers: []string{"h"},
		Limit: 1, LeaseDuration: 200 * time.Millisecond, Now: time.Now()})
	require.NoError(t, err)
	require.Len(t, crashed, 1)
	require.NoError(t, b.Publish(ctx, &relaybus.Event{ID: a1, Type: "t"}, &relaybus.Event{ID: a2, Type: "t"}))
	runAll(t, b)
	require.ElementsMatch(t, []string{a1, a2}, []string{<-started, <-started})

	// The dispatcher's busy claims take the lane over (s becomes a
	// suspect) and get nothing while s is the oldest candidate.
	waitUntil(t, "s taken over", func() bool {
		page, err := store.DeliveryList(ctx, &driver.DeliveryListParams{EventID: s})
		require.NoError(t, err)
		return len(page.Deliveries) == 1 && page.Deliveries[0].Suspect
	})
	require.NoError(t, b.Publish(ctx, &relaybus.Event{ID: b1, Type: "t"}))
	select {
	case id := <-started:
		t.Fatalf("%s started while a1 and a2 run and the suspect is the oldest due delivery", id)
	case <-time.After(50 * time.Millisecond):
	}
	// Nor is the suspect held while they run: a crash of a1 or a2 would
	// charge it (a busy claim gets no suspect at all).
	page, err := store.DeliveryList(ctx, &driver.DeliveryListParams{EventID: s})
	require.NoError(t, err)
	require.Equal(t, relaybus.StatusPending, page.Deliveries[0].Status, "the busy dispatcher holds the suspect")

	close(gates[a1])
	close(gates[a2])
	require.Equal(t, s, <-started, "the drained dispatcher did not claim the suspect first")
	select {
	case id := <-started:
		t.Fatalf("%s started beside the suspect", id)
	case <-time.After(50 * time.Millisecond):
	}
	close(gates[s])
	require.Equal(t, b1, <-started)
	waitUntil(t, "all handled", settled(t, store))
	mu.Lock()
	defer mu.Unlock()
	require.Empty(t, overlaps)
}

// TestPayloadLimitNamed: a payload over a limit is refused with the limit
// that applied: the Bus's Config.MaxPayloadBytes, or the store's own
// option when the Bus allows more than the store does.
func TestPayloadLimitNamed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name          string
		bus, store    int
		size          int
		limit, naming string
	}{
		{name: "the bus's limit", bus: 8, store: 64, size: 9, limit: "over the limit of 8", naming: "(Config.MaxPayloadBytes)"},
		{name: "the store's limit", bus: 64, store: 8, size: 9, limit: "over the limit of 8", naming: "(the store's MaxPayloadBytes option)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			bus, err := relaybus.New[*memory.Tx](memory.New(&memory.Options{MaxPayloadBytes: tc.store}), relaybus.Config{MaxPayloadBytes: tc.bus})
			require.NoError(t, err)
			require.NoError(t, bus.Handle("t", "h", func(context.Context, *relaybus.Delivery) error { return nil }, nil))
			err = bus.Publish(ctx, &relaybus.Event{Type: "t", Payload: make([]byte, tc.size)})
			require.ErrorIs(t, err, relaybus.ErrInvalid)
			require.ErrorContains(t, err, tc.limit)
			require.ErrorContains(t, err, tc.naming)
		})
	}
}
