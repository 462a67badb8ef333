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

// BenchmarkBusPublishParallel measures the harness's publish cells in a
// test: goroutines publishing through one Bus on a pool of 5, with group
// commit (the default) and without: P=32 batch=1, and P=8 batch=10.
func BenchmarkBusPublishParallel(b *testing.B) {
	for _, c := range []struct {
		name         string
		procs, batch int
		wait         time.Duration
	}{
		{"P=32-batch=1-grouped", 32, 1, 0}, {"P=32-batch=1-alone", 32, 1, relaybus.Disabled},
		{"P=8-batch=10-grouped", 8, 10, 0}, {"P=8-batch=10-alone", 8, 10, relaybus.Disabled},
	} {
		b.Run(c.name, func(b *testing.B) {
			s, pool := benchStore(b)
			bus, err := relaybus.New(relaybus.Store[pgx.Tx](s), relaybus.Config{PublishGroupWait: c.wait})
			require.NoError(b, err)
			require.NoError(b, bus.Declare("t", "a", nil))
			m := startMeasure(b, pool)
			var next atomic.Int64
			b.SetParallelism(max(1, c.procs/runtime.GOMAXPROCS(0)))
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					evs := make([]*relaybus.Event, c.batch)
					for i := range evs {
						evs[i] = &relaybus.Event{ID: fmt.Sprint("e", next.Add(1)), Type: "t", Payload: make([]byte, 128)}
					}
					if err := bus.Publish(b.Context(), evs...); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			b.ReportMetric(float64(b.N*c.batch)/b.Elapsed().Seconds(), "events/s")
			m.report(b, int64(b.N*c.batch), "event")
		})
	}
}
