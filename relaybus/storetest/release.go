package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

func testRelease[TTx any](t *testing.T, newEnv func(*testing.T) *env[TTx]) {
	t.Run("SpendsNoAttempt", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.publish(&eventOpts{MaxAttempts: Ptr(2)})
		d := e.claimOne(nil)
		require.True(t, e.reschedule(d.Lease(), At(time.Second), At(time.Second), "fail"))
		d = e.claimOne(&claimOpts{Now: Ptr(At(time.Second))})
		require.Equal(t, 2, d.Attempts)

		// Released on the final attempt: the next claim is the same
		// attempt again, not a takeover past the budget.
		require.True(t, e.release(d.Lease(), At(2*time.Second)))
		got := e.get(d)
		require.Equal(t, relaytype.StatusPending, got.Status)
		require.Equal(t, 1, got.Attempts, "a release spends no attempt")
		require.Empty(t, got.LeaseToken)
		require.False(t, e.complete(d.Lease(), At(3*time.Second)), "the lease survived its release")
		require.False(t, e.release(d.Lease(), At(3*time.Second)), "released twice")

		// The releasing owner still holds the lane: it claims the delivery
		// again, as the same attempt.
		again := e.claimOne(&claimOpts{Now: Ptr(At(3 * time.Second))})
		require.Equal(t, d.ID, again.ID)
		require.Equal(t, 2, again.Attempts, "the released attempt was spent")
		require.False(t, again.Suspect, "a released delivery became a suspect")

		// Lost after that (its lease expires): the takeover charges it,
		// which spends the budget; it was no suspect, so it is not buried
		// but claimed once more, alone (see testSuspect).
		last := e.claimOne(&claimOpts{Owner: Ptr("owner-b"), Now: Ptr(At(34 * time.Second))})
		require.Equal(t, d.ID, last.ID)
		require.True(t, last.Suspect)
		require.Equal(t, 3, last.Attempts, "the lost attempt was not charged")
	})

	t.Run("ReleaseUntil", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		// A key's head released to be due later (a batch held back to
		// fill, relaybus.BatchOptions.MaxWait): neither it nor the key's
		// later delivery is claimed before then, another key is, and the
		// head comes back as the same attempt, its key's next again.
		e.publish(&eventOpts{Key: Ptr("k")})
		e.publish(&eventOpts{Key: Ptr("k")})
		other, _ := e.publish(&eventOpts{Key: Ptr("other")})
		// Both keys' heads, whatever order a store finds them in (a
		// claim of one delivery may take either key's lane, and its
		// holder then claims from that lane first); "other" is given back
		// at once, due now.
		ds := e.claim(nil)
		require.Len(t, ds, 2, "the heads of k and other")
		var head *relaytype.Delivery
		for _, d := range ds {
			if d.Key == "k" {
				head = d
				continue
			}
			require.Equal(t, other.Key, d.Key)
			require.True(t, e.release(d.Lease(), T0))
		}
		require.NotNil(t, head, "k's head was not claimed")
		require.EqualValues(t, 1, head.Sequence)
		ok, err := e.s.DeliveryRelease(e.ctx, &driver.DeliveryReleaseParams{Lease: head.Lease(), Now: At(time.Second), AvailableAt: At(10 * time.Second)})
		require.NoError(t, err)
		require.True(t, ok)
		got := e.get(head)
		require.Equal(t, relaytype.StatusPending, got.Status)
		require.Equal(t, 0, got.Attempts, "a release spends no attempt")
		require.True(t, got.AvailableAt.Equal(At(10*time.Second)), "due at %v, want %v", got.AvailableAt, At(10*time.Second))

		early := e.claim(&claimOpts{Now: Ptr(At(5 * time.Second))})
		for _, d := range early {
			require.NotEqual(t, "k", d.Key, "claimed %s#%d before its release's AvailableAt", d.Key, d.Sequence)
		}
		for _, d := range early {
			require.Equal(t, other.Key, d.Key)
			require.True(t, e.complete(d.Lease(), At(5*time.Second)))
		}
		again := e.claim(&claimOpts{Now: Ptr(At(10 * time.Second)), Limit: Ptr(1)})
		require.Len(t, again, 1)
		require.Equal(t, head.ID, again[0].ID)
		require.Equal(t, 1, again[0].Attempts, "the held-back attempt was spent")
		require.True(t, e.complete(again[0].Lease(), At(10*time.Second)))
		next := e.claimOne(&claimOpts{Now: Ptr(At(10 * time.Second))})
		require.Equal(t, "k", next.Key)
		require.EqualValues(t, 2, next.Sequence)
		require.True(t, e.complete(next.Lease(), At(10*time.Second)))

		// A release never makes a delivery due sooner than it was.
		late, _ := e.publish(&eventOpts{Key: Ptr("late"), DeliverAt: Ptr(At(20 * time.Second))})
		d := e.claimOne(&claimOpts{Now: Ptr(At(20 * time.Second)), Limit: Ptr(1)})
		require.Equal(t, late.Key, d.Key)
		ok, err = e.s.DeliveryRelease(e.ctx, &driver.DeliveryReleaseParams{Lease: d.Lease(), Now: At(20 * time.Second), AvailableAt: At(15 * time.Second)})
		require.NoError(t, err)
		require.True(t, ok)
		require.True(t, e.get(d).AvailableAt.Equal(At(20*time.Second)), "an earlier AvailableAt moved the due time")
	})

	t.Run("ReleaseKeepsSuspect", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.publish(nil)
		e.claimOne(nil) // crashes
		taken := e.claimOne(&claimOpts{Owner: Ptr("owner-b"), Now: Ptr(At(31 * time.Second))})
		require.True(t, taken.Suspect)
		// A graceful shutdown releases it: still a suspect, no attempt
		// spent, so it still runs alone.
		require.True(t, e.release(taken.Lease(), At(32*time.Second)))
		got := e.get(taken)
		require.True(t, got.Suspect, "a release cleared the suspect mark")
		require.Equal(t, 1, got.Attempts, "a release spent an attempt")
		again := e.claimOne(&claimOpts{Owner: Ptr("owner-b"), Now: Ptr(At(33 * time.Second))})
		require.True(t, again.Suspect)
		require.Equal(t, 2, again.Attempts)
		// A failure that ends in a reschedule clears it: the delivery ran
		// and returned.
		require.True(t, e.reschedule(again.Lease(), At(34*time.Second), At(33*time.Second), "failed"))
		require.False(t, e.get(taken).Suspect, "a reschedule kept the suspect mark")
	})

	t.Run("OwnerRelinquish", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.publishN(3, &eventOpts{Handlers: []string{"h1"}})
		e.publishN(2, &eventOpts{Handlers: []string{"h2"}})
		mine := e.claim(&claimOpts{Owner: Ptr("owner-a")})
		require.Len(t, mine, 3)
		theirs := e.claim(&claimOpts{Owner: Ptr("owner-b"), Handlers: []string{"h2"}})
		require.Len(t, theirs, 2)

		n, err := e.s.OwnerRelinquish(e.ctx, &driver.OwnerRelinquishParams{Owner: "owner-a", Now: At(time.Second)})
		require.NoError(t, err)
		require.Equal(t, 3, n)
		for _, d := range mine {
			got := e.get(d)
			require.Equal(t, relaytype.StatusPending, got.Status)
			require.Equal(t, 0, got.Attempts)
			require.False(t, e.complete(d.Lease(), At(2*time.Second)), "a relinquished lease completed")
		}
		for _, d := range theirs {
			got := e.get(d)
			require.Equal(t, relaytype.StatusProcessing, got.Status, "relinquish released another owner's delivery")
			require.Equal(t, d.LeaseToken, got.LeaseToken)
		}

		n, err = e.s.OwnerRelinquish(e.ctx, &driver.OwnerRelinquishParams{Owner: "owner-a", Now: At(2 * time.Second)})
		require.NoError(t, err)
		require.Zero(t, n, "relinquished twice")

		again := e.claim(&claimOpts{Owner: Ptr("owner-c"), Now: Ptr(At(3 * time.Second))})
		require.ElementsMatch(t, ids(mine), ids(again))
		for _, d := range again {
			require.Equal(t, 1, d.Attempts)
		}
		for _, d := range theirs {
			require.True(t, e.complete(d.Lease(), At(4*time.Second)))
		}
	})

	t.Run("RelinquishHandsLanesBack", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		// owner-a holds lane 5 with one delivery in flight and one it has
		// not claimed, and lane 6 with nothing left in flight.
		e.publish(&eventOpts{Lane: Ptr(5)})
		e.publish(&eventOpts{Lane: Ptr(5), Now: Ptr(At(time.Second))})
		e.publish(&eventOpts{Lane: Ptr(6)})
		mine := e.claim(&claimOpts{Limit: Ptr(2), Now: Ptr(At(time.Second))})
		require.Len(t, mine, 2)
		var inSix *relaytype.Delivery
		for _, d := range mine {
			if driver.LaneOf(d.Key, d.EventID) == 6 {
				inSix = d
			}
		}
		require.NotNil(t, inSix)
		require.True(t, e.complete(inSix.Lease(), At(2*time.Second)))
		e.publish(&eventOpts{Lane: Ptr(6), Now: Ptr(At(2 * time.Second))})
		e.claimNone(&claimOpts{Owner: Ptr("owner-b"), Now: Ptr(At(3 * time.Second))}, "claimed from lanes owner-a holds")

		n, err := e.s.OwnerRelinquish(e.ctx, &driver.OwnerRelinquishParams{Owner: "owner-a", Now: At(4 * time.Second)})
		require.NoError(t, err)
		require.Equal(t, 1, n, "one delivery was in flight")

		// At once, long before owner-a's leases (T0+31s) expire, owner-b
		// gets everything, and nothing was charged.
		got := e.claim(&claimOpts{Owner: Ptr("owner-b"), Now: Ptr(At(5 * time.Second))})
		require.Len(t, got, 3)
		for _, d := range got {
			require.Equal(t, 1, d.Attempts, "delivery %s", d.ID)
			require.False(t, d.Suspect, "a relinquished delivery is not a suspect")
		}
	})

	t.Run("InvalidParams", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		_, err := e.s.OwnerRelinquish(e.ctx, &driver.OwnerRelinquishParams{Now: T0})
		requireInvalid(t, err, "relinquish without an owner")
		_, err = e.s.OwnerRelinquish(e.ctx, nil)
		requireInvalid(t, err, "relinquish with nil params")
		_, err = e.s.DeliveryRelease(e.ctx, &driver.DeliveryReleaseParams{Lease: relaytype.Lease{Token: "t"}, Now: T0})
		requireInvalid(t, err, "release without a delivery id")
	})
}
