package worker

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berkcansavur/relaybus/bench/protocol"
	"github.com/berkcansavur/relaybus/bench/record"
	_ "github.com/berkcansavur/relaybus/internal/dbenv/container" // RELAYBUS_TEST_DB_PROVIDER=testcontainers (CI's Testcontainers step)
	"github.com/berkcansavur/relaybus/internal/dbenv/dbtest"
	"github.com/berkcansavur/relaybus/relaybus"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// runWorker runs Main in-process with cfg and returns its messages.
func runWorker(t *testing.T, ctx context.Context, cfg any) (int, []protocol.Message) {
	t.Helper()
	in, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	code := Main(ctx, bytes.NewReader(in), &out, &errOut)
	var msgs []protocol.Message
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		var m protocol.Message
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("stdout line %q is not JSON: %v", sc.Text(), err)
		}
		msgs = append(msgs, m)
	}
	if code != 0 {
		t.Logf("worker stderr:\n%s", errOut.String())
	}
	return code, msgs
}

func last(t *testing.T, msgs []protocol.Message, typ string) protocol.Message {
	t.Helper()
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Type == typ {
			return msgs[i]
		}
	}
	t.Fatalf("no %s message in %+v", typ, msgs)
	return protocol.Message{}
}

func TestHelloAndBadConfig(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, config, want string }{
		{"not json", `{`, "not valid JSON"},
		{"wrong protocol", `{"protocol":2,"role":"setup","store":{"kind":"postgres","dsn":"x"}}`, "protocol 2"},
		{"unknown role", `{"protocol":1,"role":"juggle","store":{"kind":"postgres","dsn":"x"}}`, `unknown role "juggle"`},
		{"unknown store", `{"protocol":1,"role":"setup","store":{"kind":"sqlite"}}`, `unknown store kind "sqlite"`},
		{"no record path", `{"protocol":1,"role":"dispatcher","store":{"kind":"postgres","dsn":"x"}}`, "needs record_path"},
		{"preload without count", `{"protocol":1,"role":"preload","record_path":"/x","store":{"kind":"postgres","dsn":"x"},
			"workload":{"event_type":"t","handlers":["h"],"payload_bytes":10},"publisher":{"publishers":1,"batch":1}}`, "preload needs a positive count"},
		{"dispatcher without name", `{"protocol":1,"role":"dispatcher","record_path":"/x","store":{"kind":"postgres","dsn":"x"},
			"workload":{"event_type":"t","handlers":["h"],"payload_bytes":10}}`, "dispatcher needs a name"},
		{"batch calls without batch max", `{"protocol":1,"role":"dispatcher","name":"d","record_path":"/x","store":{"kind":"postgres","dsn":"x"},
			"workload":{"event_type":"t","handlers":["h"],"payload_bytes":10},"dispatcher":{"handler_batch_calls":4}}`, "handler_batch_calls 4 needs handler_batch_max"},
		{"batch calls out of range", `{"protocol":1,"role":"dispatcher","name":"d","record_path":"/x","store":{"kind":"postgres","dsn":"x"},
			"workload":{"event_type":"t","handlers":["h"],"payload_bytes":10},"dispatcher":{"handler_batch_max":20,"handler_batch_calls":-1}}`, "handler_batch_calls -1 out of range"},
		{"bad keys", `{"protocol":1,"role":"publisher","record_path":"/x","store":{"kind":"postgres","dsn":"x"},
			"workload":{"event_type":"t","handlers":["h"],"payload_bytes":10,"keys":"hot"},"publisher":{"publishers":1,"batch":1}}`, "key_count"},
		{"handler twice", `{"protocol":1,"role":"publisher","record_path":"/x","store":{"kind":"postgres","dsn":"x"},
			"workload":{"event_type":"t","handlers":["h","h"],"payload_bytes":10},"publisher":{"publishers":1,"batch":1}}`, `handler "h" listed twice`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			code := Main(context.Background(), strings.NewReader(tc.config), &out, io.Discard)
			if code != 2 {
				t.Errorf("exit code %d, want 2", code)
			}
			lines := strings.Split(strings.TrimSpace(out.String()), "\n")
			var hello, done protocol.Message
			json.Unmarshal([]byte(lines[0]), &hello)
			json.Unmarshal([]byte(lines[len(lines)-1]), &done)
			if hello.Type != protocol.TypeHello || hello.Protocol != protocol.Version || hello.Version != relaybus.Version {
				t.Errorf("first line %+v is not this worker's hello", hello)
			}
			if done.Type != protocol.TypeDone || !strings.Contains(done.Error, tc.want) {
				t.Errorf("last line %+v, want done with an error containing %q", done, tc.want)
			}
		})
	}
}

