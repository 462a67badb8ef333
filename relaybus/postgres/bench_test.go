package postgres_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/berkcansavur/relaybus/internal/dbenv/dbtest"
	"github.com/berkcansavur/relaybus/relaybus"
	"github.com/berkcansavur/relaybus/relaybus/postgres"
)

// benchBatch is the claim and completion batch of the benchmarks.
const benchBatch = 50

// BenchmarkPublish measures a publish of benchBatch keyed events with two
// handlers each, in its own transaction.
func BenchmarkPublish(b *testing.B) {
	s := benchStore(b)
	for i := 0; b.Loop(); i++ {
		eps := make([]*relaybus.EventPublish, benchBatch)
		for j := range eps {
			eps[j] = &relaybus.EventPublish{
				Event:      &relaybus.Event{ID: fmt.Sprintf("e%d-%d", i, j), Type: "t", Key: fmt.Sprintf("k%d", j%10)},
				Deliveries: []relaybus.DeliverySpec{{Handler: "a", MaxAttempts: 3}, {Handler: "b", MaxAttempts: 3}},
			}
		}
		tx, err := s.TxBegin(b.Context())
		require.NoError(b, err)
		_, err = s.EventPublishTx(b.Context(), tx, &relaybus.EventPublishParams{Events: eps, Now: t0})
		require.NoError(b, err)
		require.NoError(b, s.TxCommit(b.Context(), tx))
	}
	b.ReportMetric(float64(b.N*benchBatch)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkClaimComplete measures one claim of benchBatch unkeyed
// deliveries and their completion in one CompleteMany: the 0.1.0 hot
// path, two non-HOT row writes per delivery.
func BenchmarkClaimComplete(b *testing.B) {
	s := benchStore(b)
	now := t0.Add(time.Second)
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		eps := make([]*relaybus.EventPublish, benchBatch)
		for j := range eps {
			eps[j] = &relaybus.EventPublish{
				Event:      &relaybus.Event{ID: fmt.Sprintf("e%d-%d", i, j), Type: "t"},
				Deliveries: []relaybus.DeliverySpec{{Handler: "a", MaxAttempts: 3}},
			}
		}
		tx, err := s.TxBegin(b.Context())
		require.NoError(b, err)
		_, err = s.EventPublishTx(b.Context(), tx, &relaybus.EventPublishParams{Events: eps, Now: t0})
		require.NoError(b, err)
		require.NoError(b, s.TxCommit(b.Context(), tx))
		b.StartTimer()

		ds, err := s.DeliveryClaim(b.Context(), &relaybus.DeliveryClaimParams{
			Owner: "w", Handlers: []string{"a"}, Limit: benchBatch, LeaseDuration: time.Minute, Now: now})
		require.NoError(b, err)
		require.Len(b, ds, benchBatch)
		ls := make([]relaybus.Lease, len(ds))
		for j, d := range ds {
			ls[j] = d.Lease()
		}
		_, err = s.DeliveryCompleteMany(b.Context(), &relaybus.DeliveryCompleteManyParams{Leases: ls, Now: now})
		require.NoError(b, err)
	}
	b.ReportMetric(float64(b.N*benchBatch)/b.Elapsed().Seconds(), "deliveries/s")
}

func benchStore(b *testing.B) *postgres.Store {
	b.Helper()
	pool, err := pgxpool.New(b.Context(), dbtest.TestDatabase(b))
	require.NoError(b, err)
	b.Cleanup(pool.Close)
	s, err := postgres.New(pool, nil)
	require.NoError(b, err)
	require.NoError(b, s.Setup(b.Context()))
	return s
}

// BenchmarkClaimHotKeysDeepBacklog measures a claim on 4 hot keys with
// 2,500 pending deliveries each behind 2,500 completed ones: the case the
// partial ordering index is for. Each iteration claims the 4 heads, makes
// a claim that finds nothing (the heads run), and releases the heads.
// The completed half is written with one UPDATE, as if dispatched.
func BenchmarkClaimHotKeysDeepBacklog(b *testing.B) {
	const keys, perKey = 4, 5000
	pool, err := pgxpool.New(b.Context(), dbtest.TestDatabase(b))
	require.NoError(b, err)
	b.Cleanup(pool.Close)
	s, err := postgres.New(pool, nil)
	require.NoError(b, err)
	require.NoError(b, s.Setup(b.Context()))
	for start := 0; start < keys*perKey; start += 1000 {
		eps := make([]*relaybus.EventPublish, 1000)
		for j := range eps {
			n := start + j
			eps[j] = &relaybus.EventPublish{
				Event:      &relaybus.Event{ID: fmt.Sprintf("e%d", n), Type: "t", Key: fmt.Sprintf("k%d", n%keys)},
				Deliveries: []relaybus.DeliverySpec{{Handler: "a", MaxAttempts: 3}},
			}
		}
		tx, err := s.TxBegin(b.Context())
		require.NoError(b, err)
		_, err = s.EventPublishTx(b.Context(), tx, &relaybus.EventPublishParams{Events: eps, Now: t0})
		require.NoError(b, err)
		require.NoError(b, s.TxCommit(b.Context(), tx))
	}
	_, err = pool.Exec(b.Context(), `UPDATE relaybus_deliveries SET status = 'completed', completed_at = $1 WHERE sequence <= $2`, t0, perKey/2)
	require.NoError(b, err)
	_, err = pool.Exec(b.Context(), `VACUUM ANALYZE relaybus_deliveries`)
	require.NoError(b, err)
	claim := func() []*relaybus.Delivery {
		ds, err := s.DeliveryClaim(b.Context(), &relaybus.DeliveryClaimParams{
			Owner: "o", Handlers: []string{"a"}, Limit: 200, LeaseDuration: time.Minute, Now: t0,
		})
		require.NoError(b, err)
		return ds
	}
	for b.Loop() {
		ds := claim()
		require.Len(b, ds, keys)
		require.Empty(b, claim())
		for _, d := range ds {
			_, err := s.DeliveryRelease(b.Context(), &relaybus.DeliveryReleaseParams{Lease: d.Lease(), Now: t0})
			require.NoError(b, err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N)/2, "ms/claim")
}
