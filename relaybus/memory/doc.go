// Package memory is an in-memory relaybus store: a single-process
// implementation of relaybus.Store that is the reference for the
// contract and the store of tests, examples and programs that do not
// need durability.
//
// # Semantics
//
// It keeps the 0.1.0 row-lease model: a claim marks a delivery
// processing, counts an attempt and gives it a random lease token; a
// takeover of an expired lease counts another attempt, and a takeover
// that finds the budget spent buries the delivery instead of returning
// it. Every fenced write checks the token. One mutex guards everything,
// so every call is atomic and the code stays obviously correct.
//
// # Claims
//
// A claim takes due deliveries by AvailableAt, then ID, and a keyed one
// only while it has the lowest sequence among the live (pending or
// processing) deliveries of its handler and key. It does not scan the
// store: indexes kept in step with every write give, per handler, the
// pending deliveries a claim may take in that order and the processing
// ones by lease expiry, and per handler and key the live deliveries in
// sequence order. A claim costs about Limit heap operations plus the
// expired leases it looks at, whatever the backlog (BenchmarkClaimComplete
// measures 1k to 100k). Listing, statistics and purge still scan every
// stored delivery: they are not on the dispatch path.
//
// A completed delivery is deleted unless Options.RetainCompleted is set,
// in which case it stays with status completed until Purge. Events outlive
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
// completion made with DeliveryCompleteTx is checked when it is made and
// again at commit: if the lease was lost in between, TxCommit applies
// nothing and returns ErrLeaseLost, so a handler's writes and its
// completion commit together or not at all.
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
