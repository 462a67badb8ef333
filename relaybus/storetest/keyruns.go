package storetest

import (
	"cmp"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

// testKeyRuns checks DeliveryClaimParams.KeyRuns, the claim of a batch
// handler: with a keyed delivery of a handler that asks for runs comes
// the rest of its key's run (consecutive pending deliveries in sequence
// order, due, not suspects, up to the run's max), and never a later
// delivery of a key without the ones before it. A store that does not
// offer runs (driver.KeyRunClaimer) is held to heads only: a run of one.
func testKeyRuns[TTx any](t *testing.T, newEnv func(*testing.T) *env[TTx]) {
	runs := func(max int) []driver.KeyRun { return []driver.KeyRun{{Handler: "h1", Max: max}} }
	// want is the run length a claim returns for a backlog of n with a
	// run max of max: the store's capability decides.
	want := func(e *env[TTx], n, max int) int {
		if !driver.ClaimsKeyRuns(e.s) {
			return 1
		}
		return min(n, max)
	}

	t.Run("RunsInSequenceOrder", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.publishN(5, &eventOpts{Key: Ptr("k")})
		e.publishN(2, &eventOpts{Key: Ptr("j")})
		ds := e.claim(&claimOpts{KeyRuns: runs(3)})
		requireRuns(t, ds, map[string]int{"k": want(e, 5, 3), "j": want(e, 2, 3)})
		e.claimNone(&claimOpts{Owner: Ptr("owner-b"), KeyRuns: runs(3)}, "another owner got a key whose run is held")
		e.claimNone(&claimOpts{KeyRuns: runs(3), Busy: true}, "the holder got more of a key whose run is in flight")
		now := At(time.Second)
		for _, d := range ds {
			require.True(t, e.complete(d.Lease(), now))
		}
		next := e.claim(&claimOpts{Now: &now, KeyRuns: runs(3)})
		for _, d := range next {
			require.Equal(t, "k", d.Key, "key j had only what the first claim took")
		}
		if driver.ClaimsKeyRuns(e.s) {
			require.Equal(t, []int64{4, 5}, sequences(next), "the rest of k's backlog")
		} else {
			require.Equal(t, []int64{2}, sequences(next))
		}
	})

	t.Run("WithoutKeyRunsHeadsOnly", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.publishN(3, &eventOpts{Key: Ptr("k")})
		e.publishN(3, &eventOpts{Key: Ptr("k"), Handlers: []string{"h2"}})
		// h2 asks for no runs: its key gives its head only.
		ds := e.claim(&claimOpts{Handlers: []string{"h1", "h2"}, KeyRuns: runs(10)})
		var h2 []*relaytype.Delivery
		for _, d := range ds {
			if d.Handler == "h2" {
				h2 = append(h2, d)
			}
		}
		require.Len(t, h2, 1, "a handler without a key run got more than its key's head")
		require.Len(t, ds, 1+want(e, 3, 10))
	})

	t.Run("LimitCutsAPrefix", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.publishN(4, &eventOpts{Key: Ptr("a")})
		e.publishN(4, &eventOpts{Key: Ptr("b")})
		for limit := 1; limit <= 5; limit++ {
			ds := e.claim(&claimOpts{Limit: Ptr(limit), KeyRuns: runs(10), Owner: Ptr("owner-a")})
			require.LessOrEqual(t, len(ds), limit)
			requirePrefixes(t, ds)
			for _, d := range ds {
				require.True(t, e.release(d.Lease(), T0))
			}
		}
	})

	t.Run("StopsAtNotDue", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.publish(&eventOpts{Key: Ptr("k")})
		e.publish(&eventOpts{Key: Ptr("k")})
		first := e.claim(&claimOpts{KeyRuns: runs(2)})
		// Fail the second of the run, if the store gave it; else the
		// first, then claim and fail the second alone.
		var second *relaytype.Delivery
		if len(first) == 2 {
			require.True(t, e.complete(first[0].Lease(), At(time.Second)))
			second = first[1]
		} else {
			require.True(t, e.complete(first[0].Lease(), At(time.Second)))
			second = e.claimOne(&claimOpts{Now: Ptr(At(time.Second)), KeyRuns: runs(2)})
		}
		require.Equal(t, int64(2), second.Sequence)
		// Publish a third: due at once, but behind the second, which is
		// rescheduled to 100s.
		e.publish(&eventOpts{Key: Ptr("k"), Now: Ptr(At(2 * time.Second))})
		require.True(t, e.reschedule(second.Lease(), At(100*time.Second), At(2*time.Second), "later"))
		e.claimNone(&claimOpts{Now: Ptr(At(3 * time.Second)), KeyRuns: runs(5)}, "a run overtook its key's head, which is not due")
		ds := e.claim(&claimOpts{Now: Ptr(At(100 * time.Second)), KeyRuns: runs(5)})
		require.Equal(t, []int64{2, 3}[:want(e, 2, 5)], sequences(ds))
	})

	t.Run("StopsAtANotDueFollower", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.publish(&eventOpts{Key: Ptr("k")})
		// Published later: not due at 1s.
		e.publish(&eventOpts{Key: Ptr("k"), Now: Ptr(At(10 * time.Second))})
		ds := e.claim(&claimOpts{Now: Ptr(At(time.Second)), KeyRuns: runs(5)})
		require.Equal(t, []int64{1}, sequences(ds), "a run took a delivery that is not due")
	})

	t.Run("FailureInTheMiddle", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.publishN(4, &eventOpts{Key: Ptr("k")})
		if !driver.ClaimsKeyRuns(e.s) {
			t.Skip("the store returns heads only")
		}
		ds := e.claim(&claimOpts{KeyRuns: runs(4)})
		require.Equal(t, []int64{1, 2, 3, 4}, sequences(ds)) // sorts ds
		now := At(time.Second)
		// What a batch handler's dispatcher does: complete what succeeded
		// before the failure, reschedule the failure, release the rest.
		require.True(t, e.complete(ds[0].Lease(), now))
		require.True(t, e.reschedule(ds[1].Lease(), At(50*time.Second), now, "failed"))
		require.True(t, e.release(ds[2].Lease(), now))
		require.True(t, e.release(ds[3].Lease(), now))
		e.claimNone(&claimOpts{Now: Ptr(At(2 * time.Second)), KeyRuns: runs(4)}, "a released later delivery overtook a rescheduled one")
		again := e.claim(&claimOpts{Now: Ptr(At(50 * time.Second)), KeyRuns: runs(4)})
		require.Equal(t, []int64{2, 3, 4}, sequences(again))
		require.Equal(t, 2, again[0].Attempts, "the failed delivery's own attempt counted")
		require.Equal(t, 1, again[1].Attempts, "a released delivery spent an attempt")
	})

	t.Run("TakeoverMakesSuspectsThatRunAlone", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.publishN(3, &eventOpts{Key: Ptr("k")})
		ds := e.claim(&claimOpts{KeyRuns: runs(3)})
		require.Len(t, ds, want(e, 3, 3))
		sequences(ds) // sorts ds
		// The process dies; its leases expire at 30s.
		now := At(40 * time.Second)
		e.claimNone(&claimOpts{Owner: Ptr("owner-b"), Now: &now, Busy: true, KeyRuns: runs(3)}, "a busy caller got a suspect")
		got := e.claimOne(&claimOpts{Owner: Ptr("owner-b"), Now: &now, KeyRuns: runs(3)})
		require.True(t, got.Suspect)
		require.Equal(t, int64(1), got.Sequence)
		for _, d := range ds {
			require.False(t, e.complete(d.Lease(), now), "the crashed holder completed a delivery of the run after the takeover")
		}
		require.Greater(t, got.FencingToken, ds[0].FencingToken, "the new holder's fencing token")
		// A failure of the suspect clears its mark, not its followers':
		// when it is due again its run stops before the next suspect.
		require.True(t, e.reschedule(got.Lease(), At(50*time.Second), now, "failed"))
		later := At(50 * time.Second)
		again := e.claim(&claimOpts{Owner: Ptr("owner-b"), Now: &later, KeyRuns: runs(3)})
		require.Equal(t, []int64{1}, sequences(again), "a run took a suspect")
		require.False(t, again[0].Suspect)
		require.True(t, e.complete(again[0].Lease(), later))
		if len(ds) > 1 {
			// The second was in flight at the takeover: a suspect, alone.
			next := e.claimOne(&claimOpts{Owner: Ptr("owner-b"), Now: &later, KeyRuns: runs(3)})
			require.True(t, next.Suspect)
			require.Equal(t, int64(2), next.Sequence)
		}
	})

	t.Run("UnkeyedUnchanged", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		lane := e.freshLane()
		e.publishN(3, &eventOpts{Lane: &lane})
		ds := e.claim(&claimOpts{KeyRuns: runs(2)})
		require.Len(t, ds, 3, "key runs bound a key's run, not unkeyed deliveries")
	})

	t.Run("Invalid", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		for _, rs := range [][]driver.KeyRun{
			{{Handler: "h1", Max: 0}},
			{{Handler: "h1", Max: driver.MaxKeyRun + 1}},
			{{Handler: "h2", Max: 2}},
			{{Handler: "h1", Max: 2}, {Handler: "h1", Max: 3}},
		} {
			p := (&claimOpts{KeyRuns: rs}).params()
			_, err := e.s.DeliveryClaim(e.ctx, p)
			require.True(t, errors.Is(err, relaytype.ErrInvalid), "key runs %v: %v", rs, err)
		}
	})
}

