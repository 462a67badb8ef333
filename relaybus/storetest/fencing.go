package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

// testFencing holds Delivery.FencingToken to its contract: the epoch of
// the delivery's lane, at least 1 on a processing delivery and 0 on any
// other; larger under every later hold of the lane (a takeover, or a take
// after the lane was handed back), equal within one hold, for every
// delivery of a key whatever its handler. (The claim helper checks on
// every claim of the suite that it is the token's epoch.)
func testFencing[TTx any](t *testing.T, newEnv func(*testing.T) *env[TTx]) {
	t.Run("GrowsAcrossHolds", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		key := "fenced-key"
		for range 3 {
			e.publish(&eventOpts{Key: Ptr(key)})
		}
		a1 := e.claimOne(nil) // the key's head, held by owner-a until T0+30s
		require.Positive(t, a1.FencingToken)

		// The lease expires; owner-b takes the lane over.
		b1 := e.claimOne(&claimOpts{Owner: Ptr("owner-b"), Now: Ptr(At(31 * time.Second))})
		require.Equal(t, a1.ID, b1.ID, "the takeover returns the head again")
		require.Greater(t, b1.FencingToken, a1.FencingToken, "a takeover raises the token")
		require.False(t, e.complete(a1.Lease(), At(32*time.Second)), "the stale holder's own write is fenced")

		// Within owner-b's hold the key's next delivery gets the same token.
		require.True(t, e.complete(b1.Lease(), At(32*time.Second)))
		b2 := e.claimOne(&claimOpts{Owner: Ptr("owner-b"), Now: Ptr(At(33 * time.Second))})
		require.NotEqual(t, b1.ID, b2.ID)
		require.Equal(t, b1.FencingToken, b2.FencingToken, "one hold, one token")

		// Handed back (relinquish) and taken again, by the old holder:
		// a new hold, a larger token.
		n, err := e.s.OwnerRelinquish(e.ctx, &driver.OwnerRelinquishParams{Owner: "owner-b", Now: At(34 * time.Second)})
		require.NoError(t, err)
		require.Equal(t, 1, n)
		a2 := e.claimOne(&claimOpts{Now: Ptr(At(35 * time.Second))})
		require.Equal(t, b2.ID, a2.ID, "the relinquished delivery")
		require.Greater(t, a2.FencingToken, b2.FencingToken, "a take after a hand-back raises the token")
	})

	t.Run("EveryHandlerOfAKey", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.publish(&eventOpts{Key: Ptr("shared"), Handlers: []string{"h1", "h2"}})
		ds := e.claim(&claimOpts{Handlers: []string{"h1", "h2"}})
		require.Len(t, ds, 2)
		require.Equal(t, ds[0].FencingToken, ds[1].FencingToken, "one key, one lane, one hold: one token")
	})

	t.Run("Listed", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.publish(nil)
		pending, _ := e.publish(nil)
		d := e.claimOne(&claimOpts{Limit: Ptr(1)})
		got := e.get(d)
		require.Equal(t, relaytype.StatusProcessing, got.Status)
		require.Equal(t, d.FencingToken, got.FencingToken, "a processing delivery is listed with its token")
		for _, other := range e.list(driver.DeliveryListParams{EventID: pending.ID}) {
			if other.ID != d.ID {
				require.Zero(t, other.FencingToken, "a pending delivery has no token")
			}
		}
		require.True(t, e.reschedule(d.Lease(), At(time.Minute), At(time.Second), "later"))
		require.Zero(t, e.get(d).FencingToken, "pending again: no token")
	})
}
