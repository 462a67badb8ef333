package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/berkcansavur/relaybus/relaybus"
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
		require.Equal(t, relaybus.StatusPending, got.Status)
		require.Equal(t, 1, got.Attempts, "a release gives the attempt back")
		require.Empty(t, got.LeaseToken)
		require.False(t, e.complete(d.Lease(), At(3*time.Second)), "the lease survived its release")
		require.False(t, e.release(d.Lease(), At(3*time.Second)), "released twice")

		again := e.claimOne(&claimOpts{Owner: Ptr("owner-b"), Now: Ptr(At(3 * time.Second))})
		require.Equal(t, d.ID, again.ID)
		require.Equal(t, 2, again.Attempts, "the released attempt was spent")
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

		n, err := e.s.OwnerRelinquish(e.ctx, &relaybus.OwnerRelinquishParams{Owner: "owner-a", Now: At(time.Second)})
		require.NoError(t, err)
		require.Equal(t, 3, n)
		for _, d := range mine {
			got := e.get(d)
			require.Equal(t, relaybus.StatusPending, got.Status)
			require.Equal(t, 0, got.Attempts)
			require.False(t, e.complete(d.Lease(), At(2*time.Second)), "a relinquished lease completed")
		}
		for _, d := range theirs {
			got := e.get(d)
			require.Equal(t, relaybus.StatusProcessing, got.Status, "relinquish released another owner's delivery")
			require.Equal(t, d.LeaseToken, got.LeaseToken)
		}

		n, err = e.s.OwnerRelinquish(e.ctx, &relaybus.OwnerRelinquishParams{Owner: "owner-a", Now: At(2 * time.Second)})
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

	t.Run("InvalidParams", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		_, err := e.s.OwnerRelinquish(e.ctx, &relaybus.OwnerRelinquishParams{Now: T0})
		requireInvalid(t, err, "relinquish without an owner")
		_, err = e.s.OwnerRelinquish(e.ctx, nil)
		requireInvalid(t, err, "relinquish with nil params")
		_, err = e.s.DeliveryRelease(e.ctx, &relaybus.DeliveryReleaseParams{Lease: relaybus.Lease{Token: "t"}, Now: T0})
		requireInvalid(t, err, "release without a delivery id")
	})
}
