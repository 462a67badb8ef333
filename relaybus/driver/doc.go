// Package driver is what a relaybus store implements and what a
// relaybus.Bus calls: a store author reads this package (and
// relaybus/relaytype, the rows both sides share); a user reads package
// relaybus.
//
// # The interface
//
// Store is generic over the store's transaction type, so that a service
// publishes in its own transaction (pgx.Tx, a MongoDB session context,
// *memory.Tx). Its methods are named noun first and take a params struct
// (DeliveryClaim(ctx, *DeliveryClaimParams)), so a new field never breaks
// the interface. EventPublisher, Waker (wake-ups of idle dispatchers)
// and HealthReporter are optional capabilities, found by type assertion;
// KeyRunClaimer and CompletingClaimer (completions written in a claim's
// transaction) are found the same way and also report, by a method,
// whether the store behind a wrapper has them. Each one's comment says
// what the Bus does without it. Assert the interface at compile time:
//
//	var _ driver.Store[pgx.Tx] = (*Store)(nil)
//
// The contract is the lane-lease protocol (docs/lane-protocol.md): a
// dispatcher leases lanes (LaneOf), a claim returns lease tokens of the
// form lane:epoch:claims (LaneToken), and every fenced write takes a
// relaytype.Lease and reports false, not an error, when it is no longer
// current. A store never reads a clock: every time comes in the params.
//
// # Validation
//
// Every method calls its params' Validate first, so a bad call is the
// same relaytype.ErrInvalid error in every store, and nothing is written.
// Every limit a store enforces is in limits.go, with its unit and reason.
// The Bus validates what it builds once and marks it so; Validate trusts
// the mark (mark.go says what it covers), and params built by anyone else
// carry none. A store maps its database's errors onto relaytype's
// sentinels (ErrNotFound, ErrInvalid, ErrClosed, ErrNotDead) in one
// function, so callers use errors.Is whatever the store; an error text
// starts with the store's package name ("relaybus/postgres: ...").
// TruncateError cuts a handler's error to MaxErrorBytes before it is
// stored.
//
// # Conformance
//
// relaybus/storetest is the shared conformance suite: every store's own
// tests run it with a constructor of fresh, set-up, empty stores (a
// database or schema of their own), and the store passes when it passes:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) driver.Store[*memory.Tx] {
//			return memory.New(nil)
//		}, nil)
//	}
//
// storetest.Options says what the store keeps or does differently (a
// completion history, transactions MongoDB fails at once instead of
// making them wait); docs/lane-protocol.md is the protocol it checks.
package driver
