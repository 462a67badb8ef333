// Package relaybustest helps a service's own tests check what relaybus
// was asked to do: what a transaction published (event types, keys,
// payloads, headers, handlers) and what the bus's handlers do with it,
// run synchronously. It is to relaybus what rivertest is to River. Use it
// on the memory store or on the database the service runs on; nothing in
// it depends on the store.
//
// # What a transaction published
//
// A Recorder wraps the store the test gives relaybus.New and records
// every publish, per transaction, before it commits (or rolls back):
//
//	rec := relaybustest.NewRecorder[pgx.Tx](store)
//	bus, err := relaybus.New[pgx.Tx](rec, relaybus.Config{})
//	...
//	tx, err := pool.Begin(ctx)
//	err = orders.Place(ctx, tx, bus, order) // the service's code: PublishTx in tx
//	relaybustest.RequirePublished(t, rec.PublishedTx(tx), relaybustest.Want{
//		Type: "order.placed", Key: new("customer-42"), PayloadJSON: map[string]any{"total": 12},
//	})
//
// Stored reads what the store holds instead, through the bus's admin
// calls: the events that committed and still have a delivery (a
// completed delivery is deleted, unless the store keeps a completion
// history). It needs no Recorder, so it also checks a service that
// builds its bus itself.
//
//	relaybustest.RequirePublished(t, relaybustest.Stored(ctx, t, bus), relaybustest.Want{Type: "order.placed"})
//
// RequirePublished wants exactly one event to match, RequirePublishedMany
// the whole list in order, RequireNotPublished none. A Want's unset
// fields match anything. A failure lists everything that was published
// and, for each event, how it differs from the Want.
//
// # Running the handlers
//
// Work runs the bus's handlers over every due delivery on the calling
// goroutine (relaybus.Bus.Work), and fails the test if a handler failed,
// listing every delivery it ran and how it ended:
//
//	tx.Commit(ctx)
//	relaybustest.Work(ctx, t, bus, nil)
//	// the handlers' effects are there now
//
// A failed attempt is rescheduled by the bus's Config.Now plus its
// backoff: give the bus a clock the test moves to run the retry in a
// later Work call (WorkOptions.AllowFailures keeps the failure from
// failing the test).
//
// # Failures
//
// Every helper reports through the testing.TB it is given, with
// t.Fatalf, and marks itself a helper, so the failure points at the
// test's line.
package relaybustest
