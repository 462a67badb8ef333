package postgres_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/berkcansavur/relaybus/internal/dbenv/dbtest"
	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/postgres"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

// How to run these against a server with pg_stat_statements loaded (the
// statements-per-delivery metric and the top statements need it; without
// it they are not reported):
//
//	RELAYBUS_TEST_DATABASE_URL=postgres://postgres@127.0.0.1:PORT/postgres \
//	RELAYBUS_BENCH_TOP_STATEMENTS=1 \
//	go test ./relaybus/postgres -run '^$' -bench ClaimCompleteParallel -benchtime 400x
//
// Each benchmark works on a fresh database of that server.

// benchBatch is the claim and completion batch of the sequential
// benchmarks.
const benchBatch = 50

// Sizes of the parallel benchmarks.
const (
	// benchParallelBatch is the claim and completion batch of each worker,
	// the harness's tuned dispatcher's.
	benchParallelBatch = 200
	// benchWorkers are concurrent claimers, each a dispatcher (owner) of
	// its own with one connection.
	benchWorkers = 4
	// benchPreloadBatch is the events per publish while preloading.
	benchPreloadBatch = 1_000
	// benchStatsFlush covers PostgreSQL's 1 s interval for flushing a
	// backend's table statistics, with a margin.
	benchStatsFlush = 1500 * time.Millisecond
	// benchHotKeys are the keys of the hot-keys benchmark.
	benchHotKeys = 4
)

