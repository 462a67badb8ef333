package peertest

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/berkcansavur/relaybus/bench/protocol"
	"github.com/berkcansavur/relaybus/bench/record"
)

// EndToEnd is what RunEndToEnd ran and leaves a peer's test to check.
type EndToEnd struct {
	Workload protocol.Workload
	// Poison are the ids of the poison events; Keys every event's key by
	// its id, as published.
	Poison map[string]bool
	Keys   map[string]string
	// Hello and Ready are the two dispatchers' hello and ready lines.
	Hello, Ready []protocol.Message
	// Final is the inspect after the drain, Counters the dispatchers'
	// done counters summed.
	Final    *protocol.Inspect
	Counters protocol.Counters
	// Records are the records of every process of the run.
	Records *record.File
}

// The end-to-end workload's sizes.
const (
	e2ePreloaded, e2ePublished = 300, 200
	e2eEvents                  = e2ePreloaded + e2ePublished
	e2eDeliveries              = e2eEvents * 2           // two handlers
	e2ePoison                  = e2eEvents / 50          // poison_every 50
	e2eDead                    = e2ePoison * 2           // each of a poison event's deliveries
	e2eOK                      = e2eDeliveries - e2eDead // the deliveries that succeed
)

// RunEndToEnd runs the end-to-end workload every peer's TestEndToEnd
// runs, on a fresh database with the store's pool_size poolSize: keyed
// events (7 keys) for two handlers, every delivery failing its first
// attempt (fail_first 1) and every 50th event poison (dead after 3
// attempts), retried with relaybus's backoff at 20 to 100 ms; setup
// twice (it is idempotent), a preload of 300 events, two dispatcher
// processes with settings d, a rate-limited publisher of 200 more events
// while they run, then a drain. It checks what every peer must get out
// of it: the preload's, the publisher's and the final inspect's counts,
// the dead letters, the dispatchers' counters, the publish records
// (CheckPublished) and that every delivery ran exactly once after its
// planted failures (CheckAttempts).
func RunEndToEnd(t *testing.T, poolSize int, d protocol.Dispatcher) *EndToEnd {
	t.Helper()
	dsn := Database(t)
	dir := t.TempDir()
	store := protocol.Store{Kind: "postgres", DSN: dsn, PoolSize: poolSize}
	run := &EndToEnd{Workload: protocol.Workload{
		EventType: "bench.event", Handlers: []string{"a", "b"}, Keys: "many", KeyCount: 7,
		PayloadBytes: 64, IDPrefix: "e2e-", PoisonEvery: 50, FailFirst: 1, MaxAttempts: 3,
		RetryBaseDelayMs: 20, RetryMaxDelayMs: 100,
	}}
	wl := &run.Workload

	for i := range 2 {
		if done := Run(t, &protocol.Config{Protocol: protocol.Version, Role: protocol.RoleSetup, Name: fmt.Sprint("setup-", i), Store: store}); done.Counters == nil {
			t.Errorf("setup %d: done without counters", i)
		}
	}
	files := []string{filepath.Join(dir, "preload.rec"), filepath.Join(dir, "pub.rec")}
	preload := Run(t, &protocol.Config{Protocol: protocol.Version, Role: protocol.RolePreload, Name: "preload",
		RecordPath: files[0], Store: store, Workload: *wl,
		Publisher: protocol.Publisher{Publishers: 3, Batch: 20, Events: e2ePreloaded}})
	if preload.Counters.Published != e2ePreloaded || preload.Publish == nil || preload.Publish.Calls != e2ePreloaded/20 {
		t.Errorf("preload done: counters %+v summary %+v, want %d events in %d calls", preload.Counters, preload.Publish, e2ePreloaded, e2ePreloaded/20)
	}
	if in := Inspect(t, dsn); in.Pending != e2ePreloaded*2 || in.Processing+in.Completed+in.Dead != 0 {
		t.Errorf("after preload: %+v, want %d pending deliveries", in, e2ePreloaded*2)
	}

	var disps []*Proc
	for i := range 2 {
		name := fmt.Sprint("disp-", i)
		files = append(files, filepath.Join(dir, name+".rec"))
		p := Start(t, &protocol.Config{Protocol: protocol.Version, Role: protocol.RoleDispatcher, Name: name,
			RecordPath: files[len(files)-1], CountersIntervalMs: 200, Store: store, Workload: *wl, Dispatcher: d})
		run.Ready = append(run.Ready, p.WaitReady())
		run.Hello = append(run.Hello, p.Messages()[0])
		disps = append(disps, p)
	}
	// A rate-limited publisher while the dispatchers run, on the indexes
	// after the preload's, in two goroutines with a stride of 1.
	pub := Run(t, &protocol.Config{Protocol: protocol.Version, Role: protocol.RolePublisher, Name: "pub",
		RecordPath: files[1], Store: store, Workload: *wl,
		Publisher: protocol.Publisher{Publishers: 2, Batch: 7, Events: e2ePublished, RatePerSec: 1000, StartIndex: e2ePreloaded}})
	if pub.Counters.Published != e2ePublished {
		t.Errorf("publisher done: %+v, want %d events", pub.Counters, e2ePublished)
	}
	run.Final = Drain(t, dsn)
	run.Counters = StopAll(t, disps)

	// 10 poison events (index % 50 == 49): each of their deliveries fails
	// 3 times and is dead; every other delivery fails its first attempt
	// (fail_first 1) and succeeds on its second.
	run.Poison = map[string]bool{}
	for i := range int64(e2eEvents) {
		if protocol.IsPoison(i, wl.PoisonEvery) {
			run.Poison[protocol.EventID(wl.IDPrefix, i)] = true
		}
	}
	if len(run.Poison) != e2ePoison {
		t.Fatalf("%d poison events, want %d", len(run.Poison), e2ePoison)
	}
	final, c := run.Final, run.Counters
	if final.Completed != e2eOK || final.Dead != e2eDead || final.Pending != 0 || final.Processing != 0 {
		t.Errorf("final inspect %+v, want %d completed, %d dead, nothing left", final, e2eOK, e2eDead)
	}
	if len(final.DeadLetters) != e2eDead || final.DeadLettersTruncated {
		t.Errorf("%d dead letters (truncated %v), want %d", len(final.DeadLetters), final.DeadLettersTruncated, e2eDead)
	}
	for _, dl := range final.DeadLetters {
		if !run.Poison[dl.EventID] || dl.Attempts != 3 || !strings.Contains(dl.Error, "planted failure (poison=true, attempt 3)") ||
			!slices.Contains(wl.Handlers, dl.Handler) {
			t.Errorf("dead letter %+v is not a poison event's third failure", dl)
		}
	}
	if c.Handled != e2eOK || c.Completed != e2eOK || c.Buried != e2eDead ||
		c.HandlerFailed != e2eOK+e2eDead*3 || c.Rescheduled != e2eOK+e2eDead*2 {
		t.Errorf("dispatcher counters %+v, want handled = completed = %d, buried %d, failed %d, rescheduled %d",
			c, e2eOK, e2eDead, e2eOK+e2eDead*3, e2eOK+e2eDead*2)
	}
	run.Records = ReadRecords(t, files...)
	run.Keys = CheckPublished(t, run.Records, wl, e2eEvents)
	CheckAttempts(t, run.Records, wl, run.Keys, run.Poison)
	return run
}

