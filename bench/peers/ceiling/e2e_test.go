package main

import (
	"cmp"
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	"github.com/berkcansavur/relaybus/bench/protocol"
	"github.com/berkcansavur/relaybus/bench/record"
	"github.com/berkcansavur/relaybus/bench/worker/workerkit/peertest"
)

// checkRecords checks the records of a run without faults of wl's
// events 0 to events-1 (peertest.CheckPublished, CheckAttempts; poison
// are the poison events' ids) and what the lane pattern adds to them
// (checkLanes).
func checkRecords(t *testing.T, recs *record.File, wl *protocol.Workload, events int64, poison map[string]bool) {
	t.Helper()
	keys := peertest.CheckPublished(t, recs, wl, events)
	peertest.CheckAttempts(t, recs, wl, keys, poison)
	checkLanes(t, recs, keys)
}

// checkLanes checks what the lane pattern adds to the records (keys are
// the events' keys by id): every handle carries its end, its holder and
// a token, no token is run twice, every ok handle's completion was
// recorded once, after it; and per (handler, key) the ok handles ran in
// sequence order, the sequences are 1..n, and no two handles overlapped
// in time.
func checkLanes(t *testing.T, recs *record.File, keys map[string]string) {
	t.Helper()
	tokens := map[string]bool{}
	type hk struct{ handler, key string }
	perKey := map[hk][]record.Handled{}
	for _, h := range recs.Handled {
		if h.EndNs < h.HandleNs || h.Holder == "" || h.Token == "" {
			t.Errorf("handle %+v lacks its end, holder or token", h)
		}
		tk := h.EventID + "\x00" + h.Handler + "\x00" + h.Token
		if tokens[tk] {
			t.Errorf("token %q of %s/%s run twice", h.Token, h.EventID, h.Handler)
		}
		tokens[tk] = true
		if key := keys[h.EventID]; key != "" {
			perKey[hk{h.Handler, key}] = append(perKey[hk{h.Handler, key}], h)
		}
		if (h.Key == "") != (h.Sequence == 0) {
			t.Errorf("handle %+v: want a sequence exactly when keyed", h)
		}
	}
	// Every ok handle's completion committed and was recorded once,
	// after the handle, with its attempt and token.
	type claim struct {
		event, handler, token string
		attempt               int
	}
	okEnd := map[claim]int64{}
	for _, h := range recs.Handled {
		if h.OK {
			okEnd[claim{h.EventID, h.Handler, h.Token, h.Attempt}] = h.EndNs
		}
	}
	completed := map[claim]bool{}
	for _, c := range recs.Completed {
		k := claim{c.EventID, c.Handler, c.Token, c.Attempt}
		end, ok := okEnd[k]
		if !ok || completed[k] || c.CompletedNs < end {
			t.Errorf("completion %+v: no ok handle of that claim, completed twice, or before the handle ended", c)
		}
		completed[k] = true
	}
	if len(completed) != len(okEnd) {
		t.Errorf("%d completions recorded, want one per ok handle (%d)", len(completed), len(okEnd))
	}
	for k, hs := range perKey {
		slices.SortFunc(hs, func(a, b record.Handled) int { return cmp.Compare(a.HandleNs, b.HandleNs) })
		var seqs []int64
		for i, h := range hs {
			if i > 0 && hs[i-1].EndNs > h.HandleNs {
				t.Errorf("%v: %s (sequence %d) started before %s (sequence %d) ended", k, h.EventID, h.Sequence, hs[i-1].EventID, hs[i-1].Sequence)
			}
			if !h.OK {
				continue
			}
			if n := len(seqs); n > 0 && seqs[n-1] >= h.Sequence {
				t.Errorf("%v: sequence %d handled after %d", k, h.Sequence, seqs[n-1])
			}
			seqs = append(seqs, h.Sequence)
		}
		// The dead events' deliveries have no ok handle; the others'
		// sequences are 1..n with the dead ones' left out.
		all := map[int64]bool{}
		for _, h := range hs {
			all[h.Sequence] = true
		}
		for s := int64(1); s <= int64(len(all)); s++ {
			if !all[s] {
				t.Errorf("%v: sequences %v have a gap at %d", k, seqs, s)
				break
			}
		}
	}
}

