package relaybus

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/memory"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

// gateStore is the memory store with its publishes watched: each
// EventPublishTx call's event IDs are recorded, a call whose first event
// ID begins with "first" can be held until the test releases it, and
// events named in refuse are refused as a database refuses data it cannot
// store (an ErrInvalid error).
type gateStore struct {
	driver.Store[*memory.Tx]

	mu      sync.Mutex
	calls   [][]string // event IDs of each EventPublishTx call, in call order
	holding bool
	holds   map[string]chan struct{} // a held call's release, by its first event ID, until released
	held    chan string              // receives the first event ID of each call being held
	refuse  map[string]bool
}

func newGateStore(hold bool) *gateStore {
	return &gateStore{Store: memory.New(nil), refuse: map[string]bool{}, holding: hold, holds: map[string]chan struct{}{}, held: make(chan string, 16)}
}

// holdOfLocked returns the release of the held call id (nil when such calls are
// not held); the caller holds g.mu.
func (g *gateStore) holdOfLocked(id string) chan struct{} {
	if !g.holding || !strings.HasPrefix(id, "first") {
		return nil
	}
	h, ok := g.holds[id]
	if !ok {
		h = make(chan struct{})
		g.holds[id] = h
	}
	return h
}

// release lets the held call id go on.
func (g *gateStore) release(id string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	close(g.holdOfLocked(id))
	delete(g.holds, id)
}

// releaseAll lets every held call go on, and holds no call after it.
func (g *gateStore) releaseAll() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, h := range g.holds {
		close(h)
	}
	g.holding = false
}

func (g *gateStore) EventPublishTx(ctx context.Context, tx *memory.Tx, p *driver.EventPublishParams) (*driver.EventPublishResult, error) {
	ids := make([]string, len(p.Events))
	for i, ep := range p.Events {
		ids[i] = ep.Event.ID
	}
	g.mu.Lock()
	g.calls = append(g.calls, ids)
	hold := g.holdOfLocked(ids[0])
	var refused []string
	for _, id := range ids {
		if g.refuse[id] {
			refused = append(refused, id)
		}
	}
	g.mu.Unlock()
	if hold != nil {
		g.held <- ids[0]
		select {
		case <-hold:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if len(refused) > 0 {
		return nil, fmt.Errorf("gate store: event %q: character not in the database's encoding: %w", refused[0], relaytype.ErrInvalid)
	}
	return g.Store.EventPublishTx(ctx, tx, p)
}

func (g *gateStore) publishCalls() [][]string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.calls)
}

// groupBus is a bus on a gate store with Declare'd handlers h1, h2 for type t.
func groupBus(t *testing.T, wait time.Duration, hold bool) (*Bus[*memory.Tx], *gateStore) {
	t.Helper()
	gs := newGateStore(hold)
	cfg := testConfig()
	cfg.PublishGroupWait = wait
	b, err := New[*memory.Tx](gs, cfg)
	require.NoError(t, err)
	for _, h := range []string{"h1", "h2"} {
		require.NoError(t, b.Declare("t", h, nil))
	}
	return b, gs
}

// joined waits until the forming group holds n calls.
func joined(t *testing.T, b *Bus[*memory.Tx], n int) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%d calls in the forming group", n), func() bool {
		b.groups.mu.Lock()
		defer b.groups.mu.Unlock()
		return b.groups.forming != nil && len(b.groups.forming.calls) == n
	})
}

// publishAsync runs Publish on its own goroutine; the channel gets its error.
func publishAsync(ctx context.Context, b *Bus[*memory.Tx], events ...*Event) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- b.Publish(ctx, events...) }()
	return ch
}

// heldIDs are the event IDs of the calls holdFirst starts: as many as
// groups are written at once, each its own lone call.
func heldIDs() []string {
	ids := []string{"first"}
	for i := 1; i < publishWritersMax; i++ {
		ids = append(ids, fmt.Sprint("first", i))
	}
	return ids
}

// heldCalls are the transactions of holdFirst's calls, in the order they
// were made, followed by then.
func heldCalls(then ...[]string) [][]string {
	var calls [][]string
	for _, id := range heldIDs() {
		calls = append(calls, []string{id})
	}
	return append(calls, then...)
}

