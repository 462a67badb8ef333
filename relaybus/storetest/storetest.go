// Package storetest is the conformance suite of relaybus stores. Every
// store's own tests call Run with a constructor of fresh stores:
//
//	func TestStore(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) driver.Store[*memory.Tx] {
//			return memory.New(nil)
//		}, nil)
//	}
//
// The suite is deterministic: every time it passes to the store is a
// fixed base time (T0) plus an offset, so lease expiry and retry delays are
// simulated without sleeping. It never assumes the format of delivery IDs
// (decimal strings, ObjectIDs, ...) and never compares them as numbers.
//
// # The contract: relaybus 0.2.0, lane leases
//
// The suite holds every store to the lane-lease protocol of
// docs/lane-protocol.md: deliveries live in driver.LaneOf(key, event
// ID) lanes; a claim leases lanes, not deliveries, to (owner, store
// instance), and returns lease tokens of the form lane:epoch:claims
// (driver.LaneToken); an attempt is charged when it ends (reschedule,
// bury) or when its lane is taken over, never at claim and never by a
// release; a delivery that was in flight at a takeover is a suspect and
// is claimed alone; completed deliveries are deleted unless the store
// keeps them (Options.KeepsCompleted); events remember their handlers.
// Lane exclusivity is part of it: while a lane is held under a live lease,
// no other owner sees its deliveries. The fixtures therefore give each
// unkeyed event of a test a lane of its own unless the test asks for one
// (eventOpts.Lane), so tests of independent deliveries stay independent.
//
// # Areas
//
// One file per area: publish (atomic and idempotent), claim and
// completion, leases (extension, expiry, takeover, fencing, lane
// exclusivity), retries, dead letters and crash loops, release and
// relinquish, per-key ordering, list and statistics, requeue and purge,
// concurrency, wake-ups (for a store that offers them, driver.Waker;
// the only tests on the real clock), the fencing token of downstream
// writes (Delivery.FencingToken), key runs
// (DeliveryClaimParams.KeyRuns: a store that offers them,
// driver.KeyRunClaimer, is held to the run rules, any other to heads
// only, a run of one), paused handlers, delayed events
// (Event.DeliverAt), and completions written in a claim's transaction
// (for a store that offers it, driver.CompletingClaimer).
package storetest

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/berkcansavur/relaybus/relaybus/driver"
)

// Options describe the store under test.
type Options struct {
	// KeepsCompleted: the store keeps completed deliveries, listed and
	// counted with status completed until Purge (the PostgreSQL store with
	// CompletionHistory, the memory store with RetainCompleted). The
	// default, as in every 0.2.0 store out of the box, deletes a delivery
	// when it completes: the suite then expects "gone" where it would
	// expect "completed".
	KeepsCompleted bool
	// RetryableConflict, when set, recognises the error of a store that
	// neither blocks a second transaction on the same key nor assigns
	// sequences at commit, but fails it at once with a conflict the caller
	// retries (MongoDB's TransientTransactionError). The commit-order test
	// then rolls that transaction back, commits the first, retries the
	// second in a new transaction, and expects it to get the next
	// sequence. Nil: such an error fails the test.
	RetryableConflict func(error) bool
}

// T0 is the base time of the suite. Stores never read a clock: every Now
// is T0 plus an offset. Whole seconds, so stores that keep microseconds
// (PostgreSQL) or milliseconds (MongoDB) store it exactly.
var T0 = time.Date(2031, time.January, 1, 12, 0, 0, 0, time.UTC)

// At returns T0 plus d.
func At(d time.Duration) time.Time { return T0.Add(d) }

// Run exercises store against the whole contract. newStore must return a
// fresh, set-up, empty store (its own database or schema) for each call;
// Run calls it once per subtest and runs subtests in parallel. opts nil
// means the zero Options.
func Run[TTx any](t *testing.T, newStore func(t *testing.T) driver.Store[TTx], opts *Options) {
	t.Helper()
	if opts == nil {
		opts = &Options{}
	}
	o := *opts
	newEnv := func(t *testing.T) *env[TTx] {
		t.Helper()
		s := newStore(t)
		require.NotNil(t, s, "newStore returned nil")
		return &env[TTx]{t: t, s: s, ctx: t.Context(), opts: o}
	}
	areas := []struct {
		name string
		run  func(*testing.T, func(*testing.T) *env[TTx])
	}{
		{"Publish", testPublish[TTx]},
		{"Claim", testClaim[TTx]},
		{"Lease", testLease[TTx]},
		{"Retry", testRetry[TTx]},
		{"Release", testRelease[TTx]},
		{"Suspect", testSuspect[TTx]},
		{"Ordering", testOrdering[TTx]},
		{"List", testList[TTx]},
		{"Admin", testAdmin[TTx]},
		{"Concurrency", testConcurrency[TTx]},
		{"Wake", testWake[TTx]},
		{"Fencing", testFencing[TTx]},
		{"Pause", testPause[TTx]},
		{"Delay", testDelay[TTx]},
		{"KeyRuns", testKeyRuns[TTx]},
		{"CompleteClaim", testCompleteClaim[TTx]},
	}
	for _, a := range areas {
		t.Run(a.name, func(t *testing.T) {
			t.Parallel()
			a.run(t, newEnv)
		})
	}
}

// env is what one subtest works with: a fresh store and its fixtures.
type env[TTx any] struct {
	t    *testing.T
	s    driver.Store[TTx]
	ctx  context.Context
	opts Options
	// usedLanes are the lanes of the events published through env.publish
	// so far; an unkeyed event without an ID or a Lane gets the first lane
	// not among them, so that its deliveries share a lane with nothing
	// else of the test.
	usedLanes [driver.LaneCount]bool
}

// freshLane returns the first lane no event of the test uses yet (lane 0
// again once all are used).
func (e *env[TTx]) freshLane() int {
	for l, used := range e.usedLanes {
		if !used {
			return l
		}
	}
	return 0
}

// IDInLane returns an event ID not used before in this process whose
// unkeyed deliveries live in lane (driver.LaneOf("", id) == lane).
func IDInLane(lane int) string {
	for {
		if id := NewEventID(); driver.LaneOf("", id) == lane {
			return id
		}
	}
}

// Ptr returns a pointer to v, for the pointer options of fixtures.
func Ptr[T any](v T) *T { return &v }

// eventSeq makes event IDs unique across the whole test binary, so a
// store shared by mistake shows up as an idempotency failure, not as a
// silent pass.
var eventSeq atomic.Int64

// NewEventID returns an event ID not used before in this process.
func NewEventID() string { return fmt.Sprintf("storetest-evt-%d", eventSeq.Add(1)) }
