package postgres

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/berkcansavur/relaybus/internal/dbenv/dbtest"
	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

func tokenDelivery(t *testing.T, lane int, epoch, claims int64) *relaytype.Delivery {
	t.Helper()
	return &relaytype.Delivery{LeaseToken: driver.LaneToken{Lane: lane, Epoch: epoch, Claims: claims}.String()}
}

// TestLedgerCounts checks the ledger's own bookkeeping: picks per hold, a
// new epoch starting afresh, every uncertain outcome dropping the entry.
func TestLedgerCounts(t *testing.T) {
	var l ledger
	l.claimed([]*relaytype.Delivery{tokenDelivery(t, 3, 1, 1), tokenDelivery(t, 3, 1, 1), tokenDelivery(t, 7, 2, 1)})
	hints := func() map[int16][3]int64 {
		h := l.hints()
		out := map[int16][3]int64{}
		for i, lane := range h.lanes {
			out[lane] = [3]int64{h.epochs[i], int64(h.picks[i]), int64(h.outstanding[i])}
		}
		return out
	}
	require.Equal(t, map[int16][3]int64{3: {1, 2, 2}, 7: {2, 1, 1}}, hints())

	l.finished(driver.LaneToken{Lane: 3, Epoch: 1, Claims: 1}, true)
	require.Equal(t, [3]int64{1, 2, 1}, hints()[3], "one of lane 3's two finished")

	// A newer epoch of lane 3: the lane was taken again.
	l.claimed([]*relaytype.Delivery{tokenDelivery(t, 3, 4, 2)})
	require.Equal(t, [3]int64{4, 1, 1}, hints()[3])
	// A write under the old epoch says nothing of the new hold.
	l.finished(driver.LaneToken{Lane: 3, Epoch: 1, Claims: 1}, true)
	require.NotContains(t, hints(), int16(3), "a finish under another epoch drops the entry")

	// A fence that did not hold, or more finishes than picks.
	l.claimed([]*relaytype.Delivery{tokenDelivery(t, 5, 1, 1)})
	l.finished(driver.LaneToken{Lane: 5, Epoch: 1, Claims: 1}, false)
	require.NotContains(t, hints(), int16(5))
	l.finished(driver.LaneToken{Lane: 7, Epoch: 2, Claims: 1}, true)
	require.Equal(t, [3]int64{2, 1, 0}, hints()[7])
	l.finished(driver.LaneToken{Lane: 7, Epoch: 2, Claims: 1}, true)
	require.NotContains(t, hints(), int16(7), "a second finish of a hold of one")

	// An older epoch than the entry's cannot come from this instance.
	l.claimed([]*relaytype.Delivery{tokenDelivery(t, 9, 5, 1)})
	l.claimed([]*relaytype.Delivery{tokenDelivery(t, 9, 4, 1)})
	require.NotContains(t, hints(), int16(9))

	l.claimed([]*relaytype.Delivery{tokenDelivery(t, 1, 1, 1)})
	l.forget(driver.LaneToken{Lane: 1, Epoch: 1, Claims: 1})
	require.NotContains(t, hints(), int16(1))
	l.claimed([]*relaytype.Delivery{tokenDelivery(t, 2, 1, 1)})
	l.reset()
	require.Empty(t, hints())
}

// TestLedgerHintGuard checks claimOwn's use of a hint: trusted only when
// the lane's epoch and picks are the hint's. A hint that says nothing is
// in flight, with the lane's true epoch and picks, hands the lane back
// although its delivery is in flight (the trust the ledger earns by
// being exact, TestLedgerMatchesDatabase); the same hint with other picks
// is ignored and the probe keeps the lane.
func TestLedgerHintGuard(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, pool := ledgerStore(t)
	now := time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)
	publishN(t, s, pool, now, 1, "")
	ds, err := s.DeliveryClaim(ctx, &driver.DeliveryClaimParams{Owner: "w", Handlers: []string{"h"}, Limit: 10, LeaseDuration: time.Hour, Now: now})
	require.NoError(t, err)
	require.Len(t, ds, 1)
	tok, err := driver.ParseLaneToken(ds[0].LeaseToken)
	require.NoError(t, err)

	held := func(picks int32) bool {
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		_, err = tx.Exec(ctx, s.q.claimPrelude, 0)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, s.q.claimLock, "w", s.holder, now)
		require.NoError(t, err)
		rows, err := tx.Query(ctx, s.q.claimOwn, "w", s.holder, now, []string{"h"}, 10, false, now.Add(time.Hour), true,
			[]int16{int16(tok.Lane)}, []int64{tok.Epoch}, []int32{picks}, []int32{0}, []string{}, []int32{})
		require.NoError(t, err)
		rows.Close()
		require.NoError(t, rows.Err())
		var owner *string
		require.NoError(t, tx.QueryRow(ctx, "SELECT lease_owner FROM relaybus_lanes WHERE lane = $1", tok.Lane).Scan(&owner))
		return owner != nil
	}
	require.True(t, held(2), "a hint whose picks are not the lane's is ignored: the probe finds the delivery in flight")
	require.False(t, held(1), "a hint that matches the lane is trusted")
}