// BenchmarkPublish measures a publish of benchBatch keyed events with two
// handlers each, in its own transaction.
func BenchmarkPublish(b *testing.B) {
	s, _ := benchStore(b)
	for i := 0; b.Loop(); i++ {
		eps := make([]*driver.EventPublish, benchBatch)
		for j := range eps {
			eps[j] = &driver.EventPublish{
				Event:      &relaytype.Event{ID: fmt.Sprintf("e%d-%d", i, j), Type: "t", Key: fmt.Sprintf("k%d", j%10)},
				Deliveries: []driver.DeliverySpec{{Handler: "a", MaxAttempts: 3}, {Handler: "b", MaxAttempts: 3}},
			}
		}
		tx, err := s.TxBegin(b.Context())
		require.NoError(b, err)
		_, err = s.EventPublishTx(b.Context(), tx, &driver.EventPublishParams{Events: eps, Now: t0})
		require.NoError(b, err)
		require.NoError(b, s.TxCommit(b.Context(), tx))
	}
	b.ReportMetric(float64(b.N*benchBatch)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkPublishOne measures the harness's P=1 batch=1 call: one
// unkeyed event with one handler in its own transaction.
func BenchmarkPublishOne(b *testing.B) {
	s, pool := benchStore(b)
	m := startMeasure(b, pool)
	for i := 0; b.Loop(); i++ {
		tx, err := s.TxBegin(b.Context())
		require.NoError(b, err)
		_, err = s.EventPublishTx(b.Context(), tx, &driver.EventPublishParams{Now: t0, Events: []*driver.EventPublish{{
			Event:      &relaytype.Event{ID: fmt.Sprintf("e%d", i), Type: "t", Payload: make([]byte, 128)},
			Deliveries: []driver.DeliverySpec{{Handler: "a", MaxAttempts: 3}},
		}}})
		require.NoError(b, err)
		require.NoError(b, s.TxCommit(b.Context(), tx))
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
	m.report(b, int64(b.N), "event")
}

// BenchmarkClaimComplete measures one claim of benchBatch unkeyed
// deliveries and their completion in one CompleteMany, one worker, the
// publish of each batch outside the timer.
func BenchmarkClaimComplete(b *testing.B) {
	s, _ := benchStore(b)
	now := t0.Add(time.Second)
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		eps := make([]*driver.EventPublish, benchBatch)
		for j := range eps {
			eps[j] = &driver.EventPublish{
				Event:      &relaytype.Event{ID: fmt.Sprintf("e%d-%d", i, j), Type: "t"},
				Deliveries: []driver.DeliverySpec{{Handler: "a", MaxAttempts: 3}},
			}
		}
		tx, err := s.TxBegin(b.Context())
		require.NoError(b, err)
		_, err = s.EventPublishTx(b.Context(), tx, &driver.EventPublishParams{Events: eps, Now: t0})
		require.NoError(b, err)
		require.NoError(b, s.TxCommit(b.Context(), tx))
		b.StartTimer()

		ds, err := s.DeliveryClaim(b.Context(), &driver.DeliveryClaimParams{
			Owner: "w", Handlers: []string{"a"}, Limit: benchBatch, LeaseDuration: time.Minute, Now: now})
		require.NoError(b, err)
		require.Len(b, ds, benchBatch)
		ok, err := s.DeliveryCompleteMany(b.Context(), &driver.DeliveryCompleteManyParams{Leases: leasesOf(ds), Now: now})
		require.NoError(b, err)
		require.NotContains(b, ok, false)
	}
	b.ReportMetric(float64(b.N*benchBatch)/b.Elapsed().Seconds(), "deliveries/s")
}

// BenchmarkClaimCompleteParallel is the dispatch hot path as the harness's
// tuned dispatchers drive it: benchWorkers claimers (owners), each with a
// connection of its own, claim benchParallelBatch at a time from a deep
// unkeyed backlog (preloaded outside the timer: b.N batches) and complete
// each batch in one CompleteMany. It reports deliveries/s and, per
// delivery, WAL bytes, delivery-row updates, lane-row updates and the
// share of them that was HOT, and statements (with pg_stat_statements).
func BenchmarkClaimCompleteParallel(b *testing.B) {
	s, pool := benchStore(b)
	total := b.N * benchParallelBatch
	preload(b, s, pool, total, func(int) string { return "" })
	m := startMeasure(b, pool)
	b.ResetTimer()
	drainParallel(b, s, total, benchWorkers)
	b.StopTimer()
	b.ReportMetric(float64(total)/b.Elapsed().Seconds(), "deliveries/s")
	m.report(b, int64(total), "delivery")
}

// BenchmarkClaimHotKeys is the harness's keyed cell with four hot keys: a
// deep backlog per key, and one worker that claims whatever heads are
// free and completes them, claiming again at once. Each key runs one
// delivery at a time, so a claim returns at most four: the cost of a claim
// on lanes whose keys have long backlogs behind their running heads is
// what it measures (ms/claim).
func BenchmarkClaimHotKeys(b *testing.B) {
	s, pool := benchStore(b)
	total := b.N * benchHotKeys
	preload(b, s, pool, total, func(i int) string { return fmt.Sprintf("hot-%d", i%benchHotKeys) })
	m := startMeasure(b, pool)
	claims := 0
	b.ResetTimer()
	for done := 0; done < total; {
		now := t0.Add(time.Minute)
		ds, err := s.DeliveryClaim(b.Context(), &driver.DeliveryClaimParams{
			Owner: "w", Handlers: []string{"h"}, Limit: benchParallelBatch, LeaseDuration: time.Hour, Now: now})
		require.NoError(b, err)
		claims++
		require.NotEmpty(b, ds, "a hot key's head was not claimable")
		require.LessOrEqual(b, len(ds), benchHotKeys)
		ok, err := s.DeliveryCompleteMany(b.Context(), &driver.DeliveryCompleteManyParams{Leases: leasesOf(ds), Now: now})
		require.NoError(b, err)
		require.NotContains(b, ok, false)
		done += len(ds)
	}
	b.StopTimer()
	b.ReportMetric(float64(total)/b.Elapsed().Seconds(), "deliveries/s")
	b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(claims), "ms/claim+complete")
	m.report(b, int64(total), "delivery")
}

// BenchmarkClaimManyKeys is the harness's keyed cell with 10,000 keys,
// four deliveries each: one worker (as the harness's single dispatcher,
// which ends up holding every lane) and four, batches of 200.
func BenchmarkClaimManyKeys(b *testing.B) {
	const keys = 10_000
	for _, workers := range []int{1, benchWorkers} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			s, pool := benchStore(b)
			total := b.N * benchParallelBatch
			preload(b, s, pool, total, func(i int) string { return fmt.Sprintf("key-%d", i%keys) })
			m := startMeasure(b, pool)
			b.ResetTimer()
			drainParallel(b, s, total, workers)
			b.StopTimer()
			b.ReportMetric(float64(total)/b.Elapsed().Seconds(), "deliveries/s")
			m.report(b, int64(total), "delivery")
		})
	}
}