// startHeld starts, one after the other, as many Publish calls as are
// written at once (heldIDs), each held by the gate store, and returns
// their outcomes in that order.
func startHeld(t *testing.T, b *Bus[*memory.Tx], gs *gateStore) []<-chan error {
	t.Helper()
	var outs []<-chan error
	for _, id := range heldIDs() {
		outs = append(outs, publishAsync(t.Context(), b, &Event{ID: id, Type: "t"}))
		require.Equal(t, id, <-gs.held, "the calls held in the order they were made")
	}
	return outs
}

// holdFirst starts the held calls (startHeld), so that the calls after
// them gather in the next group; the function it returns waits for the
// held calls and returns their errors joined (nil when all succeeded).
func holdFirst(t *testing.T, b *Bus[*memory.Tx], gs *gateStore) func() error {
	t.Helper()
	outs := startHeld(t, b, gs)
	return func() error {
		var errs []error
		for _, out := range outs {
			errs = append(errs, <-out)
		}
		return errors.Join(errs...)
	}
}

func deliveriesOf(t *testing.T, s driver.Store[*memory.Tx], eventID string) []*Delivery {
	t.Helper()
	res, err := s.DeliveryList(t.Context(), &driver.DeliveryListParams{EventID: eventID})
	require.NoError(t, err)
	return res.Deliveries
}

func TestPublishGroupLoneCallerGoesAtOnce(t *testing.T) {
	t.Parallel()
	// The longest wait there is: a lone caller must not pay any of it.
	b, gs := groupBus(t, MaxPublishGroupWait, false)
	for i := range 3 {
		start := time.Now()
		require.NoError(t, b.Publish(t.Context(), &Event{ID: fmt.Sprint("e", i), Type: "t"}))
		require.Less(t, time.Since(start), MaxPublishGroupWait/2, "a lone Publish waited for a group")
	}
	require.Equal(t, [][]string{{"e0"}, {"e1"}, {"e2"}}, gs.publishCalls(), "each lone call is its own transaction")
}

func TestPublishGroupGathersConcurrentCalls(t *testing.T) {
	t.Parallel()
	b, gs := groupBus(t, MaxPublishGroupWait, true)
	first := holdFirst(t, b, gs)
	var outs []<-chan error
	for i := range 5 {
		outs = append(outs, publishAsync(t.Context(), b, &Event{ID: fmt.Sprint("g", i, "a"), Type: "t"}, &Event{ID: fmt.Sprint("g", i, "b"), Type: "t"}))
		joined(t, b, i+1)
	}
	gs.releaseAll()
	require.NoError(t, first())
	for _, out := range outs {
		require.NoError(t, <-out)
	}
	require.Equal(t, heldCalls([]string{"g0a", "g0b", "g1a", "g1b", "g2a", "g2b", "g3a", "g3b", "g4a", "g4b"}), gs.publishCalls(),
		"the five calls that came while the most groups at once were written are one transaction, in the order they came")
	for _, id := range []string{"first", "g0a", "g4b"} {
		require.Len(t, deliveriesOf(t, gs, id), 2, "event %s", id)
	}
}

// TestPublishGroupSentWhenAWriterFinishes: with the most groups at once
// being written, the forming group goes as soon as one of them finishes,
// not when all have.
func TestPublishGroupSentWhenAWriterFinishes(t *testing.T) {
	t.Parallel()
	b, gs := groupBus(t, MaxPublishGroupWait, true)
	held := startHeld(t, b, gs)
	next := publishAsync(t.Context(), b, &Event{ID: "next", Type: "t"})
	joined(t, b, 1)
	start := time.Now()
	gs.release(heldIDs()[0])
	require.NoError(t, <-held[0])
	require.NoError(t, <-next)
	require.Less(t, time.Since(start), MaxPublishGroupWait/2, "the group waited for its wait, not for the write that finished")
	for _, out := range held[1:] {
		select {
		case err := <-out:
			t.Fatalf("a held call returned (%v) before it was released", err)
		default:
		}
	}
	gs.releaseAll()
	for _, out := range held[1:] {
		require.NoError(t, <-out)
	}
	require.Equal(t, heldCalls([]string{"next"}), gs.publishCalls())
}

