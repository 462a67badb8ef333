package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

// blockWait is how long the commit-order test waits for a second publish
// of a locked key before it concludes that the store blocks it (as
// PostgreSQL does on the key's counter row). The test is correct whatever
// the store does within this time; a short wait only keeps it fast.
const blockWait = 250 * time.Millisecond

// unblockWait bounds the wait for a blocked publish after the first
// transaction committed: a store that still blocks has deadlocked.
const unblockWait = 10 * time.Second

func testOrdering[TTx any](t *testing.T, newEnv func(*testing.T) *env[TTx]) {
	t.Run("OneAtATimePerKey", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		evs := e.publishN(3, &eventOpts{Key: Ptr("k")})
		unkeyed, _ := e.publish(nil)
		for i, ev := range evs {
			require.Equal(t, int64(i+1), e.deliveryOf(ev.ID, "h1").Sequence, "sequences of one key are 1, 2, 3")
		}
		now := T0
		first := true
		for i, ev := range evs {
			ds := e.claim(&claimOpts{Now: &now})
			want := []string{ev.ID}
			if first {
				want = append(want, unkeyed.ID)
				first = false
			}
			require.ElementsMatch(t, want, eventIDs(ds), "claim %d", i)
			e.claimNone(&claimOpts{Owner: Ptr("owner-b"), Now: &now}, "claimed a later delivery of a key while an earlier one was held")
			for _, d := range ds {
				if d.Key == "k" {
					require.Equal(t, int64(i+1), d.Sequence)
				}
				require.True(t, e.complete(d.Lease(), now))
			}
			now = now.Add(time.Second)
		}
	})

	t.Run("SequencesInOneCall", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.publish(&eventOpts{Key: Ptr("a")})
		res := e.publishTx(&driver.EventPublishParams{Now: T0, Events: []*driver.EventPublish{
			(&eventOpts{Key: Ptr("a")}).publish(),
			(&eventOpts{Key: Ptr("b")}).publish(),
			(&eventOpts{}).publish(),
			(&eventOpts{Key: Ptr("a")}).publish(),
		}})
		require.Equal(t, []int64{2, 1, 0, 3}, res.Sequences)
	})

	t.Run("KeysAreIndependent", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		a, _ := e.publish(&eventOpts{Key: Ptr("a")})
		b, _ := e.publish(&eventOpts{Key: Ptr("b")})
		e.publish(&eventOpts{Key: Ptr("a")})
		ds := e.claim(nil)
		require.ElementsMatch(t, []string{a.ID, b.ID}, eventIDs(ds))
	})

	t.Run("HandlersAreIndependent", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		both := []string{"h1", "h2"}
		first, _ := e.publish(&eventOpts{Key: Ptr("k"), Handlers: both})
		second, _ := e.publish(&eventOpts{Key: Ptr("k"), Handlers: both})
		ds := e.claim(&claimOpts{Handlers: both})
		require.Len(t, ds, 2)
		require.Equal(t, []string{first.ID, first.ID}, eventIDs(ds))
		var h1 *relaytype.Delivery
		for _, d := range ds {
			if d.Handler == "h1" {
				h1 = d
			}
		}
		require.NotNil(t, h1)
		// h1 moves on while h2 still holds the key's first event.
		require.True(t, e.complete(h1.Lease(), At(time.Second)))
		d := e.claimOne(&claimOpts{Handlers: both, Now: Ptr(At(time.Second))})
		require.Equal(t, second.ID, d.EventID)
		require.Equal(t, "h1", d.Handler)
	})

	t.Run("RescheduledEarlierBlocks", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		first, _ := e.publish(&eventOpts{Key: Ptr("k")})
		e.publish(&eventOpts{Key: Ptr("k")})
		d := e.claimOne(nil)
		require.Equal(t, first.ID, d.EventID)
		require.True(t, e.reschedule(d.Lease(), At(100*time.Second), At(time.Second), "later"))
		e.claimNone(&claimOpts{Now: Ptr(At(10 * time.Second))}, "overtook a rescheduled earlier delivery of the key")
		again := e.claimOne(&claimOpts{Now: Ptr(At(100 * time.Second))})
		require.Equal(t, first.ID, again.EventID)
	})

	t.Run("HeldOrReleasedEarlierBlocks", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		first, _ := e.publish(&eventOpts{Key: Ptr("k")})
		e.publish(&eventOpts{Key: Ptr("k")})
		d := e.claimOne(nil)
		require.Equal(t, first.ID, d.EventID)
		e.claimNone(&claimOpts{Owner: Ptr("owner-b"), Now: Ptr(At(10 * time.Second))}, "overtook a held earlier delivery")

		// After the lease expires the takeover gets the first event again,
		// not the second.
		taken := e.claimOne(&claimOpts{Owner: Ptr("owner-b"), Now: Ptr(At(31 * time.Second))})
		require.Equal(t, first.ID, taken.EventID)

		require.True(t, e.release(taken.Lease(), At(32*time.Second)))
		again := e.claimOne(&claimOpts{Owner: Ptr("owner-b"), Now: Ptr(At(32 * time.Second))})
		require.Equal(t, first.ID, again.EventID, "overtook a released earlier delivery")

		// Handed back (relinquish), the key goes to another owner in order.
		n, err := e.s.OwnerRelinquish(e.ctx, &driver.OwnerRelinquishParams{Owner: "owner-b", Now: At(33 * time.Second)})
		require.NoError(t, err)
		require.Equal(t, 1, n)
		last := e.claimOne(&claimOpts{Owner: Ptr("owner-c"), Now: Ptr(At(33 * time.Second))})
		require.Equal(t, first.ID, last.EventID, "overtook a relinquished earlier delivery")
	})

	t.Run("DeadEarlierDoesNotBlock", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.publish(&eventOpts{Key: Ptr("k")})
		second, _ := e.publish(&eventOpts{Key: Ptr("k")})
		d := e.claimOne(nil)
		require.True(t, e.bury(d.Lease(), At(time.Second), "poison"))
		next := e.claimOne(&claimOpts{Now: Ptr(At(time.Second))})
		require.Equal(t, second.ID, next.EventID)
		require.Equal(t, int64(2), next.Sequence)
	})

	t.Run("SequenceFollowsCommitOrder", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		testCommitOrder(t, e)
	})
}

