package relaybus

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/berkcansavur/relaybus/relaybus/driver"
)

// carryStore is the fake store with DeliveryCompleteClaim
// (driver.CompletingClaimer): the spy's store (so plain claims and
// completions are counted by the spy) plus a record of every combined
// call. hook, when set, decides the fate of call n (1-based): fail before
// anything is written (nil result), or after the completions (Completed
// set, the claim's error).
type carryStore struct {
	*spyStore[*fakeTx]
	fs *fakeStore

	mu    sync.Mutex
	calls []carryCall
	hook  func(n int) (failBefore, failAfter bool)
}

// carryCall is one DeliveryCompleteClaim: the events of the deliveries it
// completed and of those it claimed.
type carryCall struct {
	completed, claimed []string
	busy               bool
}

var _ driver.CompletingClaimer = (*carryStore)(nil)

func (s *carryStore) ClaimsCompletions() bool { return true }

func (s *carryStore) DeliveryCompleteClaim(ctx context.Context, p *driver.DeliveryCompleteClaimParams) (*driver.DeliveryCompleteClaimResult, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	n, hook := len(s.calls)+1, s.hook
	s.mu.Unlock()
	var failBefore, failAfter bool
	if hook != nil {
		failBefore, failAfter = hook(n)
	}
	call := carryCall{busy: p.Claim.Busy}
	if failBefore {
		s.mu.Lock()
		s.calls = append(s.calls, call)
		s.mu.Unlock()
		return nil, errors.New("fake: the connection broke before the commit")
	}
	events := map[string]string{}
	for _, d := range s.fs.snapshot() {
		events[d.ID] = d.EventID
	}
	for _, l := range p.Complete.Leases {
		call.completed = append(call.completed, events[l.DeliveryID])
	}
	oks, err := s.fs.DeliveryCompleteMany(ctx, &p.Complete)
	if err != nil {
		return nil, err
	}
	res := &driver.DeliveryCompleteClaimResult{Completed: oks}
	if !failAfter {
		res.Claimed, err = s.fs.DeliveryClaim(ctx, &p.Claim)
		for _, d := range res.Claimed {
			call.claimed = append(call.claimed, d.EventID)
		}
	} else {
		err = errors.New("fake: the claim failed after the completions committed")
	}
	s.mu.Lock()
	s.calls = append(s.calls, call)
	s.mu.Unlock()
	return res, err
}

func (s *carryStore) carried() []carryCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
}

// setupCarry is setup on a store whose claims carry completions.
func setupCarry(t *testing.T, cfg Config) (*bundle, *carryStore) {
	t.Helper()
	fs := newFakeStore()
	sp := spy[*fakeTx](fs)
	cs := &carryStore{spyStore: sp, fs: fs}
	b, err := New[*fakeTx](cs, cfg)
	require.NoError(t, err)
	return &bundle{bus: b, spy: sp, store: fs}, cs
}