func TestPublishGroupSameKeyInCallOrder(t *testing.T) {
	t.Parallel()
	b, gs := groupBus(t, MaxPublishGroupWait, true)
	first := holdFirst(t, b, gs)
	var outs []<-chan error
	for i := range 4 {
		outs = append(outs, publishAsync(t.Context(), b, &Event{ID: fmt.Sprint("k", i), Type: "t", Key: "account-1"}))
		joined(t, b, i+1)
	}
	gs.releaseAll()
	require.NoError(t, first())
	for _, out := range outs {
		require.NoError(t, <-out)
	}
	for i := range 4 {
		for _, d := range deliveriesOf(t, gs, fmt.Sprint("k", i)) {
			require.Equal(t, int64(i+1), d.Sequence, "call %d of the group: its key's sequence", i)
		}
	}
}

func TestPublishGroupFailingEventFailsOnlyItsCall(t *testing.T) {
	t.Parallel()
	b, gs := groupBus(t, MaxPublishGroupWait, true)
	gs.refuse["bad"] = true
	first := holdFirst(t, b, gs)
	good1 := publishAsync(t.Context(), b, &Event{ID: "good1", Type: "t", Key: "k"})
	joined(t, b, 1)
	bad := publishAsync(t.Context(), b, &Event{ID: "bad", Type: "t", Key: "k"}, &Event{ID: "bad-sibling", Type: "t"})
	joined(t, b, 2)
	good2 := publishAsync(t.Context(), b, &Event{ID: "good2", Type: "t", Key: "k"})
	joined(t, b, 3)
	gs.releaseAll()
	require.NoError(t, first())
	require.NoError(t, <-good1)
	err := <-bad
	require.ErrorIs(t, err, ErrInvalid)
	require.ErrorContains(t, err, `"bad"`)
	require.NoError(t, <-good2)

	require.Equal(t, heldCalls([]string{"good1", "bad", "bad-sibling", "good2"}, []string{"good1"}, []string{"bad", "bad-sibling"}, []string{"good2"}), gs.publishCalls(),
		"the refused group, then each call alone in the order they came")
	require.Empty(t, deliveriesOf(t, gs, "bad"))
	require.Empty(t, deliveriesOf(t, gs, "bad-sibling"), "the failing call is atomic")
	d1, d2 := deliveriesOf(t, gs, "good1"), deliveriesOf(t, gs, "good2")
	require.Len(t, d1, 2)
	require.Len(t, d2, 2)
	require.Equal(t, int64(1), d1[0].Sequence, "the failed call took no sequence")
	require.Equal(t, int64(2), d2[0].Sequence)
}

func TestPublishGroupCallCancelledBeforeSendLeaves(t *testing.T) {
	t.Parallel()
	b, gs := groupBus(t, MaxPublishGroupWait, true)
	first := holdFirst(t, b, gs)
	stay := publishAsync(t.Context(), b, &Event{ID: "stay", Type: "t"})
	joined(t, b, 1)
	ctx, cancel := context.WithCancel(t.Context())
	leave := publishAsync(ctx, b, &Event{ID: "leave", Type: "t"})
	joined(t, b, 2)
	cancel()
	err := <-leave // returns while the group is still held
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorContains(t, err, "nothing was written")
	joined(t, b, 1)
	gs.releaseAll()
	require.NoError(t, first())
	require.NoError(t, <-stay)
	require.Equal(t, heldCalls([]string{"stay"}), gs.publishCalls())
	require.Empty(t, deliveriesOf(t, gs, "leave"))
}

func TestPublishGroupAllCallsCancelledBeforeSend(t *testing.T) {
	t.Parallel()
	b, gs := groupBus(t, MaxPublishGroupWait, true)
	first := holdFirst(t, b, gs)
	ctx, cancel := context.WithCancel(t.Context())
	leave := publishAsync(ctx, b, &Event{ID: "leave", Type: "t"})
	joined(t, b, 1)
	cancel()
	require.ErrorIs(t, <-leave, context.Canceled)
	b.groups.mu.Lock()
	require.Nil(t, b.groups.forming, "an emptied group is dropped")
	b.groups.mu.Unlock()
	gs.releaseAll()
	require.NoError(t, first())
	require.Equal(t, heldCalls(), gs.publishCalls())
}

// cancelStore holds a group's publish (one not held by the gate store) until released, and
// reports whether that publish's context was cancelled.
type cancelStore struct {
	*gateStore
	release   chan struct{}
	inGroup   chan struct{}
	cancelled chan bool
}