// TestLedgerMatchesDatabase checks what makes the ledger's hints safe:
// whenever an entry's epoch and picks are those of a lane the instance
// holds, its count of unfinished deliveries is exactly the number of the
// lane's in_flight ids that are still pending, after any sequence of
// claims, completions (batched, in a committed or rolled-back
// transaction, under a stale token), reschedules, burials, releases,
// relinquishes, and takeovers by another instance once leases expire;
// and that no claim, one carrying completions included, breaks the
// per-key rule.
func TestLedgerMatchesDatabase(t *testing.T) {
	ctx := t.Context()
	s, pool := ledgerStore(t)
	other, err := New(pool, nil)
	require.NoError(t, err)
	rapid.Check(t, func(rt *rapid.T) {
		_, err := pool.Exec(ctx, "TRUNCATE relaybus_deliveries, relaybus_events, relaybus_keys; UPDATE relaybus_lanes SET lease_owner = NULL, lease_holder = NULL, lease_expires_at = NULL, in_flight = '{}', picks = 0")
		require.NoError(rt, err)
		s.ledger.reset()
		now := time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)
		keys := []string{"", "", "k1", "k2"}
		n := 0
		publish := func(count int) {
			eps := make([]*driver.EventPublish, count)
			for i := range eps {
				n++
				eps[i] = &driver.EventPublish{
					Event:      &relaytype.Event{ID: fmt.Sprintf("e%d", n), Type: "t", Key: keys[n%len(keys)]},
					Deliveries: []driver.DeliverySpec{{Handler: "h", MaxAttempts: 5}},
				}
			}
			tx, err := pool.Begin(ctx)
			require.NoError(rt, err)
			_, err = s.EventPublishTx(ctx, tx, &driver.EventPublishParams{Events: eps, Now: now})
			require.NoError(rt, err)
			require.NoError(rt, tx.Commit(ctx))
		}
		publish(rapid.IntRange(1, 30).Draw(rt, "events"))
		var held []*relaytype.Delivery // what s's caller holds
		take := func(i int) *relaytype.Delivery {
			d := held[i]
			held = append(held[:i], held[i+1:]...)
			return d
		}
		pick := func(label string) int { return rapid.IntRange(0, len(held)-1).Draw(rt, label) }
		// claimed adds what a claim of s returned to held, and checks the
		// per-key rule: nothing of a key already held.
		claimed := func(ds []*relaytype.Delivery) {
			for _, d := range ds {
				for _, h := range held {
					if d.Key != "" && h.Key == d.Key && h.Handler == d.Handler {
						rt.Fatalf("delivery %s of key %s claimed while %s of the same key is held", d.ID, d.Key, h.ID)
					}
				}
				held = append(held, d)
			}
		}
		steps := rapid.IntRange(1, 25).Draw(rt, "steps")
		for range steps {
			op := rapid.IntRange(0, 11).Draw(rt, "op")
			switch {
			case op <= 2:
				ds, err := s.DeliveryClaim(ctx, &driver.DeliveryClaimParams{Owner: "w", Handlers: []string{"h"},
					Limit: rapid.IntRange(1, 8).Draw(rt, "limit"), LeaseDuration: time.Minute, Now: now, Busy: len(held) > 0})
				require.NoError(rt, err)
				claimed(ds)
			case op == 11 && len(held) > 0:
				// A claim that carries completions (DeliveryCompleteClaim):
				// its claimOwn subtracts them from the ledger's hint.
				var ls []relaytype.Lease
				for range rapid.IntRange(1, len(held)).Draw(rt, "carried") {
					ls = append(ls, take(pick("carry")).Lease())
				}
				res, err := s.DeliveryCompleteClaim(ctx, &driver.DeliveryCompleteClaimParams{
					Complete: driver.DeliveryCompleteManyParams{Leases: ls, Now: now},
					Claim: driver.DeliveryClaimParams{Owner: "w", Handlers: []string{"h"},
						Limit: rapid.IntRange(1, 8).Draw(rt, "limit"), LeaseDuration: time.Minute, Now: now, Busy: len(held) > 0},
				})
				require.NoError(rt, err)
				claimed(res.Claimed)
			case op == 3 && len(held) > 0:
				var ls []relaytype.Lease
				for range rapid.IntRange(1, len(held)).Draw(rt, "batch") {
					ls = append(ls, take(pick("complete")).Lease())
				}
				_, err := s.DeliveryCompleteMany(ctx, &driver.DeliveryCompleteManyParams{Leases: ls, Now: now})
				require.NoError(rt, err)
			case op == 4 && len(held) > 0:
				i := pick("tx")
				commit := rapid.Bool().Draw(rt, "commit")
				d := held[i]
				if commit {
					take(i)
				}
				tx, err := pool.Begin(ctx)
				require.NoError(rt, err)
				_, err = s.DeliveryCompleteTx(ctx, tx, &driver.DeliveryCompleteParams{Lease: d.Lease(), Now: now})
				require.NoError(rt, err)
				if commit {
					require.NoError(rt, tx.Commit(ctx))
				} else {
					require.NoError(rt, tx.Rollback(ctx))
				}
			case op == 5 && len(held) > 0:
				_, err := s.DeliveryReschedule(ctx, &driver.DeliveryRescheduleParams{Lease: take(pick("reschedule")).Lease(),
					Error: "x", AvailableAt: now.Add(time.Duration(rapid.IntRange(0, 90).Draw(rt, "delay")) * time.Second), Now: now})
				require.NoError(rt, err)
			case op == 6 && len(held) > 0:
				_, err := s.DeliveryRelease(ctx, &driver.DeliveryReleaseParams{Lease: take(pick("release")).Lease(), Now: now})
				require.NoError(rt, err)
			case op == 7 && len(held) > 0:
				_, err := s.DeliveryBury(ctx, &driver.DeliveryBuryParams{Lease: take(pick("bury")).Lease(), Error: "x", Now: now})
				require.NoError(rt, err)
			case op == 8:
				// Time passes: leases may expire, and the other instance
				// takes what it can and completes it at once. s's caller
				// keeps its stale leases: their writes must fail.
				now = now.Add(time.Duration(rapid.IntRange(1, 90).Draw(rt, "advance")) * time.Second)
				ds, err := other.DeliveryClaim(ctx, &driver.DeliveryClaimParams{Owner: "o", Handlers: []string{"h"}, Limit: 5, LeaseDuration: time.Minute, Now: now})
				require.NoError(rt, err)
				ls := make([]relaytype.Lease, len(ds))
				for i, d := range ds {
					ls[i] = d.Lease()
				}
				if len(ls) > 0 {
					_, err = other.DeliveryCompleteMany(ctx, &driver.DeliveryCompleteManyParams{Leases: ls, Now: now})
					require.NoError(rt, err)
				}
			case op == 9:
				_, err := s.OwnerRelinquish(ctx, &driver.OwnerRelinquishParams{Owner: "w", Now: now})
				require.NoError(rt, err)
				held = nil
			default:
				publish(rapid.IntRange(1, 5).Draw(rt, "more"))
			}
			checkLedger(rt, ctx, s, pool)
		}
	})
}