// TestEndToEnd: peertest's end-to-end workload (keys, two handlers,
// planted failures and poison, a preload and a publisher beside two
// dispatcher processes of two streams each): exactly once after the
// planted failures, in key order.
func TestEndToEnd(t *testing.T) {
	t.Parallel()
	run := peertest.RunEndToEnd(t, 4, protocol.Dispatcher{Concurrency: 8, Batch: 25, PollMs: 20, LeaseMs: 1000,
		Options: map[string]any{optStreams: 2, "lanes": 3}})
	for i, ready := range run.Ready {
		peertest.CheckReady(t, ready,
			[]string{"dispatcher.concurrency", "dispatcher.batch", "dispatcher.poll_ms", "dispatcher.options.streams",
				"workload.keys", "workload.poison_every", "workload.retry_base_delay_ms"},
			[]string{"dispatcher.lease_ms", "dispatcher.options.lanes"})
		if hello := run.Hello[i]; hello.Type != protocol.TypeHello || hello.Version != peerVersion ||
			protocol.PeerName(hello.Capabilities) != "ceiling" || !slices.Contains(hello.Capabilities, CapabilityNoFaults) ||
			slices.Contains(hello.Capabilities, protocol.CapabilityNoKeyOrder) {
			t.Errorf("dispatcher %d hello = %+v", i, hello)
		}
	}
	if run.Counters.Claims == 0 {
		t.Errorf("dispatcher counters %+v: no claims", run.Counters)
	}
	wl, final := &run.Workload, run.Final
	if !final.KeysReported || len(final.Keys) != wl.KeyCount {
		t.Errorf("final inspect reports keys %v: %+v, want the %d keys", final.KeysReported, final.Keys, wl.KeyCount)
	}
	for _, k := range final.Keys {
		if k.LastSequence != k.Events || k.MaxSequence != k.Events {
			t.Errorf("key state %+v: want sequences 1..events", k)
		}
	}
	checkLanes(t, run.Records, run.Keys)
}

// TestDispatchCells runs the work cells' shapes small: unkeyed, 4 hot
// keys and many keys, a preload drained by two dispatcher processes,
// exactly once and in key order.
func TestDispatchCells(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		keys      string
		keyCount  int
		events    int
		handlers  []string
		dispatch  protocol.Dispatcher
		publisher bool // a publisher beside the dispatchers (the mixed cell)
	}{
		{"unkeyed", "none", 0, 4000, []string{"noop"}, protocol.Dispatcher{Concurrency: 50, Batch: 200, PollMs: 50}, false},
		{"hot keys", "hot", 4, 2000, []string{"noop"}, protocol.Dispatcher{Concurrency: 50, Batch: 200, PollMs: 50}, false},
		{"many keys", "many", 1000, 3000, []string{"h1", "h2"}, protocol.Dispatcher{Concurrency: 10, Batch: 50, PollMs: 50}, false},
		{"mixed", "many", 100, 1000, []string{"noop"}, protocol.Dispatcher{Concurrency: 10, Batch: 10, PollMs: 10}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if testing.Short() {
				tc.events /= 4
			}
			dsn := peertest.Database(t)
			dir := t.TempDir()
			store := protocol.Store{Kind: "postgres", DSN: dsn, PoolSize: 8}
			wl := protocol.Workload{EventType: "bench.event", Handlers: tc.handlers, Keys: tc.keys, KeyCount: tc.keyCount,
				PayloadBytes: 128, IDPrefix: "c-"}
			peertest.Run(t, &protocol.Config{Protocol: 1, Role: protocol.RoleSetup, Name: "setup", Store: store})
			files := []string{filepath.Join(dir, "preload.rec")}
			preload := tc.events
			if tc.publisher {
				preload = tc.events / 2
			}
			peertest.Run(t, &protocol.Config{Protocol: 1, Role: protocol.RolePreload, Name: "preload",
				RecordPath: files[0], Store: store, Workload: wl,
				Publisher: protocol.Publisher{Publishers: 4, Batch: 100, Events: preload}})
			var disps []*peertest.Proc
			for i := range 2 {
				name := fmt.Sprint("disp-", i)
				files = append(files, filepath.Join(dir, name+".rec"))
				p := peertest.Start(t, &protocol.Config{Protocol: 1, Role: protocol.RoleDispatcher, Name: name,
					RecordPath: files[len(files)-1], Store: store, Workload: wl, Dispatcher: tc.dispatch})
				p.WaitReady()
				disps = append(disps, p)
			}
			if tc.publisher {
				files = append(files, filepath.Join(dir, "pub.rec"))
				peertest.Run(t, &protocol.Config{Protocol: 1, Role: protocol.RolePublisher, Name: "pub",
					RecordPath: files[len(files)-1], Store: store, Workload: wl,
					Publisher: protocol.Publisher{Publishers: 4, Batch: 1, Events: tc.events - preload, RatePerSec: 500, StartIndex: int64(preload)}})
			}
			final := peertest.Drain(t, dsn)
			completed := peertest.StopAll(t, disps).Completed
			want := int64(tc.events * len(tc.handlers))
			if final.Completed != want || final.Dead != 0 || completed != want {
				t.Errorf("final inspect %+v, dispatchers completed %d; want %d completed", final, completed, want)
			}
			checkRecords(t, peertest.ReadRecords(t, files...), &wl, int64(tc.events), nil)
		})
	}
}