// testCommitOrder publishes event A of a key in tx1, then event B of the
// same key in tx2 from another goroutine. A store that assigns sequences
// at publish blocks B until tx1 ends: tx1 commits first and A gets 1. A
// store that assigns them at commit lets B return: the test then commits
// tx2 first, and B must get 1. Either way the earlier commit has the
// lower sequence.
func testCommitOrder[TTx any](t *testing.T, e *env[TTx]) {
	ctx, cancel := context.WithTimeout(e.ctx, 2*unblockWait)
	defer cancel()
	publishIn := func(tx TTx, ep *driver.EventPublish) (*driver.EventPublishResult, error) {
		return e.s.EventPublishTx(ctx, tx, &driver.EventPublishParams{Events: []*driver.EventPublish{ep}, Now: T0})
	}
	tx1 := e.begin()
	tx2 := e.begin()

	type outcome struct {
		res *driver.EventPublishResult
		err error
	}
	done := make(chan outcome, 1)
	started, settled := false, false
	defer func() {
		// Never leave the goroutine blocked: end tx1, then wait for it,
		// then end tx2 (a transaction is not used by two goroutines).
		if !started || settled {
			return
		}
		_ = e.s.TxRollback(context.Background(), tx1)
		cancel()
		select {
		case <-done:
			_ = e.s.TxRollback(context.Background(), tx2)
		case <-time.After(unblockWait):
			t.Error("publish B ignores its cancelled context; leaving it blocked")
		}
	}()

	a := (&eventOpts{Key: Ptr("k")}).publish()
	b := (&eventOpts{Key: Ptr("k")}).publish()
	resA, err := publishIn(tx1, a)
	require.NoError(t, err)
	started = true
	go func() {
		res, err := publishIn(tx2, b)
		done <- outcome{res, err}
	}()

	var resB *driver.EventPublishResult
	var wantA, wantB int64
	select {
	case o := <-done:
		settled = true
		if o.err != nil && e.opts.RetryableConflict != nil && e.opts.RetryableConflict(o.err) {
			// The store refused B at once: B retries after A commits.
			require.NoError(t, e.s.TxRollback(ctx, tx2), "roll back B")
			require.NoError(t, e.s.TxCommit(ctx, tx1), "commit A")
			tx3 := e.begin()
			res, err := publishIn(tx3, b)
			require.NoError(t, err, "publish B again")
			require.NoError(t, e.s.TxCommit(ctx, tx3), "commit B")
			resB = res
			wantA, wantB = 1, 2
			break
		}
		require.NoError(t, o.err, "publish B")
		resB = o.res
		require.NoError(t, e.s.TxCommit(ctx, tx2), "commit B")
		require.NoError(t, e.s.TxCommit(ctx, tx1), "commit A")
		wantA, wantB = 2, 1
	case <-time.After(blockWait):
		commitErr := e.s.TxCommit(ctx, tx1)
		var o outcome
		select {
		case o = <-done:
			settled = true
		case <-time.After(unblockWait):
			require.FailNow(t, "publish B is still blocked after A committed")
		}
		require.NoError(t, commitErr, "commit A")
		require.NoError(t, o.err, "publish B")
		resB = o.res
		require.NoError(t, e.s.TxCommit(ctx, tx2), "commit B")
		wantA, wantB = 1, 2
	}
	require.Equal(t, []int64{wantA}, resA.Sequences, "result of A")
	require.Equal(t, []int64{wantB}, resB.Sequences, "result of B")
	require.Equal(t, wantA, e.deliveryOf(a.Event.ID, "h1").Sequence, "stored sequence of A")
	require.Equal(t, wantB, e.deliveryOf(b.Event.ID, "h1").Sequence, "stored sequence of B")

	first := a.Event.ID
	if wantB == 1 {
		first = b.Event.ID
	}
	d := e.claimOne(nil)
	require.Equal(t, first, d.EventID, "the key's first commit is delivered first")
}