// checkLedger asserts the invariant of TestLedgerMatchesDatabase.
func checkLedger(rt *rapid.T, ctx context.Context, s *Store, pool *pgxpool.Pool) {
	h := s.ledger.hints()
	for i, lane := range h.lanes {
		var epoch int64
		var picks int32
		var holder *string
		var pending int32
		require.NoError(rt, pool.QueryRow(ctx, `SELECT l.epoch, l.picks, l.lease_holder,
			(SELECT count(*) FROM relaybus_deliveries d WHERE d.id = ANY (l.in_flight) AND d.status = 'pending')::int
			FROM relaybus_lanes l WHERE l.lane = $1`, lane).Scan(&epoch, &picks, &holder, &pending))
		if epoch != h.epochs[i] || picks != h.picks[i] || holder == nil || *holder != s.holder {
			continue // the hint would be ignored
		}
		require.Equal(rt, pending, h.outstanding[i], "lane %d at epoch %d, %d picks: the ledger counts %d unfinished, the database %d",
			lane, epoch, picks, h.outstanding[i], pending)
	}
}

// ledgerStore is a set-up store on a fresh database.
func ledgerStore(t *testing.T) (*Store, *pgxpool.Pool) {
	t.Helper()
	pool, err := pgxpool.New(t.Context(), dbtest.TestDatabase(t))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s, err := New(pool, nil)
	require.NoError(t, err)
	require.NoError(t, s.Setup(t.Context()))
	return s, pool
}