// CheckReady checks that a ready line lists applied and ignored among
// its applied and ignored options.
func CheckReady(t testing.TB, ready protocol.Message, applied, ignored []string) {
	t.Helper()
	for _, o := range applied {
		if !slices.Contains(ready.Applied, o) {
			t.Errorf("ready: applied %v lacks %s", ready.Applied, o)
		}
	}
	for _, o := range ignored {
		if !slices.Contains(ready.Ignored, o) {
			t.Errorf("ready: ignored %v lacks %s", ready.Ignored, o)
		}
	}
}

// CheckPublished checks the publish records of the events 0 to events-1
// of wl (published with stride 1): each recorded once, committed (not
// uncertain), with its event type and key, and its call's start (from
// which the harness measures publish latency) at or before its commit.
// It returns each event's key by its id.
func CheckPublished(t testing.TB, recs *record.File, wl *protocol.Workload, events int64) map[string]string {
	t.Helper()
	keys := map[string]string{}
	for _, p := range recs.Published {
		if p.Uncertain || p.EventType != wl.EventType || p.CommitNs == 0 || p.CallStartNs <= 0 || p.CallStartNs > p.CommitNs {
			t.Errorf("published record %+v", p)
		}
		if _, dup := keys[p.EventID]; dup {
			t.Errorf("event %s recorded as published twice", p.EventID)
		}
		keys[p.EventID] = p.Key
	}
	if int64(len(keys)) != events {
		t.Errorf("%d events recorded as published, want %d", len(keys), events)
	}
	for i := range events {
		id, want := protocol.EventID(wl.IDPrefix, i), protocol.Key(wl.Keys, wl.KeyCount, i)
		if k, ok := keys[id]; !ok || k != want {
			t.Errorf("event %s: published %v with key %q, want key %q", id, ok, k, want)
		}
	}
	return keys
}

// CheckAttempts checks the handle records of a run without faults
// against the published events (keys, as CheckPublished returns them):
// every (event, handler) of wl handled with attempts 1, 2, ... and its
// event's key, failed wl.FailFirst times and then ok once, or, for a
// poison event, failed wl.MaxAttempts times and never ok; and nothing
// handled that was not published.
func CheckAttempts(t testing.TB, recs *record.File, wl *protocol.Workload, keys map[string]string, poison map[string]bool) {
	t.Helper()
	type pair struct{ event, handler string }
	byPair := map[pair][]record.Handled{}
	for _, h := range recs.Handled {
		if _, ok := keys[h.EventID]; !ok {
			t.Errorf("handled %s/%s was never published", h.EventID, h.Handler)
			continue
		}
		k := pair{h.EventID, h.Handler}
		byPair[k] = append(byPair[k], h)
	}
	if want := len(keys) * len(wl.Handlers); len(byPair) != want {
		t.Errorf("%d (event, handler) pairs handled, want %d", len(byPair), want)
	}
	for id, key := range keys {
		want := slices.Repeat([]bool{false}, wl.FailFirst)
		want = append(want, true)
		if poison[id] {
			want = slices.Repeat([]bool{false}, wl.MaxAttempts)
		}
		for _, h := range wl.Handlers {
			hs := byPair[pair{id, h}]
			slices.SortFunc(hs, func(a, b record.Handled) int { return a.Attempt - b.Attempt })
			var got []bool
			for i, r := range hs {
				got = append(got, r.OK)
				if r.Attempt != i+1 || r.Key != key || r.HandleNs < 1 {
					t.Errorf("(%s, %s) handle %d: %+v, want attempt %d and key %q", id, h, i, r, i+1, key)
				}
			}
			if !slices.Equal(got, want) {
				t.Errorf("(%s, %s): handled ok %v, want %v (exactly once after the planted failures)", id, h, got, want)
			}
		}
	}
}
