package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

func testClaim[TTx any](t *testing.T, newEnv func(*testing.T) *env[TTx]) {
	t.Run("Fields", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		ev, _ := e.publish(&eventOpts{
			Key:         Ptr("k1"),
			Payload:     []byte("payload"),
			Headers:     map[string]string{"a": "b"},
			MaxAttempts: Ptr(3),
		})
		d := e.claimOne(&claimOpts{Owner: Ptr("worker-1"), Lease: Ptr(45 * time.Second), Now: Ptr(At(10 * time.Second))})
		require.Equal(t, ev.ID, d.EventID)
		require.Equal(t, ev.Type, d.EventType)
		require.Equal(t, "k1", d.Key)
		require.Equal(t, int64(1), d.Sequence)
		require.Equal(t, "payload", string(d.Payload))
		require.True(t, sameHeaders(map[string]string{"a": "b"}, d.Headers), "headers %v", d.Headers)
		require.Equal(t, "h1", d.Handler)
		require.Equal(t, 1, d.Attempts, "the first claim is attempt 1")
		require.Equal(t, 3, d.MaxAttempts)
		require.Equal(t, "worker-1", d.LeaseOwner)
		requireTime(t, At(55*time.Second), d.LeaseExpiresAt)
		require.False(t, d.Suspect, "a first claim is no suspect")

		// The stored delivery says the same: in flight, it is listed as
		// processing under the same lease, its running attempt counted.
		got := e.get(d)
		require.Equal(t, relaytype.StatusProcessing, got.Status)
		require.Equal(t, 1, got.Attempts)
		require.Equal(t, "worker-1", got.LeaseOwner)
		require.Equal(t, d.LeaseToken, got.LeaseToken)
		requireTime(t, At(55*time.Second), got.LeaseExpiresAt)

		// A held lease is not claimed again before it expires.
		e.claimNone(&claimOpts{Owner: Ptr("worker-2"), Now: Ptr(At(54 * time.Second))}, "claimed a delivery under a current lease")
	})

	t.Run("OnlyHandlersAskedFor", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		ev, _ := e.publish(&eventOpts{Handlers: []string{"h1", "h2", "h3"}})
		ds := e.claim(&claimOpts{Handlers: []string{"h1", "h3"}})
		require.Len(t, ds, 2)
		got := []string{ds[0].Handler, ds[1].Handler}
		require.ElementsMatch(t, []string{"h1", "h3"}, got)
		d := e.claimOne(&claimOpts{Handlers: []string{"h2", "other"}})
		require.Equal(t, ev.ID, d.EventID)
		require.Equal(t, "h2", d.Handler)
	})

	t.Run("Limit", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		evs := e.publishN(5, nil)
		var claimed []*relaytype.Delivery
		for _, want := range []int{2, 2, 1, 0} {
			ds := e.claim(&claimOpts{Limit: Ptr(2)})
			require.Len(t, ds, want)
			claimed = append(claimed, ds...)
		}
		var want []string
		for _, ev := range evs {
			want = append(want, ev.ID)
		}
		require.ElementsMatch(t, want, eventIDs(claimed), "every delivery claimed once")
	})

	t.Run("NotYetDue", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.publish(&eventOpts{Now: Ptr(At(time.Minute))})
		e.claimNone(&claimOpts{Now: Ptr(At(59 * time.Second))}, "claimed a delivery before it was due")
		e.claimOne(&claimOpts{Now: Ptr(At(time.Minute))})
	})

	t.Run("InvalidParams", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.publish(nil)
		cases := []struct {
			name string
			p    *driver.DeliveryClaimParams
		}{
			{"nil", nil},
			{"no owner", &driver.DeliveryClaimParams{Handlers: []string{"h1"}, Limit: 1, LeaseDuration: time.Second, Now: T0}},
			{"no handlers", &driver.DeliveryClaimParams{Owner: "o", Limit: 1, LeaseDuration: time.Second, Now: T0}},
			{"empty handler", &driver.DeliveryClaimParams{Owner: "o", Handlers: []string{""}, Limit: 1, LeaseDuration: time.Second, Now: T0}},
			{"zero limit", &driver.DeliveryClaimParams{Owner: "o", Handlers: []string{"h1"}, LeaseDuration: time.Second, Now: T0}},
			{"limit over max", &driver.DeliveryClaimParams{Owner: "o", Handlers: []string{"h1"}, Limit: driver.MaxClaimLimit + 1, LeaseDuration: time.Second, Now: T0}},
			{"zero lease", &driver.DeliveryClaimParams{Owner: "o", Handlers: []string{"h1"}, Limit: 1, Now: T0}},
			{"lease over max", &driver.DeliveryClaimParams{Owner: "o", Handlers: []string{"h1"}, Limit: 1, LeaseDuration: driver.MaxLeaseDuration + time.Second, Now: T0}},
			{"zero now", &driver.DeliveryClaimParams{Owner: "o", Handlers: []string{"h1"}, Limit: 1, LeaseDuration: time.Second}},
		}
		for _, c := range cases {
			_, err := e.s.DeliveryClaim(e.ctx, c.p)
			requireInvalid(t, err, c.name)
		}
		_, err := e.s.DeliveryComplete(e.ctx, &driver.DeliveryCompleteParams{Lease: relaytype.Lease{DeliveryID: "1"}, Now: T0})
		requireInvalid(t, err, "complete without a token")
		_, err = e.s.DeliveryCompleteMany(e.ctx, &driver.DeliveryCompleteManyParams{Now: T0})
		requireInvalid(t, err, "complete many without leases")
		_, err = e.s.DeliveryReschedule(e.ctx, &driver.DeliveryRescheduleParams{Lease: relaytype.Lease{DeliveryID: "1", Token: "t"}, Now: T0})
		requireInvalid(t, err, "reschedule without an available time")
		st := e.stats(T0)
		require.Equal(t, int64(1), st.Pending, "a rejected call changed the delivery")
	})

	t.Run("MalformedTokensWriteNothing", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.publishN(2, nil)
		ds := e.claim(nil)
		require.Len(t, ds, 2)
		now := At(time.Second)
		for _, tok := range malformedTokens {
			bad := relaytype.Lease{DeliveryID: ds[0].ID, Token: tok}
			_, err := e.s.DeliveryComplete(e.ctx, &driver.DeliveryCompleteParams{Lease: bad, Now: now})
			requireInvalid(t, err, "complete with token "+tok)
			// One bad lease fails the whole call: the good one is not
			// completed either.
			_, err = e.s.DeliveryCompleteMany(e.ctx, &driver.DeliveryCompleteManyParams{Leases: []relaytype.Lease{ds[1].Lease(), bad}, Now: now})
			requireInvalid(t, err, "complete many with token "+tok)
			_, err = e.s.DeliveryReschedule(e.ctx, &driver.DeliveryRescheduleParams{Lease: bad, AvailableAt: At(time.Hour), Now: now})
			requireInvalid(t, err, "reschedule with token "+tok)
			_, err = e.s.DeliveryBury(e.ctx, &driver.DeliveryBuryParams{Lease: bad, Now: now})
			requireInvalid(t, err, "bury with token "+tok)
			_, err = e.s.DeliveryRelease(e.ctx, &driver.DeliveryReleaseParams{Lease: bad, Now: now})
			requireInvalid(t, err, "release with token "+tok)
			_, err = e.s.LeaseExtend(e.ctx, &driver.LeaseExtendParams{Owner: "owner-a", Leases: []relaytype.Lease{ds[1].Lease(), bad}, ExpiresAt: At(time.Hour), Now: now})
			requireInvalid(t, err, "extend with token "+tok)
			tx := e.begin()
			_, err = e.s.DeliveryCompleteTx(e.ctx, tx, &driver.DeliveryCompleteParams{Lease: bad, Now: now})
			requireInvalid(t, err, "complete in a transaction with token "+tok)
			require.NoError(t, e.s.TxRollback(e.ctx, tx))
		}
		for _, d := range ds {
			got := e.get(d)
			require.Equal(t, relaytype.StatusProcessing, got.Status, "a rejected call changed delivery %s", d.ID)
			require.Equal(t, d.LeaseToken, got.LeaseToken)
			require.Equal(t, 1, got.Attempts)
			require.Empty(t, got.LastError)
			requireTime(t, d.LeaseExpiresAt, got.LeaseExpiresAt, "a rejected extend moved the lease of %s", d.ID)
		}
		require.Equal(t, []bool{true, true}, e.completeMany(now, leases(ds)...), "the leases survived the rejected calls")
	})

	t.Run("Complete", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.publish(nil)
		d := e.claimOne(nil)
		require.True(t, e.complete(d.Lease(), At(2*time.Second)))
		e.requireCompleted(d, At(2*time.Second))
		require.False(t, e.complete(d.Lease(), At(3*time.Second)), "a second completion under the same lease")
		e.requireCompleted(d, At(2*time.Second))
		e.claimNone(&claimOpts{Now: Ptr(At(time.Hour))}, "claimed a completed delivery")

		st := e.stats(At(time.Hour))
		require.Equal(t, relaytype.Counts{Completed: e.completedCount(1)}, st.Counts)
	})

	t.Run("CompleteMany", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.publishN(4, nil)
		ds := e.claim(nil)
		require.Len(t, ds, 4)
		require.True(t, e.complete(ds[3].Lease(), At(time.Second)))
		bogus := staleToken(t, ds[1])
		ok, err := e.s.DeliveryCompleteMany(e.ctx, &driver.DeliveryCompleteManyParams{
			Leases: []relaytype.Lease{ds[0].Lease(), bogus, ds[2].Lease(), ds[3].Lease()},
			Now:    At(2 * time.Second),
		})
		require.NoError(t, err)
		require.Equal(t, []bool{true, false, true, false}, ok)
		e.requireCompleted(ds[0], At(2*time.Second))
		e.requireCompleted(ds[2], At(2*time.Second))
		e.requireCompleted(ds[3], At(time.Second))
		got := e.get(ds[1])
		require.Equal(t, relaytype.StatusProcessing, got.Status, "a bogus token completed a delivery")
		require.True(t, e.complete(ds[1].Lease(), At(3*time.Second)))
	})

	t.Run("CompleteTxCommitted", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.publish(nil)
		d := e.claimOne(nil)
		tx := e.begin()
		ok, err := e.s.DeliveryCompleteTx(e.ctx, tx, &driver.DeliveryCompleteParams{Lease: d.Lease(), Now: At(time.Second)})
		require.NoError(t, err)
		require.True(t, ok)
		require.NoError(t, e.s.TxCommit(e.ctx, tx))
		e.requireCompleted(d, At(time.Second))
		require.False(t, e.complete(d.Lease(), At(2*time.Second)))
	})

	t.Run("CompleteTxRolledBack", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.publish(nil)
		d := e.claimOne(nil)
		tx := e.begin()
		ok, err := e.s.DeliveryCompleteTx(e.ctx, tx, &driver.DeliveryCompleteParams{Lease: d.Lease(), Now: At(time.Second)})
		require.NoError(t, err)
		require.True(t, ok)
		require.NoError(t, e.s.TxRollback(e.ctx, tx))

		got := e.get(d)
		require.Equal(t, relaytype.StatusProcessing, got.Status, "a rolled back completion completed")
		require.Equal(t, d.LeaseToken, got.LeaseToken)
		require.True(t, got.CompletedAt.IsZero())
		require.True(t, e.complete(d.Lease(), At(2*time.Second)), "the lease did not survive a rolled back completion")
		e.requireCompleted(d, At(2*time.Second))
	})

	t.Run("CompleteTxWithPublish", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.publish(nil)
		d := e.claimOne(nil)
		// A transactional handler publishes a follow-up event and completes
		// in one transaction: both commit together.
		tx := e.begin()
		follow := (&eventOpts{Handlers: []string{"h2"}}).publish()
		_, err := e.s.EventPublishTx(e.ctx, tx, &driver.EventPublishParams{Events: []*driver.EventPublish{follow}, Now: At(time.Second)})
		require.NoError(t, err)
		ok, err := e.s.DeliveryCompleteTx(e.ctx, tx, &driver.DeliveryCompleteParams{Lease: d.Lease(), Now: At(time.Second)})
		require.NoError(t, err)
		require.True(t, ok)
		require.NoError(t, e.s.TxCommit(e.ctx, tx))
		e.requireCompleted(d, At(time.Second))
		got := e.claimOne(&claimOpts{Handlers: []string{"h2"}, Now: Ptr(At(time.Second))})
		require.Equal(t, follow.Event.ID, got.EventID)
	})

	t.Run("CompleteTxAgainstTakeover", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		testCompleteTxAgainstTakeover(t, e)
	})

	t.Run("CompleteAgainstTakeover", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		testCompleteAgainstTakeover(t, e)
	})

	t.Run("HandsBackDrainedLanes", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		first, _ := e.publish(&eventOpts{Lane: Ptr(7)})
		d := e.claimOne(nil) // owner-a holds lane 7 until T0+30s
		require.Equal(t, first.ID, d.EventID)
		require.True(t, e.complete(d.Lease(), At(time.Second)))
		// While owner-a holds the lane, owner-b does not see what comes
		// into it.
		second, _ := e.publish(&eventOpts{Lane: Ptr(7), Now: Ptr(At(2 * time.Second))})
		e.claimNone(&claimOpts{Owner: Ptr("owner-b"), Now: Ptr(At(3 * time.Second))}, "claimed from a lane another owner holds")
		// owner-a's next claim picks it up from the lane it holds...
		d2 := e.claimOne(&claimOpts{Now: Ptr(At(4 * time.Second))})
		require.Equal(t, second.ID, d2.EventID)
		require.True(t, e.complete(d2.Lease(), At(5*time.Second)))
		// ...and the claim after that, finding the lane drained, hands it
		// back: the next delivery of the lane goes to owner-b at once,
		// long before owner-a's lease would have expired.
		e.claimNone(&claimOpts{Now: Ptr(At(6 * time.Second))})
		third, _ := e.publish(&eventOpts{Lane: Ptr(7), Now: Ptr(At(7 * time.Second))})
		got := e.claimOne(&claimOpts{Owner: Ptr("owner-b"), Now: Ptr(At(8 * time.Second))})
		require.Equal(t, third.ID, got.EventID)
		require.Equal(t, 1, got.Attempts)
		require.False(t, got.Suspect, "a lane handed back is not a takeover")
	})

	t.Run("CompleteTxStaleLease", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.publish(nil)
		d := e.claimOne(nil)
		tx := e.begin()
		ok, err := e.s.DeliveryCompleteTx(e.ctx, tx, &driver.DeliveryCompleteParams{
			Lease: staleToken(t, d),
			Now:   At(time.Second),
		})
		require.NoError(t, err)
		require.False(t, ok, "completed in a transaction with a wrong token")
		require.NoError(t, e.s.TxRollback(e.ctx, tx))
		require.Equal(t, relaytype.StatusProcessing, e.get(d).Status)
	})
}

