package storetest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

func testPublish[TTx any](t *testing.T, newEnv func(*testing.T) *env[TTx]) {
	t.Run("RollbackLeavesNothing", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		tx := e.begin()
		ep := (&eventOpts{Key: Ptr("k"), Handlers: []string{"h1", "h2"}}).publish()
		_, err := e.s.EventPublishTx(e.ctx, tx, &driver.EventPublishParams{Events: []*driver.EventPublish{ep}, Now: T0})
		require.NoError(t, err)
		require.NoError(t, e.s.TxRollback(e.ctx, tx))

		require.Empty(t, e.list(driver.DeliveryListParams{}), "a rolled back publish left deliveries")
		st := e.stats(At(time.Minute))
		require.Equal(t, relaytype.Counts{}, st.Counts)
		require.Empty(t, st.Handlers)
		e.claimNone(&claimOpts{Handlers: []string{"h1", "h2"}, Now: Ptr(At(time.Hour))}, "claimed a rolled back delivery")

		// The rolled back event does not exist, so publishing its ID again
		// inserts it, and its key's first committed event is sequence 1.
		_, res := e.publish(&eventOpts{ID: &ep.Event.ID, Key: Ptr("k")})
		require.Equal(t, []bool{true}, res.Inserted)
		require.Equal(t, 1, res.Deliveries)
		require.Equal(t, []int64{1}, res.Sequences, "a rolled back publish consumed a sequence")
	})

	t.Run("CommitMakesVisible", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		tx := e.begin()
		ep := (&eventOpts{}).publish()
		res, err := e.s.EventPublishTx(e.ctx, tx, &driver.EventPublishParams{Events: []*driver.EventPublish{ep}, Now: T0})
		require.NoError(t, err)
		require.Equal(t, []bool{true}, res.Inserted)
		require.Equal(t, 1, res.Deliveries)

		e.claimNone(nil, "claimed a delivery before its publish committed")
		require.Empty(t, e.list(driver.DeliveryListParams{}), "listed a delivery before its publish committed")

		require.NoError(t, e.s.TxCommit(e.ctx, tx))
		d := e.claimOne(nil)
		require.Equal(t, ep.Event.ID, d.EventID)
	})

	t.Run("Fields", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		created := At(-time.Hour)
		ev, res := e.publish(&eventOpts{
			Type:        Ptr("invoice.paid"),
			Key:         Ptr("customer-7"),
			Payload:     []byte(`{"amount":42}`),
			Headers:     map[string]string{"trace": "abc", "tenant": "t1"},
			CreatedAt:   &created,
			Handlers:    []string{"mailer", "ledger"},
			MaxAttempts: Ptr(7),
			Now:         Ptr(At(time.Second)),
		})
		require.Equal(t, []bool{true}, res.Inserted)
		require.Equal(t, []int64{1}, res.Sequences)
		require.Equal(t, 2, res.Deliveries)

		ds := e.list(driver.DeliveryListParams{EventID: ev.ID})
		require.Len(t, ds, 2)
		handlers := []string{}
		for _, d := range ds {
			handlers = append(handlers, d.Handler)
			require.NotEmpty(t, d.ID)
			require.Equal(t, ev.ID, d.EventID)
			require.Equal(t, "invoice.paid", d.EventType)
			require.Equal(t, "customer-7", d.Key)
			require.Equal(t, int64(1), d.Sequence)
			require.True(t, samePayload([]byte(`{"amount":42}`), d.Payload), "payload %q", d.Payload)
			require.True(t, sameHeaders(ev.Headers, d.Headers), "headers %v", d.Headers)
			requireTime(t, created, d.EventCreatedAt, "EventCreatedAt")
			require.Equal(t, relaytype.StatusPending, d.Status)
			require.Equal(t, 0, d.Attempts)
			require.Equal(t, 7, d.MaxAttempts)
			requireTime(t, At(time.Second), d.AvailableAt, "AvailableAt is the publish's Now")
			require.Empty(t, d.LastError)
			require.Empty(t, d.LeaseOwner)
			require.Empty(t, d.LeaseToken)
			require.True(t, d.CompletedAt.IsZero())
		}
		require.ElementsMatch(t, []string{"mailer", "ledger"}, handlers)
		require.NotEqual(t, ds[0].ID, ds[1].ID)
	})

	t.Run("CreatedAtDefaultsToNow", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		ev, _ := e.publish(&eventOpts{Now: Ptr(At(5 * time.Second))})
		d := e.deliveryOf(ev.ID, "h1")
		requireTime(t, At(5*time.Second), d.EventCreatedAt)
		require.Zero(t, d.Sequence, "an unkeyed event has sequence 0")
		require.Empty(t, d.Key)
	})

	t.Run("StoredDataIsNotAliased", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		payload := []byte("original")
		headers := map[string]string{"h": "v"}
		ev, _ := e.publish(&eventOpts{Payload: payload, Headers: headers})
		payload[0] = 'X'
		headers["h"] = "changed"
		d := e.claimOne(nil)
		require.Equal(t, "original", string(d.Payload), "the store kept the caller's payload slice")
		require.Equal(t, "v", d.Headers["h"], "the store kept the caller's header map")
		d.Payload[0] = 'Y'
		d.Headers["h"] = "mutated"
		got := e.deliveryOf(ev.ID, "h1")
		require.Equal(t, "original", string(got.Payload), "a returned payload aliases the store's")
		require.Equal(t, "v", got.Headers["h"], "returned headers alias the store's")
	})

	t.Run("SameEventIDTwice", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		ev, res := e.publish(&eventOpts{Key: Ptr("k")})
		require.Equal(t, []bool{true}, res.Inserted)
		_, res = e.publish(&eventOpts{ID: &ev.ID, Key: Ptr("k"), Now: Ptr(At(time.Minute))})
		require.Equal(t, []bool{false}, res.Inserted)
		require.Equal(t, 0, res.Deliveries)
		require.Equal(t, []int64{1}, res.Sequences, "an existing event reports its stored sequence")
		ds := e.list(driver.DeliveryListParams{})
		require.Len(t, ds, 1)
		requireTime(t, T0, ds[0].AvailableAt, "the repeated publish changed the delivery")

		// A repeated event did not take a sequence of its key.
		_, res = e.publish(&eventOpts{Key: Ptr("k")})
		require.Equal(t, []int64{2}, res.Sequences)
	})

	t.Run("SameEventIDNewHandler", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		ev, _ := e.publish(&eventOpts{Handlers: []string{"h1"}})
		_, res := e.publish(&eventOpts{ID: &ev.ID, Handlers: []string{"h1", "h2"}})
		require.Equal(t, []bool{false}, res.Inserted)
		require.Equal(t, 1, res.Deliveries, "only h2 is new")
		ds := e.list(driver.DeliveryListParams{EventID: ev.ID})
		require.Len(t, ds, 2)
		e.deliveryOf(ev.ID, "h1")
		e.deliveryOf(ev.ID, "h2")
	})

	t.Run("SameEventIDAfterCompletion", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		ev, _ := e.publish(nil)
		d := e.claimOne(nil)
		require.True(t, e.complete(d.Lease(), At(time.Second)))

		// A redelivered event must not run a handler that completed, even
		// in a store that deleted the completed delivery.
		_, res := e.publish(&eventOpts{ID: &ev.ID, Now: Ptr(At(time.Minute))})
		require.Equal(t, []bool{false}, res.Inserted)
		require.Equal(t, 0, res.Deliveries)
		e.claimNone(&claimOpts{Now: Ptr(At(time.Hour))}, "a completed handler got the event again")
		e.requireCompleted(d, At(time.Second))

		// A handler it never had is new: only that one gets a delivery,
		// and only once.
		for range 2 {
			_, res = e.publish(&eventOpts{ID: &ev.ID, Handlers: []string{"h1", "h2"}, Now: Ptr(At(2 * time.Minute))})
			require.Equal(t, []bool{false}, res.Inserted)
		}
		ds := e.claim(&claimOpts{Handlers: []string{"h1", "h2"}, Now: Ptr(At(time.Hour))})
		require.Len(t, ds, 1)
		require.Equal(t, "h2", ds[0].Handler)
		require.True(t, e.complete(ds[0].Lease(), At(time.Hour)))
		_, res = e.publish(&eventOpts{ID: &ev.ID, Handlers: []string{"h1", "h2"}, Now: Ptr(At(2 * time.Hour))})
		require.Equal(t, 0, res.Deliveries, "a republish after both completed")
		e.claimNone(&claimOpts{Handlers: []string{"h1", "h2"}, Now: Ptr(At(3 * time.Hour))})
	})

	t.Run("SameEventIDAfterCompletionManyEvents", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		// A redelivered batch of several events, some completed, some not.
		var eps []*driver.EventPublish
		for range 6 {
			eps = append(eps, (&eventOpts{Handlers: []string{"h1", "h2"}}).publish())
		}
		e.publishTx(&driver.EventPublishParams{Events: eps, Now: T0})
		ds := e.claim(&claimOpts{Handlers: []string{"h1"}})
		require.Len(t, ds, 6)
		for _, d := range ds[:4] {
			require.True(t, e.complete(d.Lease(), At(time.Second)))
		}
		res := e.publishTx(&driver.EventPublishParams{Events: eps, Now: At(time.Minute)})
		require.Equal(t, 0, res.Deliveries, "a republished batch added deliveries")
		require.Len(t, e.list(driver.DeliveryListParams{Status: relaytype.StatusPending}), 6, "h2's six")
		require.Len(t, e.list(driver.DeliveryListParams{Status: relaytype.StatusProcessing}), 2, "h1's two still running")
	})

	t.Run("SameEventIDInOneTransaction", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		id := NewEventID()
		tx := e.begin()
		for i, handlers := range [][]string{{"h1"}, {"h1", "h2"}} {
			ep := (&eventOpts{ID: &id, Handlers: handlers}).publish()
			_, err := e.s.EventPublishTx(e.ctx, tx, &driver.EventPublishParams{Events: []*driver.EventPublish{ep}, Now: T0})
			require.NoError(t, err, "publish %d", i)
		}
		require.NoError(t, e.s.TxCommit(e.ctx, tx))
		ds := e.list(driver.DeliveryListParams{EventID: id})
		require.Len(t, ds, 2)
		e.deliveryOf(id, "h1")
		e.deliveryOf(id, "h2")
	})

	t.Run("ManyEventsInOneCall", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		old, _ := e.publish(&eventOpts{Handlers: []string{"h1"}})
		params := &driver.EventPublishParams{Now: T0, Events: []*driver.EventPublish{
			(&eventOpts{Handlers: []string{"h1", "h2"}}).publish(),
			(&eventOpts{ID: &old.ID, Handlers: []string{"h1", "h3"}}).publish(),
			(&eventOpts{Handlers: []string{}}).publish(),
			(&eventOpts{Key: Ptr("k"), Handlers: []string{"h1"}}).publish(),
		}}
		res := e.publishTx(params)
		require.Equal(t, []bool{true, false, true, true}, res.Inserted)
		require.Equal(t, []int64{0, 0, 0, 1}, res.Sequences)
		require.Equal(t, 4, res.Deliveries, "2 + 1 (h3) + 0 + 1")
		require.Len(t, e.list(driver.DeliveryListParams{}), 5)
	})

	t.Run("Invalid", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		good := func() *driver.EventPublish { return (&eventOpts{}).publish() }
		with := func(f func(ep *driver.EventPublish)) *driver.EventPublish {
			ep := good()
			f(ep)
			return ep
		}
		dupID := NewEventID()
		headers := map[string]string{}
		for i := range driver.MaxHeaders + 1 {
			headers[fmt.Sprintf("h%d", i)] = "v"
		}
		cases := []struct {
			name   string
			params *driver.EventPublishParams
		}{
			{"nil params", nil},
			{"no events", &driver.EventPublishParams{Now: T0}},
			{"zero now", &driver.EventPublishParams{Events: []*driver.EventPublish{good()}}},
			{"nil event", &driver.EventPublishParams{Now: T0, Events: []*driver.EventPublish{good(), {}}}},
			{"empty event id", &driver.EventPublishParams{Now: T0, Events: []*driver.EventPublish{with(func(ep *driver.EventPublish) { ep.Event.ID = "" })}}},
			{"empty type", &driver.EventPublishParams{Now: T0, Events: []*driver.EventPublish{with(func(ep *driver.EventPublish) { ep.Event.Type = "" })}}},
			{"key with NUL", &driver.EventPublishParams{Now: T0, Events: []*driver.EventPublish{with(func(ep *driver.EventPublish) { ep.Event.Key = "a\x00b" })}}},
			{"long key", &driver.EventPublishParams{Now: T0, Events: []*driver.EventPublish{with(func(ep *driver.EventPublish) { ep.Event.Key = strings.Repeat("k", driver.MaxKeyBytes+1) })}}},
			{"header value with NUL", &driver.EventPublishParams{Now: T0, Events: []*driver.EventPublish{with(func(ep *driver.EventPublish) { ep.Event.Headers = map[string]string{"h": "a\x00b"} })}}},
			{"too many headers", &driver.EventPublishParams{Now: T0, Events: []*driver.EventPublish{with(func(ep *driver.EventPublish) { ep.Event.Headers = headers })}}},
			{"empty handler", &driver.EventPublishParams{Now: T0, Events: []*driver.EventPublish{with(func(ep *driver.EventPublish) { ep.Deliveries[0].Handler = "" })}}},
			{"handler twice", &driver.EventPublishParams{Now: T0, Events: []*driver.EventPublish{with(func(ep *driver.EventPublish) { ep.Deliveries = append(ep.Deliveries, ep.Deliveries[0]) })}}},
			{"zero max attempts", &driver.EventPublishParams{Now: T0, Events: []*driver.EventPublish{with(func(ep *driver.EventPublish) { ep.Deliveries[0].MaxAttempts = 0 })}}},
			{"max attempts over limit", &driver.EventPublishParams{Now: T0, Events: []*driver.EventPublish{with(func(ep *driver.EventPublish) { ep.Deliveries[0].MaxAttempts = driver.MaxAttemptsLimit + 1 })}}},
			{"event id twice in one call", &driver.EventPublishParams{Now: T0, Events: []*driver.EventPublish{
				with(func(ep *driver.EventPublish) { ep.Event.ID = dupID }),
				with(func(ep *driver.EventPublish) { ep.Event.ID = dupID; ep.Deliveries[0].Handler = "h2" }),
			}}},
		}
		for _, c := range cases {
			tx := e.begin()
			_, err := e.s.EventPublishTx(e.ctx, tx, c.params)
			requireInvalid(t, err, c.name)
			// Commit, not roll back: a store that wrote part of the call
			// before failing would show it below.
			require.NoError(t, e.s.TxCommit(e.ctx, tx), "%s: commit after a rejected publish", c.name)
		}
		require.Empty(t, e.list(driver.DeliveryListParams{}), "a rejected publish wrote deliveries")
		// Neither event of the "event id twice" case was inserted.
		_, res := e.publish(&eventOpts{ID: &dupID})
		require.Equal(t, []bool{true}, res.Inserted, "a rejected publish inserted an event")
	})
}