// drainParallel runs workers claimers (owners), each with a connection of
// its own, claiming benchParallelBatch at a time and completing each
// batch in one CompleteMany, until total deliveries have completed.
func drainParallel(b *testing.B, s *postgres.Store, total, workers int) {
	b.Helper()
	var done atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			owner := fmt.Sprintf("w%d", w)
			for done.Load() < int64(total) {
				now := t0.Add(time.Minute)
				ds, err := s.DeliveryClaim(b.Context(), &driver.DeliveryClaimParams{
					Owner: owner, Handlers: []string{"h"}, Limit: benchParallelBatch, LeaseDuration: time.Hour, Now: now})
				if err != nil {
					errs <- err
					return
				}
				if len(ds) == 0 {
					time.Sleep(time.Millisecond)
					continue
				}
				ok, err := s.DeliveryCompleteMany(b.Context(), &driver.DeliveryCompleteManyParams{Leases: leasesOf(ds), Now: now})
				if err != nil {
					errs <- err
					return
				}
				for _, o := range ok {
					if o {
						done.Add(1)
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(b, err)
	}
	require.Equal(b, int64(total), done.Load())
}

func leasesOf(ds []*relaytype.Delivery) []relaytype.Lease {
	ls := make([]relaytype.Lease, len(ds))
	for i, d := range ds {
		ls[i] = d.Lease()
	}
	return ls
}

// benchStore is a set-up store on a fresh database, with a pool of one
// connection per worker and a spare; with RELAYBUS_BENCH_COUNTERS set,
// with statistics counters (EnableStatisticsCounters), and set to
// "triggers", with their triggers but not their index.
func benchStore(b *testing.B) (*postgres.Store, *pgxpool.Pool) {
	b.Helper()
	cfg, err := pgxpool.ParseConfig(dbtest.TestDatabase(b))
	require.NoError(b, err)
	cfg.MaxConns = benchWorkers + 1
	pool, err := pgxpool.NewWithConfig(b.Context(), cfg)
	require.NoError(b, err)
	b.Cleanup(pool.Close)
	s, err := postgres.New(pool, nil)
	require.NoError(b, err)
	require.NoError(b, s.Setup(b.Context()))
	if os.Getenv("RELAYBUS_BENCH_COUNTERS") != "" {
		// What the statistics counters cost the benchmark's writes: the
		// same binary run with and without, in turns.
		require.NoError(b, s.EnableStatisticsCounters(b.Context()))
		if os.Getenv("RELAYBUS_BENCH_COUNTERS") == "triggers" {
			// The triggers alone: their share of the cost.
			_, err := pool.Exec(b.Context(), `DROP INDEX relaybus_deliveries_pending_due_idx`)
			require.NoError(b, err)
		}
	}
	return s, pool
}

// preload publishes n events with one handler ("h"), keyed by key(i),
// then vacuums and analyzes, as a preloaded backlog would be by the time
// dispatchers start.
func preload(b *testing.B, s *postgres.Store, pool *pgxpool.Pool, n int, key func(int) string) {
	b.Helper()
	ctx := b.Context()
	for start := 0; start < n; start += benchPreloadBatch {
		eps := make([]*driver.EventPublish, 0, benchPreloadBatch)
		for i := start; i < min(n, start+benchPreloadBatch); i++ {
			eps = append(eps, &driver.EventPublish{
				Event:      &relaytype.Event{ID: fmt.Sprintf("e%d", i), Type: "t", Key: key(i), Payload: make([]byte, 128)},
				Deliveries: []driver.DeliverySpec{{Handler: "h", MaxAttempts: 3}},
			})
		}
		tx, err := s.TxBegin(ctx)
		require.NoError(b, err)
		_, err = s.EventPublishTx(ctx, tx, &driver.EventPublishParams{Events: eps, Now: t0})
		require.NoError(b, err)
		require.NoError(b, s.TxCommit(ctx, tx))
	}
	_, err := pool.Exec(ctx, "VACUUM ANALYZE relaybus_deliveries, relaybus_events, relaybus_lanes")
	require.NoError(b, err)
}

// measure holds the counters read before a benchmark's work.
type measure struct {
	pool    *pgxpool.Pool
	lsn     string
	walSync int64
	tables  map[string]tableCounters
	pgss    bool
}

type tableCounters struct{ upd, hot, del, ins int64 }

func startMeasure(b *testing.B, pool *pgxpool.Pool) *measure {
	b.Helper()
	ctx := b.Context()
	m := &measure{pool: pool}
	var libs string
	require.NoError(b, pool.QueryRow(ctx, "SHOW shared_preload_libraries").Scan(&libs))
	if strings.Contains(libs, "pg_stat_statements") {
		_, err := pool.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
		m.pgss = err == nil
		if m.pgss {
			_, err = pool.Exec(ctx, "SELECT pg_stat_statements_reset()")
			m.pgss = err == nil
		}
	}
	// A checkpoint first, so that every window starts with the same
	// full-page-image debt (the first change of each page after a
	// checkpoint logs the whole page).
	_, err := pool.Exec(ctx, "CHECKPOINT")
	if err != nil {
		b.Logf("CHECKPOINT: %v (WAL per delivery includes whatever full-page images follow the last one)", err)
	}
	time.Sleep(benchStatsFlush)
	m.tables = readTables(b, pool)
	require.NoError(b, pool.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&m.lsn))
	m.walSync = walSyncs(b, pool)
	return m
}

// walSyncs reads the server's count of WAL syncs (pg_stat_wal).
func walSyncs(b *testing.B, pool *pgxpool.Pool) int64 {
	b.Helper()
	_, err := pool.Exec(context.Background(), "SELECT pg_stat_clear_snapshot()")
	require.NoError(b, err)
	var n int64
	require.NoError(b, pool.QueryRow(context.Background(), "SELECT wal_sync FROM pg_stat_wal").Scan(&n))
	return n
}

func readTables(b *testing.B, pool *pgxpool.Pool) map[string]tableCounters {
	b.Helper()
	ctx := b.Context()
	_, err := pool.Exec(ctx, "SELECT pg_stat_clear_snapshot()")
	require.NoError(b, err)
	rows, err := pool.Query(ctx, `SELECT relname, n_tup_upd, n_tup_hot_upd, n_tup_del, n_tup_ins FROM pg_stat_user_tables
		WHERE relname IN ('relaybus_deliveries', 'relaybus_lanes', 'relaybus_events')`)
	require.NoError(b, err)
	out := map[string]tableCounters{}
	var name string
	var c tableCounters
	_, err = pgx.ForEachRow(rows, []any{&name, &c.upd, &c.hot, &c.del, &c.ins}, func() error {
		out[name] = c
		return nil
	})
	require.NoError(b, err)
	return out
}

// walRecords logs the WAL written since startMeasure by record type
// (pg_walinspect, in PostgreSQL's contrib since 15): count and bytes per
// unit, full-page images apart, the largest first. Server-wide: run
// alone on the server.
func (m *measure) walRecords(b *testing.B, units int64, unit string) {
	b.Helper()
	ctx := context.Background()
	if _, err := m.pool.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_walinspect"); err != nil {
		b.Logf("WAL by record type: %v", err)
		return
	}
	rows, err := m.pool.Query(ctx, `SELECT "resource_manager/record_type", count, record_size, fpi_size
		FROM pg_get_wal_stats($1::pg_lsn, pg_current_wal_lsn(), true)
		WHERE count > 0 ORDER BY combined_size DESC LIMIT 12`, m.lsn)
	require.NoError(b, err)
	var sb strings.Builder
	fmt.Fprintf(&sb, "WAL by record type, per %s (%d of them):\n", unit, units)
	var kind string
	var count, rec, fpi int64
	_, err = pgx.ForEachRow(rows, []any{&kind, &count, &rec, &fpi}, func() error {
		fmt.Fprintf(&sb, "  %-24s %6.3f records/%s  %7.1f B/%s  FPI %7.1f B/%s\n", kind,
			float64(count)/float64(units), unit, float64(rec)/float64(units), unit, float64(fpi)/float64(units), unit)
		return nil
	})
	require.NoError(b, err)
	fmt.Fprint(os.Stderr, sb.String())
}