func TestClassifyOptions(t *testing.T) {
	t.Parallel()
	raw := []byte(`{"protocol":1,"role":"dispatcher","name":"d","future_top":1,"cpu_profile_path":"/p",
		"store":{"kind":"postgres","dsn":"x","pool_size":0,"options":{"completion_history":true}},
		"dispatcher":{"concurrency":50,"batch":0,"completion_window_disabled":true,"lane_claim":"adaptive","options":{"notify":true}}}`)
	applied, ignored, err := optionRules.Classify(raw)
	if err != nil {
		t.Fatal(err)
	}
	wantApplied := []string{"cpu_profile_path", "dispatcher.completion_window_disabled", "dispatcher.concurrency", "store.dsn", "store.kind", "store.options.completion_history"}
	wantIgnored := []string{"dispatcher.lane_claim", "dispatcher.options.notify", "future_top"}
	if strings.Join(applied, ",") != strings.Join(wantApplied, ",") {
		t.Errorf("applied %v, want %v", applied, wantApplied)
	}
	if strings.Join(ignored, ",") != strings.Join(wantIgnored, ",") {
		t.Errorf("ignored %v, want %v", ignored, wantIgnored)
	}
}

func TestParseStoreOptions(t *testing.T) {
	t.Parallel()
	o, err := parseStoreOptions(map[string]any{"completion_history": true, "unknown": 3})
	if err != nil || !o.completionHistory {
		t.Fatalf("parseStoreOptions = %+v, %v; want completion history on", o, err)
	}
	if o, err := parseStoreOptions(nil); err != nil || o.completionHistory {
		t.Fatalf("parseStoreOptions(nil) = %+v, %v; want the defaults", o, err)
	}
	if _, err := parseStoreOptions(map[string]any{"completion_history": "yes"}); err == nil || !strings.Contains(err.Error(), "completion_history") {
		t.Fatalf("a non-boolean completion_history: err = %v, want an error naming it", err)
	}
}

