package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

// testDelay holds a store to Event.DeliverAt: a delayed event's
// deliveries are stored with it as their AvailableAt and not claimed
// before it; a keyed one keeps its key's place, so the key's later
// events wait for it (and the other keys do not); a DeliverAt not after
// the publish is at once; a republish adds deliveries due at its own
// DeliverAt and leaves the existing ones' due times; one past
// MaxDeliverDelay is ErrInvalid and writes nothing.
func testDelay[TTx any](t *testing.T, newEnv func(*testing.T) *env[TTx]) {
	t.Run("Unkeyed", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		later := At(time.Hour)
		ev, _ := e.publish(&eventOpts{DeliverAt: &later})
		d := e.deliveryOf(ev.ID, "h1")
		requireTime(t, later, d.AvailableAt, "a delayed delivery's AvailableAt")
		require.Equal(t, relaytype.StatusPending, d.Status)
		e.claimNone(&claimOpts{Now: Ptr(At(time.Hour - time.Second))}, "claimed before its DeliverAt")
		got := e.claimOne(&claimOpts{Now: &later})
		require.Equal(t, ev.ID, got.EventID)
		require.True(t, e.complete(got.Lease(), later))
	})

	t.Run("KeyedHoldsItsKey", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		later := At(time.Minute)
		first, _ := e.publish(&eventOpts{Key: Ptr("k"), DeliverAt: &later})
		second, _ := e.publish(&eventOpts{Key: Ptr("k")})
		other, _ := e.publish(&eventOpts{Key: Ptr("other")})
		ds := e.claim(&claimOpts{Now: Ptr(At(time.Second))})
		require.Equal(t, []string{other.ID}, eventIDs(ds), "the delayed event holds its key back, and only its key")
		require.True(t, e.complete(ds[0].Lease(), At(time.Second)))

		got := e.claimOne(&claimOpts{Now: &later})
		require.Equal(t, first.ID, got.EventID, "the delayed event first, in its key's order")
		require.EqualValues(t, 1, got.Sequence)
		e.claimNone(&claimOpts{Owner: Ptr("owner-b"), Now: &later})
		require.True(t, e.complete(got.Lease(), later))
		got = e.claimOne(&claimOpts{Now: &later})
		require.Equal(t, second.ID, got.EventID)
	})

	t.Run("PastIsAtOnce", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		past := At(-time.Hour)
		ev, _ := e.publish(&eventOpts{DeliverAt: &past})
		requireTime(t, T0, e.deliveryOf(ev.ID, "h1").AvailableAt, "a DeliverAt before the publish is the publish's time")
		require.Equal(t, ev.ID, e.claimOne(nil).EventID)
	})

	t.Run("Republish", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		id := NewEventID()
		first := At(time.Hour)
		e.publish(&eventOpts{ID: &id, DeliverAt: &first})
		second := At(2 * time.Hour)
		e.publish(&eventOpts{ID: &id, DeliverAt: &second, Handlers: []string{"h1", "h2"}})
		requireTime(t, first, e.deliveryOf(id, "h1").AvailableAt, "the existing delivery keeps its due time")
		requireTime(t, second, e.deliveryOf(id, "h2").AvailableAt, "the added delivery is due at the republish's DeliverAt")
	})

	t.Run("TooFar", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		edge := T0.Add(driver.MaxDeliverDelay)
		ev, _ := e.publish(&eventOpts{DeliverAt: &edge})
		requireTime(t, edge, e.deliveryOf(ev.ID, "h1").AvailableAt, "MaxDeliverDelay itself is allowed")

		tooFar := edge.Add(time.Second)
		ep := (&eventOpts{DeliverAt: &tooFar}).publish()
		tx := e.begin()
		_, err := e.s.EventPublishTx(e.ctx, tx, &driver.EventPublishParams{Now: T0, Events: []*driver.EventPublish{ep}})
		requireInvalid(t, err, "a DeliverAt past MaxDeliverDelay")
		require.NoError(t, e.s.TxRollback(e.ctx, tx))
		require.Empty(t, e.list(driver.DeliveryListParams{EventID: ep.Event.ID}), "nothing was written")
	})
}