func (c *cancelStore) EventPublishTx(ctx context.Context, tx *memory.Tx, p *driver.EventPublishParams) (*driver.EventPublishResult, error) {
	if !strings.HasPrefix(p.Events[0].Event.ID, "first") {
		close(c.inGroup)
		select {
		case <-c.release:
			c.cancelled <- false
		case <-ctx.Done():
			c.cancelled <- true
			return nil, ctx.Err()
		}
	}
	return c.gateStore.EventPublishTx(ctx, tx, p)
}

func TestPublishGroupCallCancelledAfterSend(t *testing.T) {
	t.Parallel()
	for _, others := range []bool{true, false} {
		t.Run(fmt.Sprintf("others waiting=%v", others), func(t *testing.T) {
			t.Parallel()
			gs := newGateStore(true)
			cs := &cancelStore{gateStore: gs, release: make(chan struct{}), inGroup: make(chan struct{}), cancelled: make(chan bool, 1)}
			cfg := testConfig()
			cfg.PublishGroupWait = MaxPublishGroupWait
			b, err := New[*memory.Tx](cs, cfg)
			require.NoError(t, err)
			require.NoError(t, b.Declare("t", "h1", nil))
			first := holdFirst(t, b, gs)
			ctx, cancel := context.WithCancel(t.Context())
			gone := publishAsync(ctx, b, &Event{ID: "gone", Type: "t"})
			joined(t, b, 1)
			var stay <-chan error
			if others {
				stay = publishAsync(t.Context(), b, &Event{ID: "stay", Type: "t"})
				joined(t, b, 2)
			}
			gs.releaseAll()
			require.NoError(t, first())
			<-cs.inGroup // the group is being written
			cancel()
			err = <-gone
			require.ErrorIs(t, err, context.Canceled, "a caller that stops waiting returns at once")
			require.ErrorContains(t, err, "may have committed")
			if others {
				close(cs.release)
				require.False(t, <-cs.cancelled, "the group's write was cancelled while a call still waited for it")
				require.NoError(t, <-stay)
				require.Len(t, deliveriesOf(t, gs, "gone"), 1, "the cancelled call's events committed with its group")
				return
			}
			require.True(t, <-cs.cancelled, "the group's write went on with nobody waiting for it")
			require.Empty(t, deliveriesOf(t, gs, "gone"))
		})
	}
}

func TestPublishGroupDuplicateIDGoesToNextGroup(t *testing.T) {
	t.Parallel()
	b, gs := groupBus(t, MaxPublishGroupWait, true)
	first := holdFirst(t, b, gs)
	a := publishAsync(t.Context(), b, &Event{ID: "dup", Type: "t"}, &Event{ID: "a2", Type: "t"})
	joined(t, b, 1)
	dup := publishAsync(t.Context(), b, &Event{ID: "dup", Type: "t"})
	// The second call cannot join the first's group: that group is sent
	// at once, and the second forms the next.
	waitFor(t, "the first group sent and the next forming", func() bool {
		b.groups.mu.Lock()
		defer b.groups.mu.Unlock()
		return b.groups.forming != nil && len(b.groups.forming.calls) == 1 && b.groups.forming.calls[0].params.Events[0].Event.ID == "dup" &&
			len(b.groups.forming.calls[0].params.Events) == 1
	})
	waitFor(t, "the first group written", func() bool { return len(gs.publishCalls()) == publishWritersMax+1 })
	gs.releaseAll()
	require.NoError(t, first())
	require.NoError(t, <-a)
	require.NoError(t, <-dup)
	calls := gs.publishCalls()
	require.Equal(t, heldCalls([]string{"dup", "a2"}, []string{"dup"}), calls)
	require.Len(t, deliveriesOf(t, gs, "dup"), 2, "the republish added no delivery")
}

func TestPublishGroupWaitBoundsTheWait(t *testing.T) {
	t.Parallel()
	b, gs := groupBus(t, 20*time.Millisecond, true)
	first := holdFirst(t, b, gs)
	next := publishAsync(t.Context(), b, &Event{ID: "next", Type: "t"})
	// The first write is still held: the next group goes after the wait
	// without it.
	require.NoError(t, <-next)
	require.Equal(t, heldCalls([]string{"next"}), gs.publishCalls())
	gs.releaseAll()
	require.NoError(t, first())
}

