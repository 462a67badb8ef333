package postgres_test

import (
	"context"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/berkcansavur/relaybus/relaybus"
	"github.com/berkcansavur/relaybus/relaybus/postgres"
)

// Sizes of BenchmarkBusDispatch: the harness's tuned dispatch cell ("2
// inst, tuned (conc 200, batch 200, pool 40, poll 50ms)").
const (
	busBenchProcs = 2
	busBenchConc  = 200
	busBenchBatch = 200
	busBenchPool  = 40
)

// BenchmarkBusDispatch is the dispatch hot path through the engine, not
// only the store: busBenchProcs Buses, each with a store instance and a
// pool of its own (two dispatcher processes), drain a preloaded unkeyed
// backlog of b.N*200 deliveries with a handler that does nothing, at the
// harness's tuned settings. Beside BenchmarkClaimCompleteParallel (the
// store driven by a plain claim-complete loop), it shows what the
// dispatcher adds. It reports deliveries/s and the per-delivery figures
// of BenchmarkClaimCompleteParallel; with RELAYBUS_BENCH_TOP_STATEMENTS
// set, the top statements.
//
// carry=off: the same on stores whose claims carry no completions
// (noCarry, in batch_bench_test.go).
//
// RELAYBUS_BENCH_BUSES=k splits each process into k Buses of its own
// Owner on the process's pool, each with a k-th of its Concurrency: k
// claim loops over disjoint lanes, the shape of claim streams built as
// separate owners. RELAYBUS_BENCH_KEYS=n preloads a keyed backlog, event
// i of key i mod n (the harness's keyed cell is n=10000), and
// RELAYBUS_BENCH_PROCS=p runs p processes instead of busBenchProcs (that
// cell runs one). RELAYBUS_BENCH_RUN=r registers the handler as a batch
// handler of MaxSize 1 and MaxCalls r: one delivery a call, as a plain
// handler, but a claim brings up to r deliveries of a key (its key run),
// called one after another.
func BenchmarkBusDispatch(b *testing.B) {
	for _, carry := range []bool{true, false} {
		b.Run("carry="+onOff(carry), func(b *testing.B) { benchBusDispatch(b, carry) })
	}
}

func benchBusDispatch(b *testing.B, carry bool) {
	s, pool := benchStore(b)
	total := b.N * benchParallelBatch
	keys := benchEnvInt(b, "RELAYBUS_BENCH_KEYS", 0, 1, 1<<30)
	procs := benchEnvInt(b, "RELAYBUS_BENCH_PROCS", busBenchProcs, 1, 16)
	run := benchEnvInt(b, "RELAYBUS_BENCH_RUN", 0, 0, relaybus.MaxBatchMaxCalls)
	preload(b, s, pool, total, func(i int) string {
		if keys == 0 {
			return ""
		}
		return "k" + strconv.Itoa(i%keys)
	})
	var completed atomic.Int64
	var start time.Time
	// The preload is due at t0; the Buses' clock starts a minute later.
	now := func() time.Time { return t0.Add(time.Minute).Add(time.Since(start)) }
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m := startMeasure(b, pool)
	b.ResetTimer()
	start = time.Now()
	var stops []func()
	buses := benchEnvInt(b, "RELAYBUS_BENCH_BUSES", 1, 1, busBenchConc)
	for p := range procs {
		cfg, err := pgxpool.ParseConfig(pool.Config().ConnString())
		require.NoError(b, err)
		cfg.MaxConns = busBenchPool
		pp, err := pgxpool.NewWithConfig(ctx, cfg)
		require.NoError(b, err)
		for k := range buses {
			st, err := postgres.New(pp, nil)
			require.NoError(b, err)
			bus, err := relaybus.New(carrying(st, carry), relaybus.Config{
				Owner:        "bus" + strconv.Itoa(p) + "." + strconv.Itoa(k),
				Concurrency:  busBenchConc / buses,
				BatchSize:    busBenchBatch,
				PollInterval: 50 * time.Millisecond,
				Now:          now,
				AfterFinish: func(_ context.Context, f relaybus.Finish) {
					if f.Outcome == relaybus.FinishCompleted {
						completed.Add(1)
					}
				},
			})
			require.NoError(b, err)
			if run > 0 {
				// A plain handler's shape with the claim's key runs: calls of
				// one delivery, run calls a claim of a key.
				require.NoError(b, bus.HandleBatch("t", "h", func(_ context.Context, _ string, ds []*relaybus.Delivery) []error {
					return make([]error, len(ds))
				}, &relaybus.BatchOptions{MaxSize: 1, MaxCalls: run}))
			} else {
				require.NoError(b, bus.Handle("t", "h", func(context.Context, *relaybus.Delivery) error { return nil }, nil))
			}
			require.NoError(b, bus.Start(ctx))
			stops = append(stops, func() {
				require.NoError(b, bus.Stop(context.Background()))
			})
		}
		stops = append(stops, pp.Close)
	}
	for completed.Load() < int64(total) {
		time.Sleep(time.Millisecond)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	for _, stop := range stops {
		stop()
	}
	b.ReportMetric(float64(total)/elapsed.Seconds(), "deliveries/s")
	m.report(b, int64(total), "delivery")
}

// benchEnvInt returns the integer in the environment variable name, def
// when it is unset, and fails the benchmark when it is not a number
// between lo and hi.
func benchEnvInt(b *testing.B, name string, def, lo, hi int) int {
	b.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	require.NoError(b, err, name)
	require.True(b, n >= lo && n <= hi, "%s=%d: between %d and %d", name, n, lo, hi)
	return n
}