// TestGracefulStop: a dispatcher stopped with SIGTERM in the middle of a
// backlog completes what it claimed and exits; another one takes the
// rest: every delivery is handled exactly once.
func TestGracefulStop(t *testing.T) {
	t.Parallel()
	dsn := peertest.Database(t)
	dir := t.TempDir()
	store := protocol.Store{Kind: "postgres", DSN: dsn, PoolSize: 4}
	wl := protocol.Workload{EventType: "bench.event", Handlers: []string{"h"}, Keys: "hot", KeyCount: 3,
		PayloadBytes: 32, IDPrefix: "stop-", HandlerCostUs: 300}
	events, stopAfter := int64(3000), int64(300)
	if testing.Short() {
		events, stopAfter = 1000, 100
	}
	peertest.Run(t, &protocol.Config{Protocol: 1, Role: protocol.RoleSetup, Name: "setup", Store: store})
	peertest.Run(t, &protocol.Config{Protocol: 1, Role: protocol.RolePreload, Name: "preload",
		RecordPath: filepath.Join(dir, "preload.rec"), Store: store, Workload: wl,
		Publisher: protocol.Publisher{Publishers: 2, Batch: 100, Events: int(events)}})
	disp := protocol.Dispatcher{Concurrency: 8, Batch: 50, PollMs: 20}
	start := func(name string) *peertest.Proc {
		p := peertest.Start(t, &protocol.Config{Protocol: 1, Role: protocol.RoleDispatcher, Name: name,
			RecordPath: filepath.Join(dir, name+".rec"), CountersIntervalMs: 20, Store: store, Workload: wl, Dispatcher: disp})
		p.WaitReady()
		return p
	}
	a := start("disp-a")
	a.WaitHandled(stopAfter)
	doneA := a.Stop()
	if c := doneA.Counters; c.Completed != c.Handled || c.Handled >= events {
		t.Errorf("disp-a stopped with %+v: want every handled delivery completed, and a backlog left", c)
	}
	b := start("disp-b")
	final := peertest.Drain(t, dsn)
	b.Stop()
	if final.Completed != events || final.Dead != 0 {
		t.Errorf("final inspect %+v, want %d completed", final, events)
	}
	checkRecords(t, peertest.ReadRecords(t, filepath.Join(dir, "preload.rec"), filepath.Join(dir, "disp-a.rec"), filepath.Join(dir, "disp-b.rec")),
		&wl, events, nil)
}
