package main

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/berkcansavur/relaybus/bench/protocol"
	"github.com/berkcansavur/relaybus/bench/worker/workerkit/peertest"
)

// BenchmarkDispatch measures River alone, as this peer drives it, on the
// scenario 2 workload (preloaded events, one no-op handler, 128-byte
// payloads, preloaded by 4 publishers in batches of 100): one dispatcher
// process drains a preload of jobs. It reports jobs per second
// (from ready to the last completion event, within one counters
// interval of 50ms) and the WAL the server wrote per job while
// dispatching and per event while preloading. It is not the harness's
// comparison (no ABBA windows, no statistics); it shows phase 2 what the
// mapped settings do, FetchCooldown above all.
//
//	go test -run '^$' -bench Dispatch -benchtime 1x
func BenchmarkDispatch(b *testing.B) {
	for _, bc := range []struct {
		name string
		// jobs: fewer where River's FetchCooldown caps a dispatcher at
		// MaxWorkers jobs per cooldown (10 per 100ms).
		jobs, pool int
		d          protocol.Dispatcher
	}{
		{"defaults_conc10_poll1s", 3000, 10, protocol.Dispatcher{Concurrency: 10, Batch: 10, PollMs: 1000}},
		{"defaults_conc10_poll1s_cooldown1ms", 20_000, 10, protocol.Dispatcher{Concurrency: 10, Batch: 10, PollMs: 1000,
			Options: map[string]any{optFetchCooldownMs: 1}}},
		{"tuned_conc200_poll50ms", 20_000, 40, protocol.Dispatcher{Concurrency: 200, Batch: 200, PollMs: 50}},
		{"tuned_conc200_poll50ms_cooldown1ms", 20_000, 40, protocol.Dispatcher{Concurrency: 200, Batch: 200, PollMs: 50,
			Options: map[string]any{optFetchCooldownMs: 1}}},
		// As River's own benchmark runs it (options.go).
		{"as_river_bench", 20_000, 40, protocol.Dispatcher{Concurrency: 200, Batch: 200, PollMs: 50,
			Options: map[string]any{optMaxWorkers: riverBenchMaxWorkers, optFetchCooldownMs: riverBenchFetchCooldownMs,
				optFetchPollIntervalMs: riverBenchFetchPollIntervalMs}}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				benchDispatchOnce(b, bc.jobs, bc.pool, bc.d)
			}
		})
	}
}

func benchDispatchOnce(b *testing.B, jobs, pool int, d protocol.Dispatcher) {
	dsn := peertest.Database(b)
	dir := b.TempDir()
	store := protocol.Store{Kind: "postgres", DSN: dsn, PoolSize: pool}
	wl := protocol.Workload{EventType: "bench.event", Handlers: []string{"noop"}, PayloadBytes: 128, IDPrefix: "b-"}
	peertest.Run(b, &protocol.Config{Protocol: 1, Role: protocol.RoleSetup, Name: "setup", Store: store})
	lsn0 := peertest.WALPosition(b, dsn)
	peertest.Run(b, &protocol.Config{Protocol: 1, Role: protocol.RolePreload, Name: "preload",
		RecordPath: filepath.Join(dir, "preload.rec"), Store: protocol.Store{Kind: "postgres", DSN: dsn, PoolSize: 4},
		Workload: wl, Publisher: protocol.Publisher{Publishers: 4, Batch: 100, Events: jobs}})
	lsn1 := peertest.WALPosition(b, dsn)

	p := peertest.Start(b, &protocol.Config{Protocol: 1, Role: protocol.RoleDispatcher, Name: "disp",
		RecordPath: filepath.Join(dir, "disp.rec"), CountersIntervalMs: 50, Store: store, Workload: wl, Dispatcher: d})
	ready := p.WaitReady()
	deadline := time.Now().Add(peertest.DrainTimeout)
	var last protocol.Message
	for {
		msgs := p.Messages()
		last = msgs[len(msgs)-1]
		if last.Counters != nil && last.Counters.Completed >= int64(jobs) {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("not drained after %v: %+v", peertest.DrainTimeout, last.Counters)
		}
		time.Sleep(10 * time.Millisecond)
	}
	lsn2 := peertest.WALPosition(b, dsn)
	p.Stop()
	secs := float64(last.TimeNs-ready.TimeNs) / 1e9
	b.ReportMetric(float64(jobs)/secs, "jobs/s")
	b.ReportMetric(float64(lsn2-lsn1)/float64(jobs), "WAL-B/job")
	b.ReportMetric(float64(lsn1-lsn0)/float64(jobs), "preload-WAL-B/event")
}