// testCompleteTxAgainstTakeover completes a delivery in a transaction
// while its lease expires and another owner claims it. A store may skip
// or block the takeover until the transaction ends (PostgreSQL's FOR KEY
// SHARE on the lane against the takeover's FOR UPDATE SKIP LOCKED; the
// memory store's lane lock), or let it win and fail the commit: either
// way the completion and the takeover must not both win.
func testCompleteTxAgainstTakeover[TTx any](t *testing.T, e *env[TTx]) {
	e.publish(nil)
	d := e.claimOne(nil) // expires at T0+30s
	ctx, cancel := context.WithTimeout(e.ctx, 2*unblockWait)
	defer cancel()
	tx := e.begin()
	ok, err := e.s.DeliveryCompleteTx(ctx, tx, &driver.DeliveryCompleteParams{Lease: d.Lease(), Now: At(29 * time.Second)})
	require.NoError(t, err)
	require.True(t, ok)

	type outcome struct {
		ds  []*relaytype.Delivery
		err error
	}
	claimed := make(chan outcome, 1)
	go func() {
		ds, err := e.s.DeliveryClaim(ctx, (&claimOpts{Owner: Ptr("owner-b"), Now: Ptr(At(31 * time.Second))}).params())
		claimed <- outcome{ds, err}
	}()
	var o outcome
	returned := false
	select {
	case o = <-claimed:
		returned = true
	case <-time.After(blockWait):
		// Blocked (or slow): it must finish once tx ends.
	}
	commitErr := e.s.TxCommit(ctx, tx)
	if commitErr != nil {
		_ = e.s.TxRollback(ctx, tx)
	}
	if !returned {
		select {
		case o = <-claimed:
		case <-time.After(unblockWait):
			require.FailNow(t, "the takeover is still blocked after the transaction ended")
		}
	}
	require.NoError(t, o.err, "takeover claim")
	require.LessOrEqual(t, len(o.ds), 1)
	if commitErr == nil {
		require.Empty(t, o.ds, "the transaction completed the delivery and a takeover claimed it: both won")
		e.requireCompleted(d, At(29*time.Second))
		return
	}
	require.Len(t, o.ds, 1, "the commit failed (%v) but no takeover won", commitErr)
	got := e.get(d)
	require.Equal(t, relaytype.StatusProcessing, got.Status, "the failed commit completed the delivery")
	require.Equal(t, o.ds[0].LeaseToken, got.LeaseToken)
	require.Equal(t, 2, got.Attempts)
}

