package postgres_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/postgres"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

// counterEvents are n events of ids prefix-0.., each with a delivery
// for every handler; every other one keyed over 7 keys.
func counterEvents(prefix string, n int, handlers ...string) []*driver.EventPublish {
	return counterEventsKeyed(prefix, n, true, handlers...)
}

// counterEventsKeyed is counterEvents, unkeyed unless keyed.
func counterEventsKeyed(prefix string, n int, keyed bool, handlers ...string) []*driver.EventPublish {
	eps := make([]*driver.EventPublish, n)
	for i := range eps {
		e := &relaytype.Event{ID: fmt.Sprintf("%s-%d", prefix, i), Type: "t", Payload: []byte("{}")}
		if keyed && i%2 == 1 {
			e.Key = fmt.Sprintf("k%d", i%7)
		}
		specs := make([]driver.DeliverySpec, len(handlers))
		for j, h := range handlers {
			specs[j] = driver.DeliverySpec{Handler: h, MaxAttempts: 1}
		}
		eps[i] = &driver.EventPublish{Event: e, Deliveries: specs}
	}
	return eps
}

// requireCountsAgree checks that the counted and the scanned statistics
// of one snapshot agree, and returns them.
func requireCountsAgree(t *testing.T, s *postgres.Store, now time.Time) *relaytype.Statistics {
	t.Helper()
	on, err := s.StatisticsCountersEnabled(t.Context())
	require.NoError(t, err)
	require.True(t, on, "statistics counters are off")
	counted, scanned, err := s.StatisticsBoth(t.Context(), &driver.StatisticsParams{Now: now})
	require.NoError(t, err)
	require.Equal(t, scanned, counted)
	return counted
}

