package main

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/berkcansavur/relaybus/bench/protocol"
	"github.com/berkcansavur/relaybus/bench/worker/workerkit/peertest"
)

// TestEndToEnd: peertest's end-to-end workload (keys, two handlers,
// planted failures and poison, a preload and a publisher beside two
// dispatcher processes), every job handled exactly once after its planted
// failures. River orders nothing by key: a handle's sequence is 0.
func TestEndToEnd(t *testing.T) {
	t.Parallel()
	run := peertest.RunEndToEnd(t, 10, protocol.Dispatcher{Concurrency: 8, Batch: 10, PollMs: 50, CompletionWindowUs: 500})
	for i, ready := range run.Ready {
		peertest.CheckReady(t, ready,
			[]string{"dispatcher.concurrency", "dispatcher.poll_ms", "workload.poison_every", "workload.retry_base_delay_ms"},
			[]string{"dispatcher.batch", "dispatcher.completion_window_us", "workload.keys", "workload.key_count"})
		if hello := run.Hello[i]; hello.Type != protocol.TypeHello || hello.Version != "river v0.51.2" ||
			!slices.Contains(hello.Capabilities, "peer") || !slices.Contains(hello.Capabilities, "no-key-order") {
			t.Errorf("dispatcher %d hello = %+v", i, hello)
		}
	}
	for _, h := range run.Records.Handled {
		if h.Sequence != 0 {
			t.Errorf("handle %+v: want sequence 0", h)
		}
	}
}

func TestKilledDispatcherIsRescued(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("waits for River's leader election and its rescuer, which runs every 30s (not configurable): a minute, not -short")
	}
	dsn := peertest.Database(t)
	dir := t.TempDir()
	store := protocol.Store{Kind: "postgres", DSN: dsn, PoolSize: 6}
	// 50ms handlers, four at a time: the dispatcher is mid-batch when it
	// is killed.
	wl := protocol.Workload{EventType: "bench.event", Handlers: []string{"h"}, PayloadBytes: 32, IDPrefix: "kill-",
		HandlerCostUs: 50_000, MaxAttempts: 5, RetryBaseDelayMs: 20, RetryMaxDelayMs: 100}
	const events = 100
	peertest.Run(t, &protocol.Config{Protocol: 1, Role: protocol.RoleSetup, Name: "setup", Store: store})
	peertest.Run(t, &protocol.Config{Protocol: 1, Role: protocol.RolePreload, Name: "preload",
		RecordPath: filepath.Join(dir, "preload.rec"), Store: store, Workload: wl,
		Publisher: protocol.Publisher{Publishers: 1, Batch: 50, Events: events}})

	disp := protocol.Dispatcher{Concurrency: 4, PollMs: 50, LeaseMs: 1000}
	dispatcher := func(name string) *peertest.Proc {
		p := peertest.Start(t, &protocol.Config{Protocol: 1, Role: protocol.RoleDispatcher, Name: name,
			RecordPath: filepath.Join(dir, name+".rec"), CountersIntervalMs: 50, Store: store, Workload: wl, Dispatcher: disp})
		if ready := p.WaitReady(); !slices.Contains(ready.Applied, "dispatcher.lease_ms") {
			t.Errorf("%s ready: applied %v lacks dispatcher.lease_ms", name, ready.Applied)
		}
		return p
	}
	a := dispatcher("disp-a")
	a.WaitHandled(8)
	a.Kill()
	atKill := peertest.Inspect(t, dsn)
	if atKill.Processing == 0 || atKill.Completed == events {
		t.Fatalf("after the kill: %+v; want jobs left running", atKill)
	}
	t.Logf("after SIGKILL: %+v", atKill)

	start := time.Now()
	b := dispatcher("disp-b")
	final := peertest.Drain(t, dsn)
	t.Logf("disp-b drained the store %v after it started", time.Since(start).Round(time.Second))
	b.Stop()
	if final.Completed != events || final.Dead != 0 {
		t.Errorf("final inspect %+v, want %d completed", final, events)
	}

	ra := peertest.ReadRecords(t, filepath.Join(dir, "disp-a.rec"))
	rb := peertest.ReadRecords(t, filepath.Join(dir, "disp-b.rec"))
	okA, okB := map[string]int{}, map[string]int{}
	for _, h := range ra.Handled {
		if h.OK {
			okA[h.EventID]++
		}
	}
	rescued := 0
	for _, h := range rb.Handled {
		if h.OK {
			okB[h.EventID]++
		}
		if h.Attempt == 2 {
			rescued++
		} else if h.Attempt != 1 {
			t.Errorf("disp-b record %+v: want attempt 1, or 2 for a rescued job", h)
		}
	}
	// Exactly the jobs left running by the kill were rescued and run a
	// second time; a job disp-a had handled but not completed is handled
	// twice (at least once), every other job exactly once.
	if int64(rescued) != atKill.Processing {
		t.Errorf("%d jobs rerun at attempt 2, want the %d left running", rescued, atKill.Processing)
	}
	for i := range int64(events) {
		id := protocol.EventID(wl.IDPrefix, i)
		if n := okA[id] + okB[id]; n < 1 || n > 2 || okA[id] > 1 || okB[id] > 1 {
			t.Errorf("event %s handled ok %d times by disp-a and %d by disp-b", id, okA[id], okB[id])
		}
	}
}

