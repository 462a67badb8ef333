package postgres_test

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/berkcansavur/relaybus/relaybus"
	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

// BenchmarkPublishOwn measures EventPublish, the store's own transaction
// in one round trip, on the harness's P=1 batch=1 call (compare
// BenchmarkPublishTx/unkeyed-1, which adds BEGIN and COMMIT).
func BenchmarkPublishOwn(b *testing.B) {
	s, pool := benchStore(b)
	m := startMeasure(b, pool)
	for i := 0; b.Loop(); i++ {
		_, err := s.EventPublish(b.Context(), &driver.EventPublishParams{Now: t0, Events: []*driver.EventPublish{{
			Event:      &relaytype.Event{ID: fmt.Sprintf("e%d", i), Type: "t", Payload: make([]byte, 128)},
			Deliveries: []driver.DeliverySpec{{Handler: "a", MaxAttempts: 3}},
		}}})
		require.NoError(b, err)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
	m.report(b, int64(b.N), "event")
}

// BenchmarkBusPublishParallel measures the harness's P=32 batch=1 cell in
// a test: 32 goroutines publishing one unkeyed event per call through
// one Bus on a pool of 5, with group commit (the default) and without.
func BenchmarkBusPublishParallel(b *testing.B) {
	for _, c := range []struct {
		name string
		wait time.Duration
	}{{"grouped", 0}, {"alone", relaybus.Disabled}} {
		b.Run(c.name, func(b *testing.B) {
			s, pool := benchStore(b)
			bus, err := relaybus.New(relaybus.Store[pgx.Tx](s), relaybus.Config{PublishGroupWait: c.wait})
			require.NoError(b, err)
			require.NoError(b, bus.Declare("t", "a", nil))
			m := startMeasure(b, pool)
			var next atomic.Int64
			b.SetParallelism(32 / max(1, runtime.GOMAXPROCS(0)))
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					id := fmt.Sprint("e", next.Add(1))
					if err := bus.Publish(b.Context(), &relaybus.Event{ID: id, Type: "t", Payload: make([]byte, 128)}); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
			m.report(b, int64(b.N), "event")
		})
	}
}
