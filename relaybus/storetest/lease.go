package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/berkcansavur/relaybus/relaybus"
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
		bogus := relaybus.Lease{DeliveryID: ds[2].ID, Token: ds[2].LeaseToken + "x"}
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
		_, err := e.s.LeaseExtend(e.ctx, &relaybus.LeaseExtendParams{Owner: "owner-a", Leases: []relaybus.Lease{d.Lease()}, ExpiresAt: At(time.Second), Now: At(time.Second)})
		requireInvalid(t, err, "expiry not after now")
		_, err = e.s.LeaseExtend(e.ctx, &relaybus.LeaseExtendParams{Owner: "owner-a", ExpiresAt: At(time.Minute), Now: At(time.Second)})
		requireInvalid(t, err, "no leases")
		_, err = e.s.LeaseExtend(e.ctx, &relaybus.LeaseExtendParams{Leases: []relaybus.Lease{d.Lease()}, ExpiresAt: At(time.Minute), Now: At(time.Second)})
		requireInvalid(t, err, "no owner")
		requireTime(t, At(defaultLease), e.get(d).LeaseExpiresAt, "a rejected extend changed the lease")
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

		// Fencing: every write under the old lease does nothing.
		now := At(32 * time.Second)
		require.False(t, e.complete(old.Lease(), now), "complete under a taken-over lease")
		require.False(t, e.reschedule(old.Lease(), At(time.Hour), now, "old"), "reschedule under a taken-over lease")
		require.False(t, e.bury(old.Lease(), now, "old"), "bury under a taken-over lease")
		require.False(t, e.release(old.Lease(), now), "release under a taken-over lease")
		require.Equal(t, []bool{false}, e.extend("owner-a", At(time.Hour), now, old.Lease()), "extend under a taken-over lease")
		ok, err := e.s.DeliveryCompleteMany(e.ctx, &relaybus.DeliveryCompleteManyParams{Leases: []relaybus.Lease{old.Lease()}, Now: now})
		require.NoError(t, err)
		require.Equal(t, []bool{false}, ok, "complete many under a taken-over lease")
		tx := e.begin()
		okTx, err := e.s.DeliveryCompleteTx(e.ctx, tx, &relaybus.DeliveryCompleteParams{Lease: old.Lease(), Now: now})
		require.NoError(t, err)
		require.False(t, okTx, "complete in a transaction under a taken-over lease")
		require.NoError(t, e.s.TxRollback(e.ctx, tx))

		got := e.get(taken)
		require.Equal(t, relaybus.StatusProcessing, got.Status)
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

	t.Run("ForeignOrMadeUpLeases", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.publishN(2, nil)
		ds := e.claim(nil)
		require.Len(t, ds, 2)
		// A token of one delivery does not open another.
		swapped := relaybus.Lease{DeliveryID: ds[0].ID, Token: ds[1].LeaseToken}
		now := At(time.Second)
		require.False(t, e.complete(swapped, now))
		require.False(t, e.reschedule(swapped, At(time.Hour), now, "x"))
		require.False(t, e.bury(swapped, now, "x"))
		require.False(t, e.release(swapped, now))
		for _, d := range ds {
			got := e.get(d)
			require.Equal(t, relaybus.StatusProcessing, got.Status)
			require.Equal(t, 1, got.Attempts)
		}
	})
}
