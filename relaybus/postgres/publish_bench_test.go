package postgres_test

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

// BenchmarkPublishTx measures EventPublishTx in a transaction of its own
// (TxBegin, EventPublishTx, TxCommit: what a caller's transaction costs
// around it), with what each event writes: WAL bytes, syncs and, where
// pg_stat_statements is loaded, statements. It uses only the store API
// that every 0.2 release has, so that this file runs unchanged against
// an older commit for a side-by-side comparison (see docs/publishing.md).
//
//	unkeyed-1     the harness's P=1 batch=1 call: one unkeyed event, one handler
//	keyed-50      50 events of 10 keys, two handlers each
//	republish-50  keyed-50 published again with a third handler
//	unkeyed-5000  a large batch: 5000 unkeyed events, one handler
func BenchmarkPublishTx(b *testing.B) {
	for _, c := range []struct {
		name      string
		events    int
		keyed     bool
		republish bool
		handlers  []string
	}{
		{"unkeyed-1", 1, false, false, []string{"a"}},
		{"keyed-50", 50, true, false, []string{"a", "b"}},
		{"republish-50", 50, true, true, []string{"a", "b", "c"}},
		{"unkeyed-5000", 5000, false, false, []string{"a"}},
	} {
		b.Run(c.name, func(b *testing.B) {
			s, pool := benchStore(b)
			call := func(i int, handlers []string) []*driver.EventPublish {
				eps := make([]*driver.EventPublish, c.events)
				for j := range eps {
					e := &relaytype.Event{ID: fmt.Sprintf("e%d-%d", i, j), Type: "t", Payload: make([]byte, 128)}
					if c.keyed {
						e.Key = fmt.Sprintf("k%d", j%10)
					}
					ds := make([]driver.DeliverySpec, len(handlers))
					for h, name := range handlers {
						ds[h] = driver.DeliverySpec{Handler: name, MaxAttempts: 3}
					}
					eps[j] = &driver.EventPublish{Event: e, Deliveries: ds}
				}
				return eps
			}
			publish := func(eps []*driver.EventPublish) {
				tx, err := s.TxBegin(b.Context())
				require.NoError(b, err)
				_, err = s.EventPublishTx(b.Context(), tx, &driver.EventPublishParams{Events: eps, Now: t0})
				require.NoError(b, err)
				require.NoError(b, s.TxCommit(b.Context(), tx))
			}
			var first [][]*driver.EventPublish
			if c.republish {
				// The events exist with two of the three handlers.
				for i := range b.N {
					eps := call(i, c.handlers[:2])
					publish(eps)
					first = append(first, call(i, c.handlers))
				}
			}
			m := startMeasure(b, pool)
			b.ResetTimer()
			for i := range b.N {
				if c.republish {
					publish(first[i])
					continue
				}
				publish(call(i, c.handlers))
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N*c.events)/b.Elapsed().Seconds(), "events/s")
			m.report(b, int64(b.N*c.events), "event")
		})
	}
}

// BenchmarkPublishTxParallel is the harness's publish cells as 0.2.x's
// worker ran them, in a test: goroutines each publishing a call of
// unkeyed events in a transaction of its own (TxBegin, EventPublishTx,
// TxCommit) on a pool of 5. Like BenchmarkPublishTx it runs unchanged on
// an older commit; BenchmarkBusPublishParallel is the same load through
// Bus.Publish.
func BenchmarkPublishTxParallel(b *testing.B) {
	for _, c := range []struct {
		name         string
		procs, batch int
	}{{"P=32-batch=1", 32, 1}, {"P=8-batch=10", 8, 10}} {
		b.Run(c.name, func(b *testing.B) {
			s, pool := benchStore(b)
			m := startMeasure(b, pool)
			var next atomic.Int64
			b.SetParallelism(max(1, c.procs/runtime.GOMAXPROCS(0)))
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					eps := make([]*driver.EventPublish, c.batch)
					for i := range eps {
						eps[i] = &driver.EventPublish{
							Event:      &relaytype.Event{ID: fmt.Sprint("e", next.Add(1)), Type: "t", Payload: make([]byte, 128)},
							Deliveries: []driver.DeliverySpec{{Handler: "a", MaxAttempts: 3}},
						}
					}
					tx, err := s.TxBegin(b.Context())
					if err == nil {
						_, err = s.EventPublishTx(b.Context(), tx, &driver.EventPublishParams{Events: eps, Now: t0})
						if err == nil {
							err = s.TxCommit(b.Context(), tx)
						} else {
							_ = s.TxRollback(b.Context(), tx)
						}
					}
					if err != nil {
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