// sequences returns the sequences of ds, sorted (a claim returns its
// deliveries by due time, not by sequence), and sorts ds the same way.
func sequences(ds []*relaytype.Delivery) []int64 {
	slices.SortFunc(ds, func(a, b *relaytype.Delivery) int { return cmp.Compare(a.Sequence, b.Sequence) })
	out := make([]int64, len(ds))
	for i, d := range ds {
		out[i] = d.Sequence
	}
	return out
}

// requireRuns checks that ds holds, per key, the first n sequences of its
// backlog (1..n).
func requireRuns(t *testing.T, ds []*relaytype.Delivery, n map[string]int) {
	t.Helper()
	got := map[string][]int64{}
	for _, d := range ds {
		got[d.Key] = append(got[d.Key], d.Sequence)
	}
	for k, want := range n {
		var seqs []int64
		for i := range want {
			seqs = append(seqs, int64(i+1))
		}
		require.ElementsMatch(t, seqs, got[k], "the run of key %q", k)
	}
	require.Len(t, got, len(n))
}

// requirePrefixes checks that, per key, ds holds consecutive sequences
// from 1: the head and what follows it, never a gap.
func requirePrefixes(t *testing.T, ds []*relaytype.Delivery) {
	t.Helper()
	got := map[string]map[int64]bool{}
	for _, d := range ds {
		if got[d.Key] == nil {
			got[d.Key] = map[int64]bool{}
		}
		got[d.Key][d.Sequence] = true
	}
	for k, seqs := range got {
		for i := int64(1); i <= int64(len(seqs)); i++ {
			require.True(t, seqs[i], "key %q: a claim returned a later delivery without sequence %d (%v)", k, i, seqs)
		}
	}
}