// TestStatisticsCountersLifecycle: enabled on a backlog, the counters
// start exact; they follow claims, completions, failures that bury,
// requeues, purges and truncation; disabled, Statistics scans again
// and nothing of them is left.
func TestStatisticsCountersLifecycle(t *testing.T) {
	t.Parallel()
	s, pool := setup(t, &postgres.Options{CompletionHistory: true})
	ctx := t.Context()
	on, err := s.StatisticsCountersEnabled(ctx)
	require.NoError(t, err)
	require.False(t, on)

	publish(t, s, pool, counterEvents("before", 40, "a", "b"))
	require.NoError(t, s.EnableStatisticsCounters(ctx))
	st := requireCountsAgree(t, s, t0)
	require.EqualValues(t, 80, st.Pending)
	// Enabling again counts again, and changes nothing; so does Setup.
	require.NoError(t, s.EnableStatisticsCounters(ctx))
	requireCountsAgree(t, s, t0)
	require.NoError(t, s.Setup(ctx))
	requireCountsAgree(t, s, t0)

	publish(t, s, pool, counterEvents("after", 30, "a", "b", "c"))
	now := t0.Add(time.Second)
	ds := claim(t, s, "w", 60, now, "a", "b", "c")
	require.NotEmpty(t, ds)
	st = requireCountsAgree(t, s, now)
	require.EqualValues(t, len(ds), st.Processing)

	// Complete a half, bury a third, reschedule the rest (an update that
	// changes no status).
	var done []relaytype.Lease
	for i, d := range ds {
		lease := relaytype.Lease{DeliveryID: d.ID, Token: d.LeaseToken}
		switch i % 3 {
		case 0, 1:
			if i%2 == 0 {
				done = append(done, lease)
				continue
			}
			ok, err := s.DeliveryBury(ctx, &driver.DeliveryBuryParams{Lease: lease, Error: "boom", Now: now})
			require.NoError(t, err)
			require.True(t, ok)
		default:
			ok, err := s.DeliveryReschedule(ctx, &driver.DeliveryRescheduleParams{Lease: lease, Error: "again", AvailableAt: now.Add(time.Minute), Now: now})
			require.NoError(t, err)
			require.True(t, ok)
		}
	}
	_, err = s.DeliveryCompleteMany(ctx, &driver.DeliveryCompleteManyParams{Leases: done, Now: now})
	require.NoError(t, err)
	st = requireCountsAgree(t, s, now)
	require.EqualValues(t, len(done), st.Completed)
	require.NotZero(t, st.Dead)

	// Requeue one dead delivery; purge the other dead ones and the history.
	list, err := s.DeliveryList(ctx, &driver.DeliveryListParams{Status: relaytype.StatusDead, Limit: 1})
	require.NoError(t, err)
	require.Len(t, list.Deliveries, 1)
	require.NoError(t, s.DeliveryRequeue(ctx, &driver.DeliveryRequeueParams{DeliveryID: list.Deliveries[0].ID, Now: now}))
	requireCountsAgree(t, s, now)
	later := now.Add(time.Hour)
	_, err = s.Purge(ctx, &driver.PurgeParams{DeadBefore: later, CompletedBefore: later, Now: later})
	require.NoError(t, err)
	st = requireCountsAgree(t, s, later)
	require.Zero(t, st.Dead)
	require.Zero(t, st.Completed)

	// TRUNCATE (by hand: relaybus never truncates) empties the counts.
	_, err = pool.Exec(ctx, `TRUNCATE public.relaybus_history, public.relaybus_deliveries`)
	require.NoError(t, err)
	st = requireCountsAgree(t, s, later)
	require.Zero(t, st.Pending+st.Processing+st.Dead+st.Completed)

	require.NoError(t, s.DisableStatisticsCounters(ctx))
	require.NoError(t, s.DisableStatisticsCounters(ctx))
	on, err = s.StatisticsCountersEnabled(ctx)
	require.NoError(t, err)
	require.False(t, on)
	var left int
	require.NoError(t, pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname = 'public' AND c.relname IN ('relaybus_counts', 'relaybus_deliveries_pending_due_idx'))
		+ (SELECT count(*) FROM pg_trigger WHERE tgname LIKE 'relaybus_count%')
		+ (SELECT count(*) FROM pg_proc WHERE proname LIKE 'relaybus_count%')`).Scan(&left))
	require.Zero(t, left, "objects of the counters left after DisableStatisticsCounters")
	publish(t, s, pool, counterEvents("off", 3, "a"))
	st, err = s.Statistics(ctx, &driver.StatisticsParams{Now: later})
	require.NoError(t, err)
	require.EqualValues(t, 3, st.Pending)
}

// TestStatisticsCountersWhileWriting: counters enabled while publishers
// and a claimer run are exact once they stop: every write committed
// before the install's lock is in its count, every one after runs the
// triggers.
func TestStatisticsCountersWhileWriting(t *testing.T) {
	t.Parallel()
	s, pool := setup(t, nil)
	ctx := t.Context()
	publish(t, s, pool, counterEvents("seed", 200, "a", "b"))

	var stop atomic.Bool
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for w := range 3 {
		wg.Go(func() {
			for i := 0; !stop.Load(); i++ {
				_, err := s.EventPublish(ctx, &driver.EventPublishParams{
					Events: counterEvents(fmt.Sprintf("w%d-%d", w, i), 5, "a", "b"), Now: t0})
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Go(func() {
		for !stop.Load() {
			ds, err := s.DeliveryClaim(ctx, &driver.DeliveryClaimParams{
				Owner: "w", Handlers: []string{"a", "b"}, Limit: 20, LeaseDuration: time.Minute, Now: t0})
			if err != nil {
				errs <- err
				return
			}
			done := make([]relaytype.Lease, len(ds))
			for i, d := range ds {
				done[i] = relaytype.Lease{DeliveryID: d.ID, Token: d.LeaseToken}
			}
			if len(done) == 0 {
				continue
			}
			if _, err := s.DeliveryCompleteMany(ctx, &driver.DeliveryCompleteManyParams{Leases: done, Now: t0}); err != nil {
				errs <- err
				return
			}
		}
	})
	time.Sleep(300 * time.Millisecond)
	require.NoError(t, s.EnableStatisticsCounters(ctx))
	time.Sleep(300 * time.Millisecond)
	stop.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	requireCountsAgree(t, s, t0)
}

// TestStatisticsCountersDoNotSerializePublishers: a publish of a handler
// inside a transaction that stays open does not keep another publish of
// the same handler waiting for its commit: each inserts a counter row of
// its own. Unkeyed events: a key's
// counter row (the keys table) does serialize the publishes of one key,
// with counters or without.
func TestStatisticsCountersDoNotSerializePublishers(t *testing.T) {
	t.Parallel()
	s, pool := setup(t, nil)
	ctx := t.Context()
	require.NoError(t, s.EnableStatisticsCounters(ctx))
	tx, err := s.TxBegin(ctx)
	require.NoError(t, err)
	defer func() { _ = s.TxRollback(context.Background(), tx) }()
	_, err = s.EventPublishTx(ctx, tx, &driver.EventPublishParams{Events: counterEventsKeyed("open", 2, false, "a"), Now: t0})
	require.NoError(t, err)

	waitCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err = s.EventPublish(waitCtx, &driver.EventPublishParams{Events: counterEventsKeyed("other", 2, false, "a"), Now: t0})
	require.NoError(t, err, "the second publish waited for the open transaction")
	requireCountsAgree(t, s, t0)
	require.NoError(t, s.TxCommit(ctx, tx))
	st := requireCountsAgree(t, s, t0)
	require.EqualValues(t, 4, st.Pending)
	var rows int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM public.relaybus_counts WHERE handler = 'a' AND status = 'pending'`).Scan(&rows))
	require.Equal(t, 2, rows, "a counter row per writing statement")
}

// TestStatisticsCountersFold: every 256th counter row folds the rows of
// its (handler, status) into one, so a handler's rows stay a few hundred
// however many statements wrote them, and the counts stay exact.
func TestStatisticsCountersFold(t *testing.T) {
	t.Parallel()
	s, pool := setup(t, nil)
	ctx := t.Context()
	require.NoError(t, s.EnableStatisticsCounters(ctx))
	const calls = 1_000
	for i := range calls {
		_, err := s.EventPublish(ctx, &driver.EventPublishParams{Events: counterEventsKeyed(fmt.Sprintf("f%d", i), 1, false, "a"), Now: t0})
		require.NoError(t, err)
	}
	st := requireCountsAgree(t, s, t0)
	require.EqualValues(t, calls, st.Pending)
	var rows int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM public.relaybus_counts WHERE handler = 'a' AND status = 'pending'`).Scan(&rows))
	require.Less(t, rows, 300, "the rows were not folded")
}
