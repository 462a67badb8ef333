// Package memory is an in-memory relaybus store: a single-process
// implementation of driver.Store that is the reference for the
// contract and the store of tests, examples and programs that do not
// need durability.
//
// # Semantics
//
// It implements the 0.2.0 lane-lease protocol (docs/lane-protocol.md) as
// the PostgreSQL store does, not an imitation of its effects, so that
// what the conformance suite pins is the behaviour of the lanes
// themselves. Deliveries live in driver.LaneOf(key, event ID) lanes. A
// claim leases lanes to (owner, store instance): it picks from the lanes
// it holds, then, while that does not fill the limit, takes 4, 8, 16, ...
// free or abandoned lanes with due work, oldest due work first, and hands
// back every lane left with nothing in flight. Taking an abandoned lane
// raises its epoch and charges each delivery it had in flight one
// attempt, marking it a suspect and burying it when that spends its
// budget; a suspect is claimed alone. Attempts are charged when they end
// (reschedule, bury) or at a takeover, never at claim and never by a
// release. The lease token is "lane:epoch:claims" (driver.LaneToken);
// every fenced write checks the lane's epoch, that the delivery is in
// flight there, and the delivery's claims counter, and a token or ID of
// another form is an ErrInvalid error that writes nothing. OwnerRelinquish
// releases everything the owner has in flight and hands its lanes back.
// One mutex guards everything, so every call is atomic and the code stays
// obviously correct.
//
// Where it differs from the PostgreSQL store, it is in what a single
// process cannot or need not do: a completion takes its delivery out of
// the lane's in-flight list at once (PostgreSQL leaves the id until the
// holder's next claim), and a lane with only blocked keyed work is never
// taken (PostgreSQL may take it and hand it back in the same claim).
//
// # Claims
//
// A claim does not scan the store: indexes kept in step with every write
// give, per lane and handler, the deliveries that may be claimed (pending,
// not in flight, unkeyed or the head of their key with nothing of the key
// in flight) by AvailableAt, and per handler and key the pending
// deliveries in sequence order. A claim walks the heaps of the lanes it
// looks at as one, so it costs about Limit heap operations plus the lanes
// it looks at, whatever the backlog (BenchmarkClaimComplete measures 1k to
// 100k). Listing, statistics and purge still scan every stored delivery:
// they are not on the dispatch path.
//
// A completed delivery is deleted unless Options.RetainCompleted is set,
// in which case it stays with status completed until Purge (the in-memory
// form of the PostgreSQL store's completion history). Events outlive
// their deliveries until Purge either way, and remember every handler they
// had, so a repeated publish never runs a completed handler again.
//
// # Transactions
//
// A Tx buffers its writes; TxCommit applies them at once under the store's
// mutex, and TxRollback drops them, so a rolled back transaction leaves
// nothing. Per-key sequences are assigned at commit, in commit order, and
// TxCommit writes the final values into the EventPublishResult that
// EventPublishTx returned (keyed events that were new read 0 before). A
// completion made with DeliveryCompleteTx holds its lane until the
// transaction ends, as PostgreSQL's FOR KEY SHARE does: a takeover skips
// the lane meanwhile, so a completion and a takeover never both win. It is
// checked again at commit: if the holder itself released or rescheduled
// the delivery in between, TxCommit applies nothing and returns
// ErrLeaseLost, so a handler's writes and its completion commit together
// or not at all.
//
//	store := memory.New(nil)
//	tx, _ := store.TxBegin(ctx)
//	_, err := store.EventPublishTx(ctx, tx, params)
//	if err != nil {
//		_ = store.TxRollback(ctx, tx)
//		return err
//	}
//	return store.TxCommit(ctx, tx)
package memory
