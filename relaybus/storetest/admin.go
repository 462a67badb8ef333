package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

func testAdmin[TTx any](t *testing.T, newEnv func(*testing.T) *env[TTx]) {
	requeue := func(e *env[TTx], id string, now time.Time) error {
		e.t.Helper()
		return e.s.DeliveryRequeue(e.ctx, &driver.DeliveryRequeueParams{DeliveryID: id, Now: now})
	}

	t.Run("Requeue", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.publish(&eventOpts{MaxAttempts: Ptr(1)})
		d := e.claimOne(nil)
		require.True(t, e.bury(d.Lease(), At(time.Second), "poison"))

		require.NoError(t, requeue(e, d.ID, At(10*time.Second)))
		got := e.get(d)
		require.Equal(t, relaytype.StatusPending, got.Status)
		require.Equal(t, 0, got.Attempts, "a requeue gives a fresh budget")
		requireTime(t, At(10*time.Second), got.AvailableAt, "due at the requeue's now")
		require.Empty(t, got.LeaseToken)

		e.claimNone(&claimOpts{Now: Ptr(At(9 * time.Second))}, "claimed a requeued delivery before its time")
		again := e.claimOne(&claimOpts{Now: Ptr(At(10 * time.Second))})
		require.Equal(t, d.ID, again.ID)
		require.Equal(t, 1, again.Attempts)

		// The fresh budget is the same budget: a crash spends it. The
		// delivery was no suspect, so it runs once more, alone (it may
		// have run beside the crasher), and its next crash buries it.
		last := e.claimOne(&claimOpts{Owner: Ptr("owner-b"), Now: Ptr(At(41 * time.Second))})
		require.True(t, last.Suspect)
		require.Equal(t, 2, last.Attempts)
		e.claimNone(&claimOpts{Owner: Ptr("owner-c"), Now: Ptr(At(72 * time.Second))}, "a requeued delivery outlived its budget")
		require.Equal(t, relaytype.StatusDead, e.get(d).Status)
	})

	t.Run("RequeueNotDead", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.publishN(2, nil)
		held := e.claimOne(&claimOpts{Limit: Ptr(1)})
		pending := e.list(driver.DeliveryListParams{Status: relaytype.StatusPending})
		require.Len(t, pending, 1)

		err := requeue(e, pending[0].ID, At(time.Second))
		require.True(t, errors.Is(err, relaytype.ErrNotDead), "requeue of a pending delivery: %v", err)
		err = requeue(e, held.ID, At(time.Second))
		require.True(t, errors.Is(err, relaytype.ErrNotDead), "requeue of a processing delivery: %v", err)
		require.Equal(t, held.LeaseToken, e.get(held).LeaseToken, "a failed requeue changed the delivery")

		require.True(t, e.complete(held.Lease(), At(2*time.Second)))
		err = requeue(e, held.ID, At(3*time.Second))
		if !e.opts.KeepsCompleted {
			require.True(t, errors.Is(err, relaytype.ErrNotFound), "requeue of a deleted delivery: %v", err)
		} else {
			require.True(t, errors.Is(err, relaytype.ErrNotDead), "requeue of a completed delivery: %v", err)
		}
	})

	t.Run("RequeueNotFound", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		// A real ID that no longer exists: the suite never makes one up,
		// so it works whatever the store's ID format.
		e.publish(nil)
		d := e.claimOne(nil)
		require.True(t, e.bury(d.Lease(), At(time.Second), "dead"))
		res, err := e.s.Purge(e.ctx, &driver.PurgeParams{DeadBefore: At(time.Minute), Now: At(time.Minute)})
		require.NoError(t, err)
		require.Equal(t, int64(1), res.Deliveries)
		err = requeue(e, d.ID, At(time.Minute))
		require.True(t, errors.Is(err, relaytype.ErrNotFound), "requeue of a purged delivery: %v", err)

		err = requeue(e, "", At(time.Minute))
		requireInvalid(t, err, "requeue without an id")
	})

	t.Run("Purge", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		// Each event has its own handler, so each delivery is claimed on
		// its own. Cutoff for both kinds: T0+50s.
		type planned struct {
			handlers    []string
			publishedAt time.Duration
		}
		plan := map[string]planned{
			"completedOld": {[]string{"completedOld"}, 0},
			"completedNew": {[]string{"completedNew"}, 60 * time.Second},
			"deadOld":      {[]string{"deadOld"}, 0},
			"deadNew":      {[]string{"deadNew"}, 0},
			"pending":      {[]string{"pending"}, 0},
			"processing":   {[]string{"processing"}, 0},
			"mixed":        {[]string{"completedOldToo", "mixedPending"}, 0},
		}
		evs := map[string]*relaytype.Event{}
		for name, p := range plan {
			evs[name], _ = e.publish(&eventOpts{Handlers: p.handlers, Now: Ptr(At(p.publishedAt))})
		}
		finish := func(handler string, at time.Duration, ok func(relaytype.Lease, time.Time) bool) *relaytype.Delivery {
			d := e.claimOne(&claimOpts{Handlers: []string{handler}, Now: Ptr(At(at))})
			require.True(t, ok(d.Lease(), At(at)), handler)
			return d
		}
		complete := e.complete
		bury := func(l relaytype.Lease, now time.Time) bool { return e.bury(l, now, "dead") }
		finish("completedOld", 10*time.Second, complete)
		finish("completedOldToo", 10*time.Second, complete)
		finish("completedNew", 100*time.Second, complete)
		finish("deadOld", 10*time.Second, bury)
		finish("deadNew", 100*time.Second, bury)
		e.claimOne(&claimOpts{Handlers: []string{"processing"}, Now: Ptr(At(100 * time.Second))})

		res, err := e.s.Purge(e.ctx, &driver.PurgeParams{CompletedBefore: At(50 * time.Second), DeadBefore: At(50 * time.Second), Now: At(200 * time.Second)})
		require.NoError(t, err)
		var kept []string
		for _, d := range e.list(driver.DeliveryListParams{}) {
			kept = append(kept, d.Handler)
		}
		if !e.opts.KeepsCompleted {
			require.Equal(t, int64(1), res.Deliveries, "deadOld")
			require.ElementsMatch(t, []string{"deadNew", "pending", "processing", "mixedPending"}, kept)
			// completedNew's event has no delivery left either; whether it
			// is old enough to go is the store's retention rule.
			require.Contains(t, []int64{2, 3}, res.Events, "events of completedOld and deadOld")
		} else {
			require.Equal(t, int64(3), res.Deliveries, "completedOld, completedOldToo, deadOld")
			require.ElementsMatch(t, []string{"completedNew", "deadNew", "pending", "processing", "mixedPending"}, kept)
			require.Equal(t, int64(2), res.Events, "events of completedOld and deadOld")
		}

		// A purged event is gone: publishing its ID inserts it again. The
		// mixed event still has a delivery, so it stays.
		for name, wantInserted := range map[string]bool{"completedOld": true, "deadOld": true, "mixed": false, "deadNew": false} {
			_, r := e.publish(&eventOpts{ID: &evs[name].ID, Handlers: plan[name].handlers, Now: Ptr(At(300 * time.Second))})
			require.Equal(t, []bool{wantInserted}, r.Inserted, "republish of %s", name)
		}
	})

	t.Run("PurgeKeepsEventsWhileCompletedAreKept", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		// Completed ones kept forever (CompletedBefore zero), dead ones
		// purged: the events must stay, since with delete on complete an
		// event is what keeps a republish from running a completed
		// handler again (a purge by the dead cutoff alone would delete
		// it, and the republished event would run that handler twice).
		done, _ := e.publish(&eventOpts{Handlers: []string{"done"}})
		mixed, _ := e.publish(&eventOpts{Handlers: []string{"mixedDone", "mixedDead"}})
		dead, _ := e.publish(&eventOpts{Handlers: []string{"dead"}})
		finish := func(handler string, ok func(relaytype.Lease, time.Time) bool) {
			d := e.claimOne(&claimOpts{Handlers: []string{handler}, Now: Ptr(At(10 * time.Second))})
			require.True(t, ok(d.Lease(), At(10*time.Second)), handler)
		}
		bury := func(l relaytype.Lease, now time.Time) bool { return e.bury(l, now, "dead") }
		finish("done", e.complete)
		finish("mixedDone", e.complete)
		finish("mixedDead", bury)
		finish("dead", bury)

		res, err := e.s.Purge(e.ctx, &driver.PurgeParams{DeadBefore: At(time.Hour), Now: At(time.Hour)})
		require.NoError(t, err)
		require.Equal(t, int64(2), res.Deliveries, "the two dead deliveries")
		require.Zero(t, res.Events, "an event was purged while completed deliveries are kept forever")
		for name, ev := range map[string]struct {
			ev       *relaytype.Event
			handlers []string
		}{"done": {done, []string{"done"}}, "mixed": {mixed, []string{"mixedDone", "mixedDead"}}, "dead": {dead, []string{"dead"}}} {
			_, r := e.publish(&eventOpts{ID: &ev.ev.ID, Handlers: ev.handlers, Now: Ptr(At(2 * time.Hour))})
			require.Equal(t, []bool{false}, r.Inserted, "republish of %s after the purge", name)
		}
		e.claimNone(&claimOpts{Handlers: []string{"done", "mixedDone"}, Now: Ptr(At(2 * time.Hour))},
			"a completed handler got a delivery again after a purge of dead ones")
	})

	t.Run("PurgeLimit", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.publishN(5, nil)
		for _, d := range e.claim(nil) {
			require.True(t, e.bury(d.Lease(), At(time.Second), "dead"))
		}
		p := &driver.PurgeParams{DeadBefore: At(time.Minute), Limit: 2, Now: At(time.Minute)}
		for _, want := range []int64{2, 2, 1, 0} {
			res, err := e.s.Purge(e.ctx, p)
			require.NoError(t, err)
			require.Equal(t, want, res.Deliveries)
		}
		require.Empty(t, e.list(driver.DeliveryListParams{}))
	})

	t.Run("PurgeNothing", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.publish(nil)
		d := e.claimOne(nil)
		require.True(t, e.bury(d.Lease(), At(time.Second), "dead"))
		res, err := e.s.Purge(e.ctx, &driver.PurgeParams{Now: At(time.Hour)})
		require.NoError(t, err)
		require.Equal(t, driver.PurgeResult{}, *res, "zero cutoffs purge nothing")
		res, err = e.s.Purge(e.ctx, &driver.PurgeParams{DeadBefore: At(time.Second), Now: At(time.Hour)})
		require.NoError(t, err)
		require.Zero(t, res.Deliveries, "the cutoff is exclusive")
		require.Len(t, e.list(driver.DeliveryListParams{}), 1)

		_, err = e.s.Purge(e.ctx, &driver.PurgeParams{Limit: -1, Now: At(time.Hour)})
		requireInvalid(t, err, "negative purge limit")
	})
}
