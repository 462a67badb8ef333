package storetest

import (
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

func testRetry[TTx any](t *testing.T, newEnv func(*testing.T) *env[TTx]) {
	t.Run("Reschedule", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.publish(nil)
		d := e.claimOne(nil)
		require.True(t, e.reschedule(d.Lease(), At(time.Minute), At(time.Second), "boom"))

		got := e.get(d)
		require.Equal(t, relaytype.StatusPending, got.Status)
		requireTime(t, At(time.Minute), got.AvailableAt)
		require.Equal(t, "boom", got.LastError)
		require.Equal(t, 1, got.Attempts, "the failed attempt stays counted")
		require.Empty(t, got.LeaseToken)
		require.False(t, e.complete(d.Lease(), At(2*time.Second)), "the lease survived a reschedule")

		e.claimNone(&claimOpts{Now: Ptr(At(59 * time.Second))}, "claimed a rescheduled delivery before its time")
		again := e.claimOne(&claimOpts{Now: Ptr(At(time.Minute))})
		require.Equal(t, d.ID, again.ID)
		require.Equal(t, 2, again.Attempts)
		require.Equal(t, "boom", again.LastError)
	})

	t.Run("LongErrorIsCut", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.publish(nil)
		d := e.claimOne(nil)
		long := strings.Repeat("é", driver.MaxErrorBytes) // 2 bytes each
		require.True(t, e.reschedule(d.Lease(), At(time.Minute), At(time.Second), long))
		got := e.get(d)
		require.LessOrEqual(t, len(got.LastError), driver.MaxErrorBytes)
		require.True(t, utf8.ValidString(got.LastError), "the cut error is not UTF-8")
		require.True(t, strings.HasPrefix(long, got.LastError))
		require.NotEmpty(t, got.LastError)
	})

	t.Run("Bury", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.publish(&eventOpts{Handlers: []string{"h1", "h2"}})
		d := e.claimOne(nil)
		require.True(t, e.bury(d.Lease(), At(time.Second), "poison"))
		got := e.get(d)
		require.Equal(t, relaytype.StatusDead, got.Status)
		require.Equal(t, "poison", got.LastError)
		require.Empty(t, got.LeaseToken)
		require.False(t, e.complete(d.Lease(), At(2*time.Second)), "the lease survived burial")
		e.claimNone(&claimOpts{Now: Ptr(At(1000 * time.Hour))}, "claimed a dead delivery")

		st := e.stats(At(time.Hour))
		require.Equal(t, int64(1), st.Dead)
		require.Equal(t, int64(1), st.Pending, "h2's delivery")
		require.Equal(t, relaytype.Counts{Dead: 1}, st.Handlers["h1"])
	})

	t.Run("PoisonCountedUntilDead", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.publish(&eventOpts{MaxAttempts: Ptr(3)})
		// Attempt 1 fails and is rescheduled.
		d := e.claimOne(&claimOpts{Now: Ptr(At(0))})
		require.Equal(t, 1, d.Attempts)
		require.True(t, e.reschedule(d.Lease(), At(10*time.Second), At(time.Second), "fail 1"))
		// Attempt 2 crashes: its lease expires at 40s.
		d = e.claimOne(&claimOpts{Now: Ptr(At(10 * time.Second))})
		require.Equal(t, 2, d.Attempts)
		// Attempt 3 is a takeover, and crashes too: expires at 71s.
		d = e.claimOne(&claimOpts{Owner: Ptr("owner-b"), Now: Ptr(At(41 * time.Second))})
		require.Equal(t, 3, d.Attempts)
		// The budget is spent: the next takeover buries it.
		e.claimNone(&claimOpts{Owner: Ptr("owner-c"), Now: Ptr(At(72 * time.Second))}, "a delivery past its attempt budget was claimed")
		got := e.get(d)
		require.Equal(t, relaytype.StatusDead, got.Status)
		require.Equal(t, 3, got.Attempts)
		require.NotEmpty(t, got.LastError, "a delivery buried by a takeover says why")
		require.False(t, e.complete(d.Lease(), At(73*time.Second)), "the crashed lease completed a buried delivery")
		e.claimNone(&claimOpts{Now: Ptr(At(1000 * time.Hour))}, "claimed a dead delivery")
	})

	t.Run("CrashLoopChargesOnlyThePoison", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		testCrashLoop(t, e)
	})

	t.Run("CrashLoopEndsDead", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.publish(&eventOpts{MaxAttempts: Ptr(2)})
		now := T0
		for attempt := 1; attempt <= 2; attempt++ {
			d := e.claimOne(&claimOpts{Now: &now})
			require.Equal(t, attempt, d.Attempts, "every crash counts an attempt")
			now = d.LeaseExpiresAt.Add(time.Second)
		}
		e.claimNone(&claimOpts{Now: &now}, "a crash loop outlived its attempt budget")
		st := e.stats(now)
		require.Equal(t, relaytype.Counts{Dead: 1}, st.Counts)
	})
}