// completeTakeoverRounds is how many times testCompleteAgainstTakeover
// races a completion against a takeover.
const completeTakeoverRounds = 20

// testCompleteAgainstTakeover races a plain completion under an expired
// lease (the old holder finishing late) against another owner's claim
// that takes the lane over, many times, each round on a delivery of its
// own. Whatever the interleaving, exactly one of them may win: the
// completion reports true and the takeover claims nothing, or the
// completion reports false and the takeover runs the delivery again with
// its lost attempt charged.
func testCompleteAgainstTakeover[TTx any](t *testing.T, e *env[TTx]) {
	for round := range completeTakeoverRounds {
		base := time.Duration(round) * time.Hour
		e.publish(&eventOpts{Now: Ptr(At(base))})
		d := e.claimOne(&claimOpts{Now: Ptr(At(base))}) // expires at base+30s
		start := make(chan struct{})
		var completed bool
		var completeErr error
		done := make(chan struct{})
		go func() {
			defer close(done)
			<-start
			completed, completeErr = e.s.DeliveryComplete(e.ctx, &driver.DeliveryCompleteParams{Lease: d.Lease(), Now: At(base + 31*time.Second)})
		}()
		close(start)
		taken, claimErr := e.s.DeliveryClaim(e.ctx, (&claimOpts{Owner: Ptr("owner-b"), Now: Ptr(At(base + 31*time.Second))}).params())
		<-done
		require.NoError(t, completeErr, "round %d: complete", round)
		require.NoError(t, claimErr, "round %d: takeover claim", round)
		if completed {
			require.Empty(t, taken, "round %d: the completion and the takeover both won", round)
			e.requireCompleted(d, At(base+31*time.Second))
			continue
		}
		require.Len(t, taken, 1, "round %d: the completion lost, but no takeover won", round)
		require.Equal(t, d.ID, taken[0].ID)
		require.Equal(t, 2, taken[0].Attempts, "round %d: the lost attempt is charged", round)
		require.True(t, taken[0].Suspect, "round %d: a taken-over delivery is a suspect", round)
		require.True(t, e.complete(taken[0].Lease(), At(base+32*time.Second)), "round %d", round)
	}
}
