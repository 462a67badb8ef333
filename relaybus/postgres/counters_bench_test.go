package postgres_test

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

// BenchmarkPublishHeldSnapshot publishes b.N single unkeyed events, one
// call each, while another session holds a REPEATABLE READ snapshot taken
// before the first, and reports the mean call of the first and of the
// last tenth: what a held xmin horizon does to a publisher as the dead
// row versions it keeps pile up. With RELAYBUS_BENCH_COUNTERS set, with
// statistics counters, whose row versions pile up too:
//
//	go test ./relaybus/postgres -run '^$' -bench PublishHeldSnapshot -benchtime 20000x
//	RELAYBUS_BENCH_COUNTERS=1 go test ./relaybus/postgres -run '^$' -bench PublishHeldSnapshot -benchtime 20000x
func BenchmarkPublishHeldSnapshot(b *testing.B) {
	s, pool := benchStore(b)
	ctx := b.Context()
	conn, err := pool.Acquire(ctx)
	require.NoError(b, err)
	defer conn.Release()
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(b, err)
	defer func() { _ = tx.Rollback(ctx) }()
	var n int
	require.NoError(b, tx.QueryRow(ctx, `SELECT count(*) FROM relaybus_lanes`).Scan(&n)) // takes the snapshot
	calls := make([]time.Duration, 0, b.N)
	for i := 0; b.Loop(); i++ {
		start := time.Now()
		_, err := s.EventPublish(ctx, &driver.EventPublishParams{Now: t0, Events: []*driver.EventPublish{{
			Event:      &relaytype.Event{ID: fmt.Sprintf("e%d", i), Type: "t", Payload: make([]byte, 128)},
			Deliveries: []driver.DeliverySpec{{Handler: "a", MaxAttempts: 3}},
		}}})
		calls = append(calls, time.Since(start))
		require.NoError(b, err)
	}
	tenth := max(len(calls)/10, 1)
	mean := func(ds []time.Duration) float64 {
		var sum time.Duration
		for _, d := range ds {
			sum += d
		}
		return float64(sum.Microseconds()) / float64(len(ds))
	}
	b.ReportMetric(mean(calls[:tenth]), "us/call-first-tenth")
	b.ReportMetric(mean(calls[len(calls)-tenth:]), "us/call-last-tenth")
	if os.Getenv("RELAYBUS_BENCH_COUNTERS") != "" {
		var pages int
		require.NoError(b, pool.QueryRow(ctx, `SELECT pg_relation_size('relaybus_counts') / 8192`).Scan(&pages))
		b.ReportMetric(float64(pages), "counts-pages")
	}
}