// Sizes of testCrashLoop.
const (
	crashLoopBudget     = 3 // the poison delivery's max attempts
	crashLoopBystanders = 4 // deliveries claimed beside it the first time
	// crashLoopStepsMax bounds the claims of the loop: a store that never
	// buries the poison delivery fails here instead of looping forever.
	crashLoopStepsMax = 50
)

// testCrashLoop is a poison delivery that crashes its process every time
// it runs (its lease expires again and again), claimed the first time in
// one batch with bystanders, deliveries of the same lane whose handlers
// would succeed but whose process died with it. The poison delivery must
// end dead after exactly its budget of attempts; each bystander is
// charged at most once (the first takeover cannot tell it from the
// poison), and is then claimed alone, as a suspect, and completes.
func testCrashLoop[TTx any](t *testing.T, e *env[TTx]) {
	const lane = 11
	var poison *relaytype.Event
	bystanders := map[string]bool{}
	for i := range crashLoopBystanders + 1 {
		if i == crashLoopBystanders/2 {
			poison, _ = e.publish(&eventOpts{Lane: Ptr(lane), MaxAttempts: Ptr(crashLoopBudget), Now: Ptr(At(time.Duration(i) * time.Second))})
			continue
		}
		ev, _ := e.publish(&eventOpts{Lane: Ptr(lane), MaxAttempts: Ptr(crashLoopBudget), Now: Ptr(At(time.Duration(i) * time.Second))})
		bystanders[ev.ID] = true
	}
	now := At(time.Minute)
	first := e.claim(&claimOpts{Now: &now})
	require.Len(t, first, crashLoopBystanders+1, "the first claim takes the whole lane")
	// The process crashes: nothing is written; every lease expires.
	now = first[0].LeaseExpiresAt.Add(time.Second)

	poisonRuns, completed := 1, 0
	// Every crash is a new process: a new owner, which takes the lane over
	// once the lease has expired.
	crashes := 1
	owner := func() *string { return Ptr(fmt.Sprintf("process-%d", crashes)) }
	for step := 0; ; step++ {
		require.Less(t, step, crashLoopStepsMax, "the crash loop does not end")
		ds := e.claim(&claimOpts{Owner: owner(), Now: &now})
		if len(ds) == 0 {
			break
		}
		require.Len(t, ds, 1, "step %d: after a takeover, suspects run alone", step)
		d := ds[0]
		require.True(t, d.Suspect, "step %d: delivery %s claimed after a takeover is not a suspect", step, d.ID)
		if d.EventID == poison.ID {
			poisonRuns++
			require.Equal(t, poisonRuns, d.Attempts, "step %d: every crash of the poison delivery is charged", step)
			now = d.LeaseExpiresAt.Add(time.Second) // crashes again
			crashes++
			continue
		}
		require.True(t, bystanders[d.EventID], "step %d: claimed %s, which is no bystander", step, d.EventID)
		require.Equal(t, 2, d.Attempts, "step %d: bystander %s was charged more than the first crash", step, d.EventID)
		require.True(t, e.complete(d.Lease(), now), "step %d", step)
		completed++
	}
	require.Equal(t, crashLoopBudget, poisonRuns, "the poison delivery ran exactly its budget")
	require.Equal(t, crashLoopBystanders, completed, "every bystander completed")
	dead := e.deliveryOf(poison.ID, "h1")
	require.Equal(t, relaytype.StatusDead, dead.Status)
	require.Equal(t, crashLoopBudget, dead.Attempts)
	require.NotEmpty(t, dead.LastError, "a delivery buried by a takeover says why")
	st := e.stats(now)
	require.Equal(t, relaytype.Counts{Dead: 1, Completed: e.completedCount(crashLoopBystanders)}, st.Counts)
}