func TestDatabaseRestart(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("restarts a PostgreSQL server of its own and may wait for River's rescuer (every 30s): not -short")
	}
	// A server of its own: restarting the shared one would break the
	// tests running beside this one.
	srv := peertest.PrivateServer(t)
	dsn := peertest.NewDatabase(t, srv)
	dir := t.TempDir()
	store := protocol.Store{Kind: "postgres", DSN: dsn, PoolSize: 8}
	wl := protocol.Workload{EventType: "bench.event", Handlers: []string{"h"}, PayloadBytes: 64, IDPrefix: "restart-",
		HandlerCostUs: 2000, MaxAttempts: 10, RetryBaseDelayMs: 20, RetryMaxDelayMs: 200}
	const preloaded, published = 1000, 1000
	peertest.Run(t, &protocol.Config{Protocol: 1, Role: protocol.RoleSetup, Name: "setup", Store: store})
	peertest.Run(t, &protocol.Config{Protocol: 1, Role: protocol.RolePreload, Name: "preload",
		RecordPath: filepath.Join(dir, "preload.rec"), Store: store, Workload: wl,
		Publisher: protocol.Publisher{Publishers: 2, Batch: 100, Events: preloaded}})

	d := peertest.Start(t, &protocol.Config{Protocol: 1, Role: protocol.RoleDispatcher, Name: "disp",
		RecordPath: filepath.Join(dir, "disp.rec"), CountersIntervalMs: 50, Store: store, Workload: wl,
		Dispatcher: protocol.Dispatcher{Concurrency: 10, PollMs: 50, LeaseMs: 2000}})
	d.WaitReady()
	pub := peertest.Start(t, &protocol.Config{Protocol: 1, Role: protocol.RolePublisher, Name: "pub",
		RecordPath: filepath.Join(dir, "pub.rec"), Store: store, Workload: wl,
		Publisher: protocol.Publisher{Publishers: 2, Batch: 5, Events: published, RatePerSec: 400, StartIndex: preloaded}})
	pub.WaitReady()
	d.WaitHandled(200)
	if err := srv.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Logf("restarted the server after %d jobs", d.LastCounters().Handled)
	pubDone := pub.Wait()
	final := peertest.Drain(t, dsn)
	select {
	case <-d.Exited():
		t.Fatalf("the dispatcher exited during the run: %v", d.Err())
	default:
	}
	dispDone := d.Stop()
	t.Logf("publisher %+v; dispatcher %+v; final %+v", pubDone.Counters, dispDone.Counters, final)

	recs := peertest.ReadRecords(t, filepath.Join(dir, "preload.rec"), filepath.Join(dir, "pub.rec"), filepath.Join(dir, "disp.rec"))
	uncertain := map[string]bool{}
	certain := map[string]bool{}
	for _, p := range recs.Published {
		if p.Uncertain {
			uncertain[p.EventID] = true
		} else {
			certain[p.EventID] = true
		}
	}
	ok := map[string]int{}
	for _, h := range recs.Handled {
		if h.OK {
			ok[h.EventID]++
		}
		if !certain[h.EventID] && !uncertain[h.EventID] {
			t.Errorf("handled %+v was never published", h)
		}
	}
	redelivered := 0
	for id := range certain {
		switch n := ok[id]; {
		case n == 0:
			t.Errorf("event %s published and never handled", id)
		case n > 1:
			redelivered += n - 1
		}
	}
	// One job per event, completed once however often it was handled.
	if final.Completed != int64(len(ok)) || final.Dead != 0 {
		t.Errorf("final inspect %+v, want %d completed (events handled), none dead", final, len(ok))
	}
	t.Logf("%d events certain, %d uncertain, %d redeliveries (at least once)", len(certain), len(uncertain), redelivered)
}