func TestPublishGroupFullGroupIsSent(t *testing.T) {
	t.Parallel()
	b, gs := groupBus(t, MaxPublishGroupWait, true)
	first := holdFirst(t, b, gs)
	events := func(prefix string, n int) []*Event {
		evs := make([]*Event, n)
		for i := range evs {
			evs[i] = &Event{ID: fmt.Sprint(prefix, i), Type: "t"}
		}
		return evs
	}
	big := publishAsync(t.Context(), b, events("big", MaxEventsPerPublish-1)...)
	joined(t, b, 1)
	over := publishAsync(t.Context(), b, events("over", 2)...)
	// over does not fit: big's group goes now (not after the wait), over
	// forms the next.
	waitFor(t, "the full group written", func() bool { return len(gs.publishCalls()) == publishWritersMax+1 })
	gs.releaseAll()
	require.NoError(t, first())
	require.NoError(t, <-big)
	require.NoError(t, <-over)
	calls := gs.publishCalls()
	require.Len(t, calls, publishWritersMax+2)
	require.Len(t, calls[publishWritersMax], MaxEventsPerPublish-1)
	require.Equal(t, []string{"over0", "over1"}, calls[publishWritersMax+1])
}

func TestPublishGroupDisabled(t *testing.T) {
	t.Parallel()
	b, gs := groupBus(t, Disabled, false)
	require.Nil(t, b.groups)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() { require.NoError(t, b.Publish(t.Context(), &Event{ID: fmt.Sprint("e", i), Type: "t"})) })
	}
	wg.Wait()
	require.Len(t, gs.publishCalls(), 8, "each Publish its own transaction")
}

// TestPublishGroupStress publishes from many goroutines at once, each call
// a few events of a few shared keys: every call returns nil, every event
// is stored once with its deliveries, and each key's sequences are 1..n
// with the events of one call in call order.
func TestPublishGroupStress(t *testing.T) {
	t.Parallel()
	b, gs := groupBus(t, 0, false)
	const goroutines, callsEach, keys = 16, 25, 3
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for c := range callsEach {
				evs := []*Event{
					{ID: fmt.Sprintf("g%d-c%d-0", g, c), Type: "t", Key: fmt.Sprint("k", (g+c)%keys)},
					{ID: fmt.Sprintf("g%d-c%d-1", g, c), Type: "t", Key: fmt.Sprint("k", (g+c)%keys)},
					{ID: fmt.Sprintf("g%d-c%d-2", g, c), Type: "t"},
				}
				if err := b.Publish(t.Context(), evs...); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	calls := gs.publishCalls()
	t.Logf("%d calls written in %d transactions", goroutines*callsEach, len(calls))
	seqs := map[string][]int64{}
	for g := range goroutines {
		for c := range callsEach {
			d0 := deliveriesOf(t, gs, fmt.Sprintf("g%d-c%d-0", g, c))
			d1 := deliveriesOf(t, gs, fmt.Sprintf("g%d-c%d-1", g, c))
			require.Len(t, d0, 2)
			require.Len(t, d1, 2)
			require.Equal(t, d0[0].Sequence+1, d1[0].Sequence, "one call's events in call order")
			k := d0[0].Key
			seqs[k] = append(seqs[k], d0[0].Sequence, d1[0].Sequence)
			require.Len(t, deliveriesOf(t, gs, fmt.Sprintf("g%d-c%d-2", g, c)), 2)
		}
	}
	for k, s := range seqs {
		slices.Sort(s)
		for i, v := range s {
			require.Equal(t, int64(i+1), v, "key %s: sequences 1..n without gap or repeat", k)
		}
	}
}

func TestPublishGroupWaitConfig(t *testing.T) {
	t.Parallel()
	c, err := Config{}.withDefaults()
	require.NoError(t, err)
	require.Equal(t, DefaultPublishGroupWait, c.PublishGroupWait)
	c, err = Config{PublishGroupWait: Disabled}.withDefaults()
	require.NoError(t, err)
	require.Equal(t, time.Duration(Disabled), c.PublishGroupWait)
	for _, bad := range []time.Duration{-2, MaxPublishGroupWait + 1} {
		_, err := Config{PublishGroupWait: bad}.withDefaults()
		require.ErrorIs(t, err, ErrInvalid)
		require.ErrorContains(t, err, "Config.PublishGroupWait")
	}
	_, err = Config{PublishGroupWait: MaxPublishGroupWait}.withDefaults()
	require.NoError(t, err)
}
