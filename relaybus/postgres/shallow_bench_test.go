package postgres_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

// BenchmarkClaimShallowKeyed is the steady state of the harness's mixed
// cell at a rate the dispatcher keeps up with: 1,000 keys, a few new keyed
// events between claims, each claim (limit 10, the default BatchSize)
// carrying the completions of the one before it. What it measures is the
// fixed cost of a claim on a shallow keyed backlog (ms/claim).
func BenchmarkClaimShallowKeyed(b *testing.B) {
	const keys, perClaim, limit = 1000, 4, 10
	s, pool := benchStore(b)
	preload(b, s, pool, 0, nil)
	rng := rand.New(rand.NewPCG(1, 2))
	next := 0
	publish := func() {
		eps := make([]*driver.EventPublish, perClaim)
		for j := range eps {
			eps[j] = &driver.EventPublish{
				Event:      &relaytype.Event{ID: fmt.Sprintf("s%d", next), Type: "t", Key: fmt.Sprintf("key-%d", rng.IntN(keys)), Payload: make([]byte, 128)},
				Deliveries: []driver.DeliverySpec{{Handler: "h", MaxAttempts: 3}},
			}
			next++
		}
		tx, err := s.TxBegin(b.Context())
		require.NoError(b, err)
		_, err = s.EventPublishTx(b.Context(), tx, &driver.EventPublishParams{Events: eps, Now: time.Now()})
		require.NoError(b, err)
		require.NoError(b, s.TxCommit(b.Context(), tx))
	}
	var carry []*relaytype.Delivery
	claim := func() int {
		p := driver.DeliveryClaimParams{Owner: "w", Handlers: []string{"h"}, Limit: limit, LeaseDuration: time.Minute, Now: time.Now()}
		if len(carry) == 0 {
			ds, err := s.DeliveryClaim(b.Context(), &p)
			require.NoError(b, err)
			carry = ds
			return len(ds)
		}
		res, err := s.DeliveryCompleteClaim(b.Context(), &driver.DeliveryCompleteClaimParams{
			Complete: driver.DeliveryCompleteManyParams{Leases: leasesOf(carry), Now: p.Now}, Claim: p})
		require.NoError(b, err)
		require.NotContains(b, res.Completed, false)
		carry = res.Claimed
		return len(res.Claimed)
	}
	for range 200 {
		publish()
		claim()
	}
	m := startMeasure(b, pool)
	claimed := 0
	var claimTime time.Duration
	b.ResetTimer()
	for b.Loop() {
		publish()
		start := time.Now()
		claimed += claim()
		claimTime += time.Since(start)
	}
	b.StopTimer()
	b.ReportMetric(float64(claimTime.Microseconds())/1000/float64(b.N), "ms/claim")
	b.ReportMetric(float64(claimed)/float64(b.N), "deliveries/claim")
	m.report(b, int64(claimed), "delivery")
}
