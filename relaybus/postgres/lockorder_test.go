package postgres_test

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/berkcansavur/relaybus/relaybus"
)

// isDeadlock reports whether err is PostgreSQL's deadlock_detected (40P01).
func isDeadlock(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "40P01"
}

// TestRenewalAndCompletionDoNotDeadlock runs lease renewals beside a
// completion of the same claimed deliveries, round after round, with the
// completion's leases in the reverse order: the pattern of a
// dispatcher renewing its leases while its completer completes a batch.
// Both statements must lock the rows in one order, so neither may ever be
// chosen as a deadlock victim (40P01), and every completion must succeed
// (a renewal leaves the token alone). In 0.1.0 most rounds deadlocked.
func TestRenewalAndCompletionDoNotDeadlock(t *testing.T) {
	t.Parallel()
	s, pool := setup(t, nil)
	const rounds, perRound = 12, 100
	deadlocks := 0
	for round := range rounds {
		eps := make([]*relaybus.EventPublish, perRound)
		for i := range eps {
			eps[i] = &relaybus.EventPublish{
				Event:      &relaybus.Event{ID: fmt.Sprintf("r%02d-e%03d", round, i), Type: "t"},
				Deliveries: []relaybus.DeliverySpec{{Handler: "h", MaxAttempts: 3}},
			}
		}
		publish(t, s, pool, eps)
		now := t0.Add(time.Duration(round+1) * time.Minute)
		ds := claim(t, s, "w", perRound, now, "h")
		require.Len(t, ds, perRound)
		leases := make([]relaybus.Lease, len(ds))
		for i, d := range ds {
			leases[i] = d.Lease()
		}
		reversed := slices.Clone(leases)
		slices.Reverse(reversed)

		// Renewals run back to back until the completion has returned, so
		// that the completion overlaps one of them however the two
		// goroutines are scheduled.
		var extendErr, completeErr error
		var completed []bool
		completing := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			for extendErr == nil {
				_, extendErr = s.LeaseExtend(t.Context(), &relaybus.LeaseExtendParams{
					Owner: "w", Leases: leases, ExpiresAt: now.Add(2 * time.Minute), Now: now})
				select {
				case <-completing:
					return
				default:
				}
			}
		})
		wg.Go(func() {
			defer close(completing)
			completed, completeErr = s.DeliveryCompleteMany(t.Context(), &relaybus.DeliveryCompleteManyParams{
				Leases: reversed, Now: now})
		})
		wg.Wait()
		if isDeadlock(extendErr) || isDeadlock(completeErr) {
			deadlocks++
			continue
		}
		require.NoError(t, extendErr, "round %d: extend", round)
		require.NoError(t, completeErr, "round %d: complete", round)
		for i, ok := range completed {
			require.True(t, ok, "round %d: completion of %s", round, reversed[i].DeliveryID)
		}
	}
	require.Zero(t, deadlocks, "rounds out of %d in which PostgreSQL broke a deadlock", rounds)
	st, err := s.Statistics(t.Context(), &relaybus.StatisticsParams{Now: t0})
	require.NoError(t, err)
	require.Equal(t, relaybus.Counts{Completed: rounds * perRound}, st.Counts)
}

// TestRelinquishBesideCompletionDoesNotDeadlock: an owner's relinquish (all
// its rows) beside a completion of some of them in descending order. Each
// completion either lands before the relinquish reaches the row or finds it
// released; neither statement is a deadlock victim.
func TestRelinquishBesideCompletionDoesNotDeadlock(t *testing.T) {
	t.Parallel()
	s, pool := setup(t, nil)
	const rounds, perRound = 12, 100
	for round := range rounds {
		eps := make([]*relaybus.EventPublish, perRound)
		for i := range eps {
			eps[i] = &relaybus.EventPublish{
				Event:      &relaybus.Event{ID: fmt.Sprintf("r%02d-e%03d", round, i), Type: "t"},
				Deliveries: []relaybus.DeliverySpec{{Handler: "h", MaxAttempts: 3}},
			}
		}
		publish(t, s, pool, eps)
		now := t0.Add(time.Duration(round+1) * time.Minute)
		ds := claim(t, s, "w", perRound, now, "h")
		require.Len(t, ds, perRound)
		reversed := make([]relaybus.Lease, len(ds))
		for i, d := range ds {
			reversed[len(ds)-1-i] = d.Lease()
		}
		var relinquishErr, completeErr error
		var released int
		var completed []bool
		start := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			<-start
			released, relinquishErr = s.OwnerRelinquish(t.Context(), &relaybus.OwnerRelinquishParams{Owner: "w", Now: now})
		})
		wg.Go(func() {
			<-start
			completed, completeErr = s.DeliveryCompleteMany(t.Context(), &relaybus.DeliveryCompleteManyParams{
				Leases: reversed, Now: now})
		})
		close(start)
		wg.Wait()
		require.False(t, isDeadlock(relinquishErr) || isDeadlock(completeErr), "round %d: deadlock: %v / %v", round, relinquishErr, completeErr)
		require.NoError(t, relinquishErr)
		require.NoError(t, completeErr)
		done := 0
		for _, ok := range completed {
			if ok {
				done++
			}
		}
		require.Equal(t, perRound, done+released, "round %d: every delivery either completed or released", round)
		// Leave nothing pending for the next round's claim.
		if released > 0 {
			ds := claim(t, s, "w", perRound, now, "h")
			require.Len(t, ds, released)
			ls := make([]relaybus.Lease, len(ds))
			for i, d := range ds {
				ls[i] = d.Lease()
			}
			oks, err := s.DeliveryCompleteMany(t.Context(), &relaybus.DeliveryCompleteManyParams{Leases: ls, Now: now})
			require.NoError(t, err)
			require.NotContains(t, oks, false)
		}
	}
}