// TestRolesOnPostgres runs every role against a real database: setup,
// preload (with poison events), a dispatcher until everything is handled
// or dead, and inspect, then reads the record files.
func TestRolesOnPostgres(t *testing.T) {
	t.Parallel()
	dsn := dbtest.TestDatabase(t)
	dir := t.TempDir()
	ctx := context.Background()
	store := protocol.Store{Kind: "postgres", DSN: dsn, PoolSize: 4}
	wl := protocol.Workload{
		EventType: "bench.event", Handlers: []string{"h1", "h2"}, Keys: "hot", KeyCount: 3,
		PayloadBytes: 64, IDPrefix: "w-", PoisonEvery: 10, MaxAttempts: 2,
		RetryBaseDelayMs: 1, RetryMaxDelayMs: 5,
	}
	const events = 60

	code, msgs := runWorker(t, ctx, protocol.Config{Protocol: 1, Role: protocol.RoleSetup, Name: "setup", Store: store})
	if code != 0 {
		t.Fatalf("setup exited %d: %+v", code, msgs)
	}
	pubPath := filepath.Join(dir, "pre.rec")
	code, msgs = runWorker(t, ctx, protocol.Config{
		Protocol: 1, Role: protocol.RolePreload, Name: "pre", RecordPath: pubPath, Store: store, Workload: wl,
		Publisher: protocol.Publisher{Publishers: 2, Batch: 7, Events: events},
	})
	if code != 0 {
		t.Fatalf("preload exited %d: %+v", code, msgs)
	}
	if done := last(t, msgs, protocol.TypeDone); done.Counters.Published != events || done.Publish == nil || done.Publish.Calls != 9 {
		// 60 events in batches of 7: 8 full calls and one of 4.
		t.Errorf("preload done %+v, publish %+v: want %d events in 9 calls", done.Counters, done.Publish, events)
	}

	dispPath := filepath.Join(dir, "disp.rec")
	dctx, cancel := context.WithCancel(ctx)
	resCh := make(chan []protocol.Message, 1)
	go func() {
		_, msgs := runWorker(t, dctx, protocol.Config{
			Protocol: 1, Role: protocol.RoleDispatcher, Name: "disp", RecordPath: dispPath,
			CountersIntervalMs: 50, Store: store, Workload: wl,
			Dispatcher: protocol.Dispatcher{Concurrency: 8, Batch: 10, PollMs: 10, LeaseMs: 5000, CompletionWindowUs: 1000},
		})
		resCh <- msgs
	}()
	// 6 poison events x 2 handlers die after 2 attempts; 54 x 2 complete.
	deadline := time.Now().Add(60 * time.Second)
	for {
		code, msgs = runWorker(t, ctx, protocol.Config{Protocol: 1, Role: protocol.RoleInspect, Name: "inspect", Store: store})
		if code != 0 {
			t.Fatalf("inspect exited %d", code)
		}
		in := last(t, msgs, protocol.TypeDone).Inspect
		if in.Pending == 0 && in.Processing == 0 {
			// relaybus 0.2.0 deletes a completed delivery (the worker runs
			// the store without its completion history), so none is
			// counted; the 108 completions are in the dispatcher's record.
			if in.Dead != 12 || len(in.DeadLetters) != 12 || in.Completed != 0 {
				t.Fatalf("inspect %+v: want 12 dead, 0 completed (deleted)", in)
			}
			// 60 events round robin over 3 keys: 20 each, sequences 1..20.
			want := []protocol.KeyState{{Key: "0", LastSequence: 20, Events: 20, MaxSequence: 20}}
			if !in.KeysReported || in.KeysTruncated || len(in.Keys) != 3 || in.Keys[0].LastSequence != 20 ||
				in.Keys[0].Events != 20 || in.Keys[0].MaxSequence != 20 || in.Keys[2].Events != 20 {
				t.Fatalf("inspect keys %+v (reported %v): want 3 keys like %+v", in.Keys, in.KeysReported, want)
			}
			for _, dl := range in.DeadLetters {
				idx, err := strconv.ParseInt(strings.TrimPrefix(dl.EventID, "w-"), 10, 64)
				if err != nil || !protocol.IsPoison(idx, 10) {
					t.Errorf("dead letter %+v is not a poison event", dl)
				}
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not drained: %+v", in)
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	dmsgs := <-resCh
	done := last(t, dmsgs, protocol.TypeDone)
	if done.Error != "" || done.Counters.Handled != 108 || done.Counters.Completed != 108 || done.Counters.HandlerFailed != 24 {
		t.Errorf("dispatcher done %+v: want 108 handled and completed, 24 failed calls", done.Counters)
	}
	if r := last(t, dmsgs, protocol.TypeReady); len(r.Applied) == 0 {
		t.Errorf("ready lists no applied options: %+v", r)
	}

	pub, err := record.ReadFile(pubPath)
	if err != nil {
		t.Fatal(err)
	}
	han, err := record.ReadFile(dispPath)
	if err != nil {
		t.Fatal(err)
	}
	if len(pub.Published) != events {
		t.Errorf("%d published records, want %d", len(pub.Published), events)
	}
	for _, p := range pub.Published {
		// The call's start is recorded, before its commit returned.
		if p.CallStartNs <= 0 || p.CallStartNs > p.CommitNs {
			t.Errorf("event %s: call start %d, commit %d", p.EventID, p.CallStartNs, p.CommitNs)
		}
	}
	ok := 0
	lastSeq := map[string]int64{}
	for _, h := range han.Handled {
		if !h.OK {
			continue
		}
		ok++
		k := h.Handler + "/" + h.Key
		if h.Sequence <= lastSeq[k] {
			t.Errorf("order: %s handled sequence %d after %d", k, h.Sequence, lastSeq[k])
		}
		lastSeq[k] = h.Sequence
	}
	if ok != 108 {
		t.Errorf("%d ok handled records, want 108", ok)
	}
	// One completion line per completion, under the token of the ok
	// handle it completed, after that handler returned.
	okHandle := map[string]record.Handled{}
	for _, h := range han.Handled {
		if h.OK {
			okHandle[h.EventID+"/"+h.Handler] = h
		}
	}
	if len(han.Completed) != 108 {
		t.Errorf("%d completion records, want 108", len(han.Completed))
	}
	for _, c := range han.Completed {
		h, found := okHandle[c.EventID+"/"+c.Handler]
		if !found || h.Token != c.Token || h.Attempt != c.Attempt || c.CompletedNs < h.EndNs {
			t.Errorf("completion %+v: its ok handle %+v (found %v)", c, h, found)
			break
		}
	}
	for _, h := range han.Handled {
		// Every handle says when it ended and under which lease.
		if h.EndNs < h.HandleNs || h.Holder != "disp" || h.Token == "" {
			t.Errorf("handle of %s/%s: end %d (start %d), holder %q, token %q", h.EventID, h.Handler, h.EndNs, h.HandleNs, h.Holder, h.Token)
			break
		}
	}
}

func TestBusConfigCompletionWindow(t *testing.T) {
	t.Parallel()
	wl := &protocol.Workload{}
	if got := busConfig(wl, &protocol.Dispatcher{CompletionWindowUs: 250}).CompletionBatchWindow; got != 250*time.Microsecond {
		t.Errorf("completion_window_us 250: window %v", got)
	}
	if got := busConfig(wl, &protocol.Dispatcher{}).CompletionBatchWindow; got != 0 {
		t.Errorf("no window: %v, want 0 (the library default)", got)
	}
	if got := busConfig(wl, &protocol.Dispatcher{CompletionWindowDisabled: true}).CompletionBatchWindow; got != relaybus.Disabled {
		t.Errorf("completion_window_disabled: window %v, want relaybus.Disabled", got)
	}
	var out bytes.Buffer
	cfg := `{"protocol":1,"role":"dispatcher","name":"d","record_path":"/x","store":{"kind":"postgres","dsn":"x"},
		"workload":{"event_type":"t","handlers":["h"],"payload_bytes":10},
		"dispatcher":{"completion_window_us":5,"completion_window_disabled":true}}`
	if code := Main(context.Background(), strings.NewReader(cfg), &out, io.Discard); code != 2 || !strings.Contains(out.String(), "set one of them") {
		t.Errorf("both a window and disabled: exit %d, %s", code, out.String())
	}
}

// TestProfileAndUnbatchedCompletion runs a dispatcher with the two
// protocol fields added after v0.1.0 against a real database: it reports
// both applied, completes every delivery one by one, and leaves a CPU
// profile (gzip-compressed, as runtime/pprof writes it).
func TestProfileAndUnbatchedCompletion(t *testing.T) {
	t.Parallel()
	dsn := dbtest.TestDatabase(t)
	dir := t.TempDir()
	ctx := context.Background()
	store := protocol.Store{Kind: "postgres", DSN: dsn, PoolSize: 4}
	wl := protocol.Workload{EventType: "bench.event", Handlers: []string{"h"}, Keys: "none", PayloadBytes: 16, IDPrefix: "u-"}
	if code, msgs := runWorker(t, ctx, protocol.Config{Protocol: 1, Role: protocol.RoleSetup, Name: "setup", Store: store}); code != 0 {
		t.Fatalf("setup exited %d: %+v", code, msgs)
	}
	const events = 30
	if code, msgs := runWorker(t, ctx, protocol.Config{Protocol: 1, Role: protocol.RolePreload, Name: "pre",
		RecordPath: filepath.Join(dir, "pre.rec"), Store: store, Workload: wl,
		Publisher: protocol.Publisher{Publishers: 1, Batch: 10, Events: events}}); code != 0 {
		t.Fatalf("preload exited %d: %+v", code, msgs)
	}
	profile := filepath.Join(dir, "disp.pprof")
	dctx, cancel := context.WithCancel(ctx)
	defer cancel()
	resCh := make(chan []protocol.Message, 1)
	go func() {
		_, msgs := runWorker(t, dctx, protocol.Config{Protocol: 1, Role: protocol.RoleDispatcher, Name: "disp",
			RecordPath: filepath.Join(dir, "disp.rec"), CountersIntervalMs: 20, CPUProfilePath: profile, Store: store, Workload: wl,
			Dispatcher: protocol.Dispatcher{Concurrency: 4, Batch: 10, PollMs: 10, CompletionWindowDisabled: true}})
		resCh <- msgs
	}()
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, msgs := runWorker(t, ctx, protocol.Config{Protocol: 1, Role: protocol.RoleInspect, Name: "inspect", Store: store})
		in := last(t, msgs, protocol.TypeDone).Inspect
		if in != nil && in.Pending == 0 && in.Processing == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not drained: %+v", in)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	msgs := <-resCh
	if done := last(t, msgs, protocol.TypeDone); done.Error != "" || done.Counters.Completed != events {
		t.Errorf("dispatcher done %+v: want %d completed", done, events)
	}
	ready := last(t, msgs, protocol.TypeReady)
	for _, want := range []string{"cpu_profile_path", "dispatcher.completion_window_disabled"} {
		if !slices.Contains(ready.Applied, want) || slices.Contains(ready.Ignored, want) {
			t.Errorf("ready %+v: want %s applied", ready, want)
		}
	}
	data, err := os.ReadFile(profile)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) < 2 || data[0] != 0x1f || data[1] != 0x8b {
		t.Errorf("profile is %d bytes and not gzip-compressed", len(data))
	}
}