// report reports the per-unit costs since startMeasure. With
// RELAYBUS_BENCH_TOP_STATEMENTS set it logs the statements that took the
// most time; with RELAYBUS_BENCH_WAL_RECORDS set, the WAL by record
// type.
func (m *measure) report(b *testing.B, units int64, unit string) {
	b.Helper()
	ctx := context.Background()
	var wal float64
	require.NoError(b, m.pool.QueryRow(ctx, "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)", m.lsn).Scan(&wal))
	b.ReportMetric(wal/float64(units), "WAL-B/"+unit)
	if os.Getenv("RELAYBUS_BENCH_WAL_RECORDS") != "" {
		m.walRecords(b, units, unit)
	}
	// Backends report their statistics at most once a second.
	time.Sleep(benchStatsFlush)
	// WAL flushes to disk (server-wide: run alone on the server).
	b.ReportMetric(float64(walSyncs(b, m.pool)-m.walSync)/float64(units), "WAL-syncs/"+unit)
	after := readTables(b, m.pool)
	d := after["relaybus_deliveries"]
	d0 := m.tables["relaybus_deliveries"]
	b.ReportMetric(float64(d.upd-d0.upd)/float64(units), "delivery-updates/"+unit)
	l, l0 := after["relaybus_lanes"], m.tables["relaybus_lanes"]
	if upd := l.upd - l0.upd; upd > 0 {
		b.ReportMetric(float64(upd)/float64(units), "lane-updates/"+unit)
		b.ReportMetric(100*float64(l.hot-l0.hot)/float64(upd), "lane-HOT-%")
	}
	if !m.pgss {
		return
	}
	var calls int64
	require.NoError(b, m.pool.QueryRow(ctx, `SELECT coalesce(sum(calls), 0) FROM pg_stat_statements
		WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) AND toplevel
			AND query NOT LIKE '%pg_stat%' AND query NOT LIKE 'SELECT pg_current_wal_lsn%' AND query NOT LIKE 'SHOW %'`).Scan(&calls))
	b.ReportMetric(float64(calls)/float64(units), "statements/"+unit)
	if os.Getenv("RELAYBUS_BENCH_TOP_STATEMENTS") == "" {
		return
	}
	rows, err := m.pool.Query(ctx, `SELECT calls, round(total_exec_time::numeric, 1), round((total_exec_time / calls)::numeric, 3),
			shared_blks_hit + shared_blks_read, wal_bytes, left(regexp_replace(query, '\s+', ' ', 'g'), 110)
		FROM pg_stat_statements
		WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) AND calls > 0
		ORDER BY total_exec_time DESC LIMIT 8`)
	require.NoError(b, err)
	var sb strings.Builder
	fmt.Fprintf(&sb, "top statements by total time (%d %ss):\n", units, unit)
	var n int64
	var total, mean float64
	var blocks int64
	var walBytes float64
	var q string
	_, err = pgx.ForEachRow(rows, []any{&n, &total, &mean, &blocks, &walBytes, &q}, func() error {
		fmt.Fprintf(&sb, "  calls %6d  total %8.1f ms  mean %7.3f ms  %6.2f blocks/%s  %7.1f WAL-B/%s  %s\n",
			n, total, mean, float64(blocks)/float64(units), unit, walBytes/float64(units), unit, q)
		return nil
	})
	require.NoError(b, err)
	// To stderr: b.Log keeps only the first run's output, and the first
	// run is b.N = 1.
	fmt.Fprint(os.Stderr, sb.String())
}