func TestClaimsCarryCompletions(t *testing.T) {
	t.Parallel()
	t.Run("successes ride the next claim", func(t *testing.T) {
		t.Parallel()
		cfg := testConfig()
		// Only a claim can take them before a second has passed.
		cfg.CompletionBatchWindow = MaxCompletionBatchWindow
		tb, cs := setupCarry(t, cfg)
		require.NoError(t, tb.bus.Handle("t", "h", noop, nil))
		publishN(t, tb.bus, "t", 30, nil)
		start := time.Now()
		stop := tb.start(t)
		waitFor(t, "all completed", func() bool { return tb.countStatus(StatusCompleted) == 30 })
		require.Less(t, time.Since(start), MaxCompletionBatchWindow, "the completions waited out the window")
		stop()
		n := 0
		for _, c := range cs.carried() {
			n += len(c.completed)
		}
		require.Equal(t, 30, n, "completions carried by claims")
		tb.spy.with(func(s *spyStore[*fakeTx]) { require.Empty(t, s.completeMany, "completions written on their own") })
		require.Equal(t, int64(30), tb.bus.DispatcherStats().Completed)
	})

	t.Run("a key's next delivery is claimed by the call that completes the one before", func(t *testing.T) {
		t.Parallel()
		cfg := testConfig()
		cfg.CompletionBatchWindow = MaxCompletionBatchWindow
		// No poll comes: only the keyed successes make the loop claim.
		cfg.PollInterval = time.Hour
		tb, cs := setupCarry(t, cfg)
		var order []string
		var mu sync.Mutex
		require.NoError(t, tb.bus.Handle("t", "h", func(_ context.Context, d *Delivery) error {
			mu.Lock()
			order = append(order, d.EventID)
			mu.Unlock()
			return nil
		}, nil))
		ids := publishN(t, tb.bus, "t", 5, func(int) string { return "k" })
		stop := tb.start(t)
		waitFor(t, "all completed", func() bool { return tb.countStatus(StatusCompleted) == 5 })
		stop()
		require.Equal(t, ids, order)
		// Each call that completed one of the key claimed the next.
		next := map[string]string{}
		for i := range len(ids) - 1 {
			next[ids[i]] = ids[i+1]
		}
		var got []string
		for _, c := range cs.carried() {
			for _, e := range c.completed {
				if n, ok := next[e]; ok {
					require.Contains(t, c.claimed, n, "the call completing %s did not claim %s", e, n)
					got = append(got, e)
				}
			}
		}
		require.Equal(t, ids[:len(ids)-1], got)
		tb.spy.with(func(s *spyStore[*fakeTx]) { require.Empty(t, s.completeMany, "completions written on their own") })
	})

	t.Run("a success that finds the carrier below CompletionBatchMax rides the next claim with the one before", func(t *testing.T) {
		t.Parallel()
		// Two keys' successes, the second taking the carrier to
		// CompletionBatchMax while a claim is in flight: the claim after
		// carries both (it may then claim both keys' next deliveries),
		// rather than the second sending both to the completer. A hot key's
		// run of 80 and another's finishing during one claim, with the
		// default CompletionBatchMax of 100, are this case.
		cfg := testConfig()
		cfg.CompletionBatchMax = 2
		cfg.CompletionBatchWindow = MaxCompletionBatchWindow
		cfg.PollInterval = time.Hour // only the keyed successes make the loop claim again
		cfg.Concurrency = 4
		cfg.BatchSize = 2 // the first claim comes back full: the second follows at once
		tb, cs := setupCarry(t, cfg)
		secondClaim := make(chan struct{})
		require.NoError(t, tb.bus.Handle("t", "h", func(context.Context, *Delivery) error {
			<-secondClaim // finish while the second claim is in flight
			return nil
		}, nil))
		ids := publishN(t, tb.bus, "t", 2, func(i int) string { return fmt.Sprintf("k%d", i) })
		tb.spy.with(func(s *spyStore[*fakeTx]) {
			s.claimHook = func(n int) error {
				if n != 2 {
					return nil
				}
				close(secondClaim)
				// Until both successes are placed: in the carrier, or
				// written by the completer.
				waitFor(t, "both successes placed", func() bool {
					c := tb.bus.disp.carry
					c.mu.Lock()
					held := c.n
					c.mu.Unlock()
					written := 0
					tb.spy.with(func(s *spyStore[*fakeTx]) {
						for _, n := range s.completeMany {
							written += n
						}
					})
					return held+written == 2
				})
				return nil
			}
		})
		stop := tb.start(t)
		waitFor(t, "all completed", func() bool { return tb.countStatus(StatusCompleted) == 2 })
		stop()
		tb.spy.with(func(s *spyStore[*fakeTx]) { require.Empty(t, s.completeMany, "completions written on their own") })
		calls := cs.carried()
		require.Len(t, calls, 1, "claims that carried completions")
		require.ElementsMatch(t, ids, calls[0].completed)
	})

	t.Run("a call that fails before its commit has them written again, shown to BeforeComplete once", func(t *testing.T) {
		t.Parallel()
		cfg := testConfig()
		// A claim (the 1 ms poll) takes them before the window ends, even
		// on a loaded machine: the test needs a call that carries them.
		cfg.CompletionBatchWindow = MaxCompletionBatchWindow
		var mu sync.Mutex
		seen := map[string]int{}
		cfg.BeforeComplete = func(_ context.Context, ds []*Delivery) error {
			mu.Lock()
			defer mu.Unlock()
			for _, d := range ds {
				seen[d.EventID]++
			}
			return nil
		}
		tb, cs := setupCarry(t, cfg)
		cs.hook = func(int) (bool, bool) { return true, false } // every call fails
		require.NoError(t, tb.bus.Handle("t", "h", noop, nil))
		ids := publishN(t, tb.bus, "t", 10, nil)
		stop := tb.start(t)
		waitFor(t, "all completed", func() bool { return tb.countStatus(StatusCompleted) == 10 })
		stop()
		require.NotEmpty(t, cs.carried(), "no claim carried a completion")
		total := 0
		tb.spy.with(func(s *spyStore[*fakeTx]) {
			for _, n := range s.completeMany {
				total += n
			}
		})
		require.Equal(t, 10, total, "completions written again on their own")
		mu.Lock()
		defer mu.Unlock()
		for _, id := range ids {
			require.Equal(t, 1, seen[id], "BeforeComplete calls with event %s", id)
		}
		require.Equal(t, int64(10), tb.bus.DispatcherStats().Completed)
		require.Zero(t, tb.bus.DispatcherStats().LeasesLost)
	})

	t.Run("a call whose completions committed is not written again", func(t *testing.T) {
		t.Parallel()
		cfg := testConfig()
		cfg.CompletionBatchWindow = MaxCompletionBatchWindow // as above
		tb, cs := setupCarry(t, cfg)
		cs.hook = func(n int) (bool, bool) { return false, n == 1 }
		require.NoError(t, tb.bus.Handle("t", "h", noop, nil))
		publishN(t, tb.bus, "t", 10, nil)
		stop := tb.start(t)
		waitFor(t, "all completed", func() bool { return tb.countStatus(StatusCompleted) == 10 })
		stop()
		require.NotEmpty(t, cs.carried())
		tb.spy.with(func(s *spyStore[*fakeTx]) { require.Empty(t, s.completeMany, "committed completions written again") })
		require.Equal(t, int64(10), tb.bus.DispatcherStats().Completed)
		require.Zero(t, tb.bus.DispatcherStats().LeasesLost)
	})

	t.Run("the shutdown writes what waits for a claim", func(t *testing.T) {
		t.Parallel()
		cfg := testConfig()
		cfg.CompletionBatchWindow = MaxCompletionBatchWindow
		cfg.PollInterval = time.Hour
		tb, cs := setupCarry(t, cfg)
		var handled sync.WaitGroup
		handled.Add(3)
		require.NoError(t, tb.bus.Handle("t", "h", func(context.Context, *Delivery) error {
			handled.Done()
			return nil
		}, nil))
		publishN(t, tb.bus, "t", 3, nil)
		stop := tb.start(t)
		handled.Wait()
		start := time.Now()
		stop()
		require.Less(t, time.Since(start), MaxCompletionBatchWindow, "the shutdown waited out the window")
		require.Equal(t, 3, tb.countStatus(StatusCompleted))
		require.Empty(t, cs.carried(), "a claim came: the test did not test the shutdown")
	})

	t.Run("carried successes do not make the claim busy", func(t *testing.T) {
		t.Parallel()
		cfg := testConfig()
		// The suspect runs alone, on the claim loop: its own success waits
		// out the window (nothing else claims meanwhile).
		cfg.CompletionBatchWindow = 50 * time.Millisecond
		cfg.PollInterval = 20 * time.Millisecond
		tb, cs := setupCarry(t, cfg)
		require.NoError(t, tb.bus.Handle("t", "h", noop, nil))
		ids := publishN(t, tb.bus, "t", 2, nil)
		tb.store.mu.Lock()
		tb.store.suspectEvents[ids[1]] = true
		tb.store.mu.Unlock()
		stop := tb.start(t)
		waitFor(t, "both completed", func() bool { return tb.countStatus(StatusCompleted) == 2 })
		stop()
		// The first claim takes the first event alone (the suspect comes
		// alone); the claim that completes it has nothing else in flight,
		// so it is not busy and gets the suspect.
		calls := cs.carried()
		require.NotEmpty(t, calls)
		require.Equal(t, []string{ids[0]}, calls[0].completed)
		require.False(t, calls[0].busy, "the claim carrying the only success was busy")
		require.Equal(t, []string{ids[1]}, calls[0].claimed, "the suspect was not claimed by the call that completed the other")
	})
}
