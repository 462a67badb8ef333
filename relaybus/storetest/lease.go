package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

func testLease[TTx any](t *testing.T, newEnv func(*testing.T) *env[TTx]) {
	t.Run("ExtendPushesExpiry", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.publish(nil)
		d := e.claimOne(nil) // expires at T0+30s
		require.Equal(t, []bool{true}, e.extend("owner-a", At(90*time.Second), At(20*time.Second), d.Lease()))
		requireTime(t, At(90*time.Second), e.get(d).LeaseExpiresAt)

		// Between the old and the new expiry the lease holds.
		e.claimNone(&claimOpts{Owner: Ptr("owner-b"), Now: Ptr(At(60 * time.Second))}, "took over an extended lease")
		require.True(t, e.complete(d.Lease(), At(61*time.Second)), "the extended lease was lost")
	})

	t.Run("ExtendPerLeaseResults", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.publishN(3, nil)
		ds := e.claim(nil)
		require.Len(t, ds, 3)
		require.True(t, e.complete(ds[1].Lease(), At(time.Second)))
		bogus := staleToken(t, ds[2])
		got := e.extend("owner-a", At(time.Minute), At(2*time.Second), ds[0].Lease(), ds[1].Lease(), bogus)
		require.Equal(t, []bool{true, false, false}, got)
		requireTime(t, At(time.Minute), e.get(ds[0]).LeaseExpiresAt)
		requireTime(t, At(defaultLease), e.get(ds[2]).LeaseExpiresAt, "a bogus token extended a lease")
	})

	t.Run("ExtendInvalid", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.publish(nil)
		d := e.claimOne(nil)
		_, err := e.s.LeaseExtend(e.ctx, &driver.LeaseExtendParams{Owner: "owner-a", Leases: []relaytype.Lease{d.Lease()}, ExpiresAt: At(time.Second), Now: At(time.Second)})
		requireInvalid(t, err, "expiry not after now")
		_, err = e.s.LeaseExtend(e.ctx, &driver.LeaseExtendParams{Owner: "owner-a", ExpiresAt: At(time.Minute), Now: At(time.Second)})
		requireInvalid(t, err, "no leases")
		_, err = e.s.LeaseExtend(e.ctx, &driver.LeaseExtendParams{Leases: []relaytype.Lease{d.Lease()}, ExpiresAt: At(time.Minute), Now: At(time.Second)})
		requireInvalid(t, err, "no owner")
		// An extension past MaxLeaseDuration: a century ahead would keep
		// the lane leased, and its keys stalled, for ever.
		_, err = e.s.LeaseExtend(e.ctx, &driver.LeaseExtendParams{Owner: "owner-a", Leases: []relaytype.Lease{d.Lease()},
			ExpiresAt: At(time.Second).AddDate(100, 0, 0), Now: At(time.Second)})
		requireInvalid(t, err, "expiry 100 years ahead")
		_, err = e.s.LeaseExtend(e.ctx, &driver.LeaseExtendParams{Owner: "owner-a", Leases: []relaytype.Lease{d.Lease()},
			ExpiresAt: At(time.Second).Add(driver.MaxLeaseDuration + time.Nanosecond), Now: At(time.Second)})
		requireInvalid(t, err, "expiry just past MaxLeaseDuration")
		requireTime(t, At(defaultLease), e.get(d).LeaseExpiresAt, "a rejected extend changed the lease")
		// MaxLeaseDuration itself is allowed.
		require.Equal(t, []bool{true}, e.extend("owner-a", At(time.Second).Add(driver.MaxLeaseDuration), At(time.Second), d.Lease()))
	})

	t.Run("TakeoverAfterExpiry", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.publish(&eventOpts{MaxAttempts: Ptr(5)})
		old := e.claimOne(nil) // expires at T0+30s
		require.Equal(t, 1, old.Attempts)

		taken := e.claimOne(&claimOpts{Owner: Ptr("owner-b"), Now: Ptr(At(31 * time.Second))})
		require.Equal(t, old.ID, taken.ID)
		require.Equal(t, 2, taken.Attempts, "a takeover counts the lost attempt")
		require.Equal(t, "owner-b", taken.LeaseOwner)
		require.NotEqual(t, old.LeaseToken, taken.LeaseToken, "a takeover must issue a new token")
		require.True(t, taken.Suspect, "a delivery in flight at a takeover is a suspect")
		oldTok, err := driver.ParseLaneToken(old.LeaseToken)
		require.NoError(t, err)
		newTok, err := driver.ParseLaneToken(taken.LeaseToken)
		require.NoError(t, err)
		require.Greater(t, newTok.Epoch, oldTok.Epoch, "a takeover raises the lane's epoch")

		// Fencing: every write under the old lease does nothing.
		now := At(32 * time.Second)
		require.False(t, e.complete(old.Lease(), now), "complete under a taken-over lease")
		require.False(t, e.reschedule(old.Lease(), At(time.Hour), now, "old"), "reschedule under a taken-over lease")
		require.False(t, e.bury(old.Lease(), now, "old"), "bury under a taken-over lease")
		require.False(t, e.release(old.Lease(), now), "release under a taken-over lease")
		require.Equal(t, []bool{false}, e.extend("owner-a", At(time.Hour), now, old.Lease()), "extend under a taken-over lease")
		ok, err := e.s.DeliveryCompleteMany(e.ctx, &driver.DeliveryCompleteManyParams{Leases: []relaytype.Lease{old.Lease()}, Now: now})
		require.NoError(t, err)
		require.Equal(t, []bool{false}, ok, "complete many under a taken-over lease")
		tx := e.begin()
		okTx, err := e.s.DeliveryCompleteTx(e.ctx, tx, &driver.DeliveryCompleteParams{Lease: old.Lease(), Now: now})
		require.NoError(t, err)
		require.False(t, okTx, "complete in a transaction under a taken-over lease")
		require.NoError(t, e.s.TxRollback(e.ctx, tx))

		got := e.get(taken)
		require.Equal(t, relaytype.StatusProcessing, got.Status)
		require.Equal(t, "owner-b", got.LeaseOwner)
		require.Equal(t, taken.LeaseToken, got.LeaseToken)
		require.Equal(t, 2, got.Attempts)
		requireTime(t, At(61*time.Second), got.LeaseExpiresAt)
		require.Empty(t, got.LastError, "a fenced write recorded its error")

		// The new holder's lease is intact.
		require.Equal(t, []bool{true}, e.extend("owner-b", At(2*time.Minute), now, taken.Lease()))
		require.True(t, e.complete(taken.Lease(), At(33*time.Second)))
		e.requireCompleted(taken, At(33*time.Second))
	})

	t.Run("StaleLeasesWriteNothing", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.publish(&eventOpts{MaxAttempts: Ptr(5)})
		first := e.claimOne(nil)
		// A release ends the claim: its lease is stale from now on, even
		// though the same owner claims the delivery again in the same
		// lane epoch (the claims counter tells the two claims apart).
		require.True(t, e.release(first.Lease(), At(time.Second)))
		second := e.claimOne(&claimOpts{Now: Ptr(At(2 * time.Second))})
		require.Equal(t, first.ID, second.ID)
		require.NotEqual(t, first.LeaseToken, second.LeaseToken)
		now := At(3 * time.Second)
		for _, stale := range []relaytype.Lease{first.Lease(), staleToken(t, second)} {
			require.False(t, e.complete(stale, now), "complete under a stale lease")
			require.False(t, e.reschedule(stale, At(time.Hour), now, "stale"), "reschedule under a stale lease")
			require.False(t, e.bury(stale, now, "stale"), "bury under a stale lease")
			require.False(t, e.release(stale, now), "release under a stale lease")
			require.Equal(t, []bool{false}, e.extend("owner-a", At(time.Hour), now, stale), "extend under a stale lease")
			require.Equal(t, []bool{false}, e.completeMany(now, stale), "complete many under a stale lease")
			tx := e.begin()
			ok, err := e.s.DeliveryCompleteTx(e.ctx, tx, &driver.DeliveryCompleteParams{Lease: stale, Now: now})
			require.NoError(t, err)
			require.False(t, ok, "complete in a transaction under a stale lease")
			require.NoError(t, e.s.TxRollback(e.ctx, tx))
		}
		got := e.get(second)
		require.Equal(t, relaytype.StatusProcessing, got.Status)
		require.Equal(t, second.LeaseToken, got.LeaseToken)
		require.Equal(t, 1, got.Attempts, "a release spent an attempt, or a stale write did")
		require.Empty(t, got.LastError)
		require.True(t, e.complete(second.Lease(), now), "the current lease was hurt by the stale writes")
	})

	t.Run("LaneExclusivity", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		// Two deliveries in one lane: while owner-a holds the lane, owner-b
		// sees neither, not even the one owner-a has not claimed. The other
		// lane's delivery is not due at owner-a's claim, so that claim takes
		// lane 3 wherever the store starts its walk of the ring (a store may
		// start it at a random lane: both lanes due, a claim of one lane
		// could take either).
		first, _ := e.publish(&eventOpts{Lane: Ptr(3)})
		second, _ := e.publish(&eventOpts{Lane: Ptr(3), Now: Ptr(At(time.Second))})
		other, _ := e.publish(&eventOpts{Lane: Ptr(4), Now: Ptr(At(2500 * time.Millisecond))})
		d := e.claimOne(&claimOpts{Limit: Ptr(1), Now: Ptr(At(2 * time.Second))})
		require.Equal(t, first.ID, d.EventID)
		got := e.claimOne(&claimOpts{Owner: Ptr("owner-b"), Now: Ptr(At(3 * time.Second))})
		require.Equal(t, other.ID, got.EventID, "owner-b gets the other lane only")
		require.True(t, e.complete(got.Lease(), At(3*time.Second)))
		e.claimNone(&claimOpts{Owner: Ptr("owner-b"), Now: Ptr(At(4 * time.Second))}, "claimed from a lane another owner holds")
		// The holder gets the rest of its lane.
		d2 := e.claimOne(&claimOpts{Now: Ptr(At(5 * time.Second))})
		require.Equal(t, second.ID, d2.EventID)
		// The lease covers the lane: renewing one delivery's lease renews
		// the lane's, so both stay out of owner-b's reach.
		require.Equal(t, []bool{true}, e.extend("owner-a", At(time.Minute), At(20*time.Second), d.Lease()))
		e.claimNone(&claimOpts{Owner: Ptr("owner-b"), Now: Ptr(At(40 * time.Second))}, "took over a lane whose lease was renewed")
		require.True(t, e.complete(d.Lease(), At(41*time.Second)))
		require.True(t, e.complete(d2.Lease(), At(41*time.Second)))
	})

	t.Run("ForeignOrMadeUpLeases", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.publishN(2, nil)
		ds := e.claim(nil)
		require.Len(t, ds, 2)
		// A token of one delivery does not open another.
		swapped := relaytype.Lease{DeliveryID: ds[0].ID, Token: ds[1].LeaseToken}
		now := At(time.Second)
		require.False(t, e.complete(swapped, now))
		require.False(t, e.reschedule(swapped, At(time.Hour), now, "x"))
		require.False(t, e.bury(swapped, now, "x"))
		require.False(t, e.release(swapped, now))
		require.Equal(t, []bool{false}, e.extend("owner-a", At(time.Hour), now, swapped))
		// A token of the right lane under another owner's name extends
		// nothing: the lane is held by owner-a.
		require.Equal(t, []bool{false}, e.extend("owner-b", At(time.Hour), now, ds[0].Lease()))
		for _, d := range ds {
			got := e.get(d)
			require.Equal(t, relaytype.StatusProcessing, got.Status)
			require.Equal(t, 1, got.Attempts)
			requireTime(t, At(defaultLease), got.LeaseExpiresAt, "a foreign lease moved the expiry of %s", d.ID)
		}
	})
}
