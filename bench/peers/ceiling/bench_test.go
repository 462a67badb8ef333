package main

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/berkcansavur/relaybus/bench/protocol"
	"github.com/berkcansavur/relaybus/bench/worker/workerkit/peertest"
	"github.com/berkcansavur/relaybus/internal/dbenv/pgtest"
)

// BenchmarkDispatch measures the ceiling alone on the shapes of the
// dispatch and keyed cells: a preload (4 publishers, batches of 500,
// 128-byte payloads, one no-op handler), drained by dispatcher
// processes. It reports deliveries per second from the last ready line
// to the last completion (read from the counters, every 50ms) and the
// WAL the server wrote per delivery while dispatching. It is not the
// harness's comparison (no windows, no statistics): a sanity check of
// the peer's settings. The test server runs with fsync off; for figures
// with the durability of the harness's servers, point
// RELAYBUS_TEST_DATABASE_URL at a server with fsync on.
//
//	go test -run '^$' -bench Dispatch -benchtime 1x
func BenchmarkDispatch(b *testing.B) {
	tuned := protocol.Dispatcher{Concurrency: 200, Batch: 200, PollMs: 50}
	for _, bc := range []struct {
		name           string
		events, procs  int
		keys           string
		keyCount, pool int
		d              protocol.Dispatcher
	}{
		{"unkeyed_2procs_tuned", 200_000, 2, "none", 0, 40, tuned},
		{"unkeyed_1proc_tuned", 100_000, 1, "none", 0, 40, tuned},
		{"unkeyed_2procs_2streams", 200_000, 2, "none", 0, 40, protocol.Dispatcher{Concurrency: 200, Batch: 200, PollMs: 50, Options: map[string]any{optStreams: 2}}},
		{"unkeyed_1proc_200k", 200_000, 1, "none", 0, 40, tuned},
		{"keyed_10k_1proc_tuned", 100_000, 1, "many", 10_000, 40, tuned},
		{"keyed_4hot_1proc_tuned", 20_000, 1, "hot", 4, 40, tuned},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				benchDispatchOnce(b, bc.events, bc.procs, bc.keys, bc.keyCount, bc.pool, bc.d)
			}
		})
	}
}

func benchDispatchOnce(b *testing.B, events, procs int, keys string, keyCount, pool int, d protocol.Dispatcher) {
	dsn := peertest.Database(b)
	dir := b.TempDir()
	wl := protocol.Workload{EventType: "bench.event", Handlers: []string{"noop"}, Keys: keys, KeyCount: keyCount,
		PayloadBytes: 128, IDPrefix: "b-"}
	peertest.Run(b, &protocol.Config{Protocol: 1, Role: protocol.RoleSetup, Name: "setup", Store: protocol.Store{Kind: "postgres", DSN: dsn}})
	peertest.Run(b, &protocol.Config{Protocol: 1, Role: protocol.RolePreload, Name: "preload",
		RecordPath: filepath.Join(dir, "preload.rec"), Store: protocol.Store{Kind: "postgres", DSN: dsn, PoolSize: 4}, Workload: wl,
		Publisher: protocol.Publisher{Publishers: 4, Batch: 500, Events: events}})
	// As the harness does after a preload: statistics and a vacuumed
	// table, so the window does not start with the preload's hint bits.
	pgtest.Exec(b, dsn, "VACUUM ANALYZE")
	lsn0 := peertest.WALPosition(b, dsn)

	var disps []*peertest.Proc
	for i := range procs {
		p := peertest.Start(b, &protocol.Config{Protocol: 1, Role: protocol.RoleDispatcher, Name: fmt.Sprint("disp-", i),
			RecordPath: filepath.Join(dir, fmt.Sprintf("disp-%d.rec", i)), CountersIntervalMs: 50,
			Store: protocol.Store{Kind: "postgres", DSN: dsn, PoolSize: pool}, Workload: wl, Dispatcher: d})
		disps = append(disps, p)
	}
	for _, p := range disps {
		p.WaitReady()
	}
	start := time.Now()
	deadline := start.Add(peertest.DrainTimeout)
	for {
		var n int64
		for _, p := range disps {
			n += p.LastCounters().Completed
		}
		if n >= int64(events) {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d completed after %v", n, events, peertest.DrainTimeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
	elapsed := time.Since(start)
	lsn1 := peertest.WALPosition(b, dsn)
	var claims int64
	for _, p := range disps {
		claims += p.Stop().Counters.Claims
	}
	b.ReportMetric(float64(events)/elapsed.Seconds(), "deliveries/s")
	b.ReportMetric(float64(lsn1-lsn0)/float64(events), "WAL-B/delivery")
	b.ReportMetric(float64(events)/float64(claims), "deliveries/claim")
}
