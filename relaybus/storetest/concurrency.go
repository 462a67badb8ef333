package storetest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

// Sizes of the concurrency tests: big enough that claimers overlap on
// every store, small enough to take well under a second in memory.
const (
	concurrentWorkers      = 8
	concurrentKeys         = 30
	concurrentEventsPerKey = 10
	concurrentUnkeyed      = 200
	concurrentClaimLimit   = 8
	// concurrentDeadline bounds the whole drain; a store that loses a
	// delivery or blocks a key forever fails here instead of hanging.
	concurrentDeadline = 60 * time.Second
	// publishBatch is the events per publish call when seeding.
	publishBatch = 100
)

func testConcurrency[TTx any](t *testing.T, newEnv func(*testing.T) *env[TTx]) {
	t.Run("ClaimCompleteExactlyOnce", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		testDrain(t, e)
	})

	t.Run("RacingClaimersNeverShare", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		const rounds, perRound, limit = 3, 100, 60
		for round := range rounds {
			e.publishAll(perRound, func(int) *eventOpts { return nil })
			var wg sync.WaitGroup
			start := make(chan struct{})
			got := make([][]*relaytype.Delivery, 2)
			errs := make([]error, 2)
			for i := range got {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					got[i], errs[i] = e.s.DeliveryClaim(e.ctx, &driver.DeliveryClaimParams{
						Owner: fmt.Sprintf("racer-%d", i), Handlers: []string{"h1"}, Limit: limit,
						LeaseDuration: time.Hour, Now: T0,
					})
				}()
			}
			close(start)
			wg.Wait()
			require.NoError(t, errs[0])
			require.NoError(t, errs[1])
			seen := map[string]bool{}
			for _, ds := range got {
				for _, d := range ds {
					require.False(t, seen[d.ID], "round %d: delivery %s claimed by both racers", round, d.ID)
					seen[d.ID] = true
				}
			}
			// Whatever the racers skipped is still there, once: racers
			// drain what is left in the lanes they hold, a sweeper the
			// rest, until nothing is left.
			var all []relaytype.Lease
			for _, ds := range got {
				all = append(all, leases(ds)...)
			}
			for pass := 0; len(seen) < perRound; pass++ {
				require.Less(t, pass, perRound, "round %d: the leftovers do not drain", round)
				if len(all) > 0 {
					require.Equal(t, len(all), countTrue(e.completeMany(T0, all...)), "round %d: a lease was lost", round)
				}
				all = nil
				for _, owner := range []string{"racer-0", "racer-1", "sweeper"} {
					for _, d := range e.claim(&claimOpts{Owner: Ptr(owner), Limit: Ptr(perRound), Lease: Ptr(time.Hour)}) {
						require.False(t, seen[d.ID], "round %d: delivery %s claimed twice", round, d.ID)
						seen[d.ID] = true
						all = append(all, d.Lease())
					}
				}
			}
			require.Len(t, seen, perRound, "round %d", round)
			if len(all) > 0 {
				require.Equal(t, len(all), countTrue(e.completeMany(T0, all...)), "round %d: a lease was lost", round)
			}
			// Handed back: every owner finds its lanes drained.
			for _, owner := range []string{"racer-0", "racer-1", "sweeper"} {
				e.claimNone(&claimOpts{Owner: Ptr(owner), Lease: Ptr(time.Hour)})
			}
		}
	})
}

// countTrue counts the true results of a fenced write.
func countTrue(oks []bool) int {
	n := 0
	for _, ok := range oks {
		if ok {
			n++
		}
	}
	return n
}

// publishAll publishes n events, publishBatch per call; opts(i) gives the
// options of event i (nil for defaults).
func (e *env[TTx]) publishAll(n int, opts func(i int) *eventOpts) {
	e.t.Helper()
	for lo := 0; lo < n; lo += publishBatch {
		hi := min(lo+publishBatch, n)
		var events []*driver.EventPublish
		for i := lo; i < hi; i++ {
			events = append(events, opts(i).publish())
		}
		e.publishTx(&driver.EventPublishParams{Events: events, Now: T0})
	}
}

// testDrain drains keyed and unkeyed deliveries with concurrent workers
// and checks that each is claimed exactly once and each key in order.
func testDrain[TTx any](t *testing.T, e *env[TTx]) {
	keyed := concurrentKeys * concurrentEventsPerKey
	total := keyed + concurrentUnkeyed
	// Keys interleave, so every publish call carries many keys.
	e.publishAll(total, func(i int) *eventOpts {
		if i < keyed {
			return &eventOpts{Key: Ptr(fmt.Sprintf("key-%d", i%concurrentKeys))}
		}
		return nil
	})
	want := ids(e.list(driver.DeliveryListParams{}))
	require.Len(t, want, total)

	ctx, cancel := context.WithTimeout(e.ctx, concurrentDeadline)
	defer cancel()
	var (
		mu       sync.Mutex
		claimed  = map[string]int{}
		lastDone = map[string]int64{} // per key: the sequence last sent to complete
		done     atomic.Int64
		wg       sync.WaitGroup
	)
	fail := func(format string, args ...any) {
		t.Errorf(format, args...)
		cancel()
	}
	for w := range concurrentWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			owner := fmt.Sprintf("worker-%d", w)
			for done.Load() < int64(total) && ctx.Err() == nil {
				ds, err := e.s.DeliveryClaim(ctx, &driver.DeliveryClaimParams{
					Owner: owner, Handlers: []string{"h1"}, Limit: concurrentClaimLimit,
					LeaseDuration: time.Hour, Now: T0,
				})
				if err != nil {
					if ctx.Err() == nil {
						fail("%s: claim: %v", owner, err)
					}
					return
				}
				if len(ds) == 0 {
					// Other workers hold the rest (or the key heads).
					time.Sleep(time.Millisecond)
					continue
				}
				mu.Lock()
				for _, d := range ds {
					claimed[d.ID]++
					if claimed[d.ID] > 1 {
						fail("delivery %s claimed %d times", d.ID, claimed[d.ID])
					}
					if d.Key != "" {
						// Its predecessor must have been sent to complete
						// before this claim could see it.
						if lastDone[d.Key] != d.Sequence-1 {
							fail("key %s: claimed sequence %d while %d was the last completed", d.Key, d.Sequence, lastDone[d.Key])
						}
						// Recorded before the completion is sent, so a
						// claim of the next sequence always sees it.
						lastDone[d.Key] = d.Sequence
					}
				}
				mu.Unlock()
				ok, err := e.s.DeliveryCompleteMany(ctx, &driver.DeliveryCompleteManyParams{Leases: leases(ds), Now: T0})
				if err != nil {
					if ctx.Err() == nil {
						fail("%s: complete: %v", owner, err)
					}
					return
				}
				for i, b := range ok {
					if !b {
						fail("%s: lost the lease of %s", owner, ds[i].ID)
					}
				}
				done.Add(int64(len(ds)))
			}
		}()
	}
	wg.Wait()
	require.NoError(t, e.ctx.Err())
	require.Equal(t, int64(total), done.Load(), "deliveries completed before the deadline")
	got := make([]string, 0, len(claimed))
	for id := range claimed {
		got = append(got, id)
	}
	sameIDs(t, want, got, "claimed set equals published set")
	for k := range concurrentKeys {
		require.Equal(t, int64(concurrentEventsPerKey), lastDone[fmt.Sprintf("key-%d", k)])
	}
	st := e.stats(T0)
	require.Equal(t, relaytype.Counts{Completed: e.completedCount(int64(total))}, st.Counts)
}
