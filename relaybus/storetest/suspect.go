package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

// testSuspect checks the suspect rules of docs/lane-protocol.md (Claim,
// steps 3 and 4): a takeover buries only a delivery that was a suspect
// already (variant BURY_ANY), and a busy caller never gets a suspect:
// while one is its oldest candidate, it gets nothing and takes no lane, so
// that it drains (variant SUSPECT_BUSY).
func testSuspect[TTx any](t *testing.T, newEnv func(*testing.T) *env[TTx]) {
	// A delivery on its last attempt, lost beside whatever crashed its
	// process, is not buried by the takeover: it may not be the crasher.
	// It stays pending, now a suspect, and runs once more, alone; if that
	// attempt crashes too, the next takeover buries it.
	t.Run("TakeoverBuriesOnlySuspects", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.publish(&eventOpts{MaxAttempts: Ptr(2)})
		d := e.claimOne(nil)
		require.True(t, e.reschedule(d.Lease(), At(time.Second), At(time.Second), "fail"))
		d = e.claimOne(&claimOpts{Now: Ptr(At(time.Second))})
		require.Equal(t, 2, d.Attempts)
		require.False(t, d.Suspect)

		// The process dies; the takeover charges the lost attempt, which
		// spends the budget.
		again := e.claimOne(&claimOpts{Owner: Ptr("owner-b"), Now: Ptr(At(32 * time.Second))})
		require.Equal(t, d.ID, again.ID, "a delivery that was no suspect was buried by a takeover")
		require.True(t, again.Suspect, "a delivery in flight at a takeover is a suspect")
		require.Equal(t, 3, again.Attempts, "the lost attempt was not charged")

		// It crashes again: now it was a suspect, and the takeover buries it.
		e.claimNone(&claimOpts{Owner: Ptr("owner-c"), Now: Ptr(At(63 * time.Second))}, "a suspect past its budget was claimed")
		got := e.get(d)
		require.Equal(t, relaytype.StatusDead, got.Status)
		require.Equal(t, 3, got.Attempts)
		require.NotEmpty(t, got.LastError, "a delivery buried by a takeover says why")
		require.False(t, e.complete(again.Lease(), At(64*time.Second)), "the crashed lease completed a buried delivery")
	})

	// A suspect whose failure is reported is not buried by the store: the
	// caller decides (bury or reschedule); a takeover that finds a
	// non-suspect under budget leaves it pending too.
	t.Run("TakeoverChargesUnderBudget", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.publish(&eventOpts{MaxAttempts: Ptr(2)})
		e.claimOne(nil) // crashes
		taken := e.claimOne(&claimOpts{Owner: Ptr("owner-b"), Now: Ptr(At(31 * time.Second))})
		require.True(t, taken.Suspect)
		require.Equal(t, 2, taken.Attempts)
		require.True(t, e.bury(taken.Lease(), At(32*time.Second), "failed alone"))
		got := e.get(taken)
		require.Equal(t, relaytype.StatusDead, got.Status)
		require.Equal(t, "failed alone", got.LastError)
	})

	// The oldest candidate is a suspect, found by a takeover: a busy
	// caller gets nothing (the lanes it had to take to find out are handed
	// back), a caller with nothing in flight gets the suspect alone.
	t.Run("BusyGetsNoSuspectFromATakeover", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		s, _ := e.publish(nil)
		other, _ := e.publish(&eventOpts{Now: Ptr(At(time.Second))})
		// Claimed at 0.5s, when s is the only due delivery: with both due,
		// a store that starts its walk of the lanes at a random one (as
		// PostgreSQL's does) may take other's lane first.
		first := e.claimOne(&claimOpts{Limit: Ptr(1), Now: Ptr(At(500 * time.Millisecond))})
		require.Equal(t, s.ID, first.EventID)
		// The process dies; its lease expires at 30.5s.
		now := At(40 * time.Second)
		e.claimNone(&claimOpts{Owner: Ptr("owner-b"), Now: &now, Busy: true}, "a busy caller got work while a suspect is the oldest candidate")
		got := e.deliveryOf(other.ID, "h1")
		require.Equal(t, relaytype.StatusPending, got.Status, "the busy claim holds the other delivery")
		e.claimNone(&claimOpts{Owner: Ptr("owner-b"), Now: &now, Busy: true}, "a busy caller got work while a suspect is the oldest candidate")

		alone := e.claimOne(&claimOpts{Owner: Ptr("owner-b"), Now: &now})
		require.Equal(t, s.ID, alone.EventID)
		require.True(t, alone.Suspect)
		require.Equal(t, 2, alone.Attempts, "the lost attempt was charged other than once")
		require.True(t, e.complete(alone.Lease(), now))
		// Busy with nothing suspect ahead of it: the claim goes on.
		rest := e.claimOne(&claimOpts{Owner: Ptr("owner-b"), Now: &now, Busy: true})
		require.Equal(t, other.ID, rest.EventID)
	})

	// The suspect waits in a lane the caller holds: a busy caller gets
	// nothing from it and takes no other lane, which another owner can
	// take at once (the other lane's work is of a second handler, so that
	// the other owner's claim does not find the suspect first).
	t.Run("BusyGetsNoSuspectFromItsLanes", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		both := []string{"h1", "h2"}
		s, _ := e.publish(nil)
		e.claimOne(nil) // crashes
		now := At(31 * time.Second)
		taken := e.claimOne(&claimOpts{Owner: Ptr("owner-b"), Handlers: both, Now: &now})
		require.Equal(t, s.ID, taken.EventID)
		require.True(t, taken.Suspect)
		// Released unstarted (owner-b got busy meanwhile): owner-b still
		// holds its lane, and the suspect stays one.
		require.True(t, e.release(taken.Lease(), now))
		other, _ := e.publish(&eventOpts{Handlers: []string{"h2"}, Now: &now})
		e.claimNone(&claimOpts{Owner: Ptr("owner-b"), Handlers: both, Now: &now, Busy: true},
			"a busy caller got work while a suspect is the oldest candidate")
		// The other lane is free: another owner takes it at once.
		byC := e.claimOne(&claimOpts{Owner: Ptr("owner-c"), Handlers: []string{"h2"}, Now: &now})
		require.Equal(t, other.ID, byC.EventID, "the busy claim took another lane")

		alone := e.claimOne(&claimOpts{Owner: Ptr("owner-b"), Handlers: both, Now: &now})
		require.Equal(t, s.ID, alone.EventID)
		require.True(t, alone.Suspect)
		require.Equal(t, 2, alone.Attempts, "a release spent an attempt")
	})

	// A busy caller whose oldest candidate is no suspect gets its work,
	// without the suspects behind it.
	t.Run("BusySkipsLaterSuspects", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		lane := e.freshLane()
		e.publish(&eventOpts{Lane: Ptr(lane), Now: Ptr(At(10 * time.Second))})
		e.claimOne(&claimOpts{Now: Ptr(At(10 * time.Second))}) // crashes
		older, _ := e.publish(&eventOpts{Now: Ptr(At(0))})
		now := At(50 * time.Second)
		// Busy, non-suspect oldest: it is claimed, and the suspect (taken
		// over in the same claim) is left out.
		got := e.claimOne(&claimOpts{Owner: Ptr("owner-b"), Now: &now, Busy: true})
		require.Equal(t, older.ID, got.EventID)
	})
}