// publishN publishes n events with one handler ("h") and key key.
func publishN(t *testing.T, s *Store, pool *pgxpool.Pool, now time.Time, n int, key string) {
	t.Helper()
	eps := make([]*driver.EventPublish, n)
	for i := range eps {
		eps[i] = &driver.EventPublish{
			Event:      &relaytype.Event{ID: fmt.Sprintf("p%d", i), Type: "t", Key: key},
			Deliveries: []driver.DeliverySpec{{Handler: "h", MaxAttempts: 3}},
		}
	}
	tx, err := pool.Begin(t.Context())
	require.NoError(t, err)
	_, err = s.EventPublishTx(t.Context(), tx, &driver.EventPublishParams{Events: eps, Now: now})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(t.Context()))
}

// TestCarriedCompletionFreesItsKey: a claim that carries the completion
// of a key's delivery claims the key's next one in the same round trip,
// from the lane it holds, whether the store instance's ledger knows the
// lane or not (claimOwn's probe of in_flight sees the carried delete).
func TestCarriedCompletionFreesItsKey(t *testing.T) {
	t.Parallel()
	for _, known := range []bool{true, false} {
		t.Run(fmt.Sprintf("ledger_knows=%v", known), func(t *testing.T) {
			ctx := t.Context()
			s, pool := ledgerStore(t)
			now := time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)
			publishN(t, s, pool, now, 3, "k")
			claim := driver.DeliveryClaimParams{Owner: "w", Handlers: []string{"h"}, Limit: 10, LeaseDuration: time.Hour, Now: now}
			ds, err := s.DeliveryClaim(ctx, &claim)
			require.NoError(t, err)
			require.Len(t, ds, 1, "only the key's head")
			require.Equal(t, int64(1), ds[0].Sequence)
			if !known {
				s.ledger.reset()
			}
			require.Equal(t, known, len(s.ledger.hints().lanes) == 1)
			res, err := s.DeliveryCompleteClaim(ctx, &driver.DeliveryCompleteClaimParams{
				Complete: driver.DeliveryCompleteManyParams{Leases: []relaytype.Lease{ds[0].Lease()}, Now: now},
				Claim:    claim,
			})
			require.NoError(t, err)
			require.Equal(t, []bool{true}, res.Completed)
			require.Len(t, res.Claimed, 1, "the carried completion freed the key: its next delivery comes in the same claim")
			require.Equal(t, int64(2), res.Claimed[0].Sequence)
			before, err := driver.ParseLaneToken(ds[0].LeaseToken)
			require.NoError(t, err)
			after, err := driver.ParseLaneToken(res.Claimed[0].LeaseToken)
			require.NoError(t, err)
			require.Equal(t, before.Epoch, after.Epoch, "claimed from the lane held, not by handing it back and taking it again")
			// And the key stays blocked while that one is in flight.
			ds, err = s.DeliveryClaim(ctx, &claim)
			require.NoError(t, err)
			require.Empty(t, ds, "the key's third delivery while its second is in flight")
		})
	}
}
