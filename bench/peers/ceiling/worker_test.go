package main

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/berkcansavur/relaybus/bench/protocol"
	"github.com/berkcansavur/relaybus/bench/record"
	"github.com/berkcansavur/relaybus/bench/worker/workerkit"
	"github.com/berkcansavur/relaybus/bench/worker/workerkit/peertest"
)

func TestBadConfigs(t *testing.T) {
	t.Parallel()
	const pub = `"record_path":"/x","store":{"kind":"postgres","dsn":"x"},"publisher":{"publishers":1,"batch":1}`
	const disp = `"protocol":1,"role":"dispatcher","record_path":"/x","store":{"kind":"postgres","dsn":"x"},
		"workload":{"event_type":"t","handlers":["h"],"payload_bytes":10}`
	hello := func(t *testing.T, hello protocol.Message) {
		if hello.Version != peerVersion {
			t.Errorf("hello %+v is not the ceiling's", hello)
		}
	}
	peertest.CheckBadConfigs(t, workerMain, hello, []peertest.BadConfig{
		{"not JSON", `{`, "not valid JSON"},
		{"protocol 2", `{"protocol":2,"role":"setup","store":{"kind":"postgres","dsn":"x"}}`, "protocol 2"},
		{"mongo", `{"protocol":1,"role":"setup","store":{"kind":"mongo","mongo_uri":"m"}}`, `store kind "mongo" is not supported`},
		{"no dsn", `{"protocol":1,"role":"setup","store":{"kind":"postgres"}}`, "needs dsn"},
		{"no record path", `{"protocol":1,"role":"dispatcher","store":{"kind":"postgres","dsn":"x"}}`, "needs record_path"},
		{"no handlers", `{"protocol":1,"role":"publisher",` + pub + `,"workload":{"event_type":"t","payload_bytes":10}}`, "1 to 64 handlers"},
		{"handler twice", `{"protocol":1,"role":"publisher",` + pub + `,
			"workload":{"event_type":"t","handlers":["h","h"],"payload_bytes":10}}`, "listed twice"},
		{"tab in handler", `{"protocol":1,"role":"publisher",` + pub + `,
			"workload":{"event_type":"t","handlers":["a\tb"],"payload_bytes":10}}`, "control character"},
		{"bad keys", `{"protocol":1,"role":"publisher",` + pub + `,
			"workload":{"event_type":"t","handlers":["h"],"payload_bytes":10,"keys":"hot"}}`, "key_count"},
		{"retry max below base", `{"protocol":1,"role":"publisher",` + pub + `,
			"workload":{"event_type":"t","handlers":["h"],"payload_bytes":10,"retry_base_delay_ms":100,"retry_max_delay_ms":50}}`, "retry delays out of range"},
		{"batch", `{` + disp + `,"dispatcher":{"batch":10001}}`, "batch 10001"},
		{"poll", `{` + disp + `,"dispatcher":{"poll_ms":-1}}`, "poll_ms -1"},
		{"streams", `{` + disp + `,"dispatcher":{"options":{"streams":0}}}`, "option streams"},
		{"max_lanes", `{` + disp + `,"dispatcher":{"options":{"max_lanes":257}}}`, "option max_lanes"},
	})
}

func TestCapabilities(t *testing.T) {
	t.Parallel()
	caps := capabilities()
	if protocol.PeerName(caps) != peerName || !protocol.HasCapability(caps, CapabilityNoFaults) ||
		protocol.HasCapability(caps, protocol.CapabilityNoKeyOrder) {
		t.Errorf("capabilities %q: want a ceiling peer that keeps key order and runs no fault cells", caps)
	}
}

func TestClassifyOptions(t *testing.T) {
	t.Parallel()
	raw := `{"protocol":1,"role":"dispatcher","name":"d","record_path":"/r",
		"store":{"kind":"postgres","dsn":"x","pool_size":20,"options":{"completion_history":true}},
		"workload":{"event_type":"t","handlers":["h"],"keys":"many","key_count":100,"payload_bytes":128,"max_attempts":3},
		"dispatcher":{"concurrency":20,"batch":20,"poll_ms":100,"lease_ms":2000,"completion_window_us":500,
			"completion_window_disabled":true,"options":{"streams":2,"max_lanes":8,"fetch_cooldown_ms":1}},
		"cpu_profile_path":"/p","future_field":1}`
	applied, ignored, err := optionRules.Classify([]byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	wantApplied := []string{
		"cpu_profile_path", "dispatcher.batch", "dispatcher.concurrency", "dispatcher.options.max_lanes", "dispatcher.options.streams", "dispatcher.poll_ms",
		"store.dsn", "store.kind", "store.pool_size",
		"workload.event_type", "workload.handlers", "workload.key_count", "workload.keys", "workload.max_attempts", "workload.payload_bytes",
	}
	wantIgnored := []string{
		"dispatcher.completion_window_disabled", "dispatcher.completion_window_us", "dispatcher.lease_ms",
		"dispatcher.options.fetch_cooldown_ms", "future_field", "store.options.completion_history",
	}
	if !slices.Equal(applied, wantApplied) {
		t.Errorf("applied\n got %v\nwant %v", applied, wantApplied)
	}
	if !slices.Equal(ignored, wantIgnored) {
		t.Errorf("ignored\n got %v\nwant %v", ignored, wantIgnored)
	}
}

func TestDispatcherSettings(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name                           string
		pool                           int
		d                              protocol.Dispatcher
		cost                           int
		streams, workers, batch, lanes int
		poll                           time.Duration
	}{
		{"defaults", 0, protocol.Dispatcher{}, 0, defaultStreams, 1, defaultBatch, defaultMaxLanes, time.Second},
		{"tuned, no-op handlers run inline", 40, protocol.Dispatcher{Concurrency: 200, Batch: 200, PollMs: 50}, 0, 4, 1, 200, defaultMaxLanes, 50 * time.Millisecond},
		{"handlers that cost", 40, protocol.Dispatcher{Concurrency: 200, Batch: 200, PollMs: 50}, 5000, 4, 50, 200, defaultMaxLanes, 50 * time.Millisecond},
		{"pool caps streams", 2, protocol.Dispatcher{Concurrency: 10}, 1, 2, 5, defaultBatch, defaultMaxLanes, time.Second},
		{"options", 0, protocol.Dispatcher{Options: map[string]any{optStreams: 8.0, optMaxLanes: 4.0}}, 1, 8, 1, defaultBatch, 4, time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			opts, err := parseDispatcherOptions(tc.d.Options)
			if err != nil {
				t.Fatal(err)
			}
			w := &worker{Session: &workerkit.Session{Cfg: &protocol.Config{
				Store:      protocol.Store{PoolSize: tc.pool},
				Workload:   protocol.Workload{Keys: "none", HandlerCostUs: tc.cost},
				Dispatcher: tc.d,
			}}, opts: opts}
			d, err := dispatcherFor(w, nil)
			if err != nil {
				t.Fatal(err)
			}
			if d.streams != tc.streams || d.workers != tc.workers || d.batch != tc.batch || d.maxLanes != tc.lanes || d.poll != tc.poll {
				t.Errorf("streams %d workers %d batch %d lanes %d poll %v, want %d %d %d %d %v",
					d.streams, d.workers, d.batch, d.maxLanes, d.poll, tc.streams, tc.workers, tc.batch, tc.lanes, tc.poll)
			}
		})
	}
}

func TestMaxAttempts(t *testing.T) {
	t.Parallel()
	if n := maxAttemptsOf(&protocol.Workload{}); n != 10 {
		t.Errorf("default max attempts %d, want relaybus's 10", n)
	}
}

// TestLaneOf pins laneOf to driver.LaneOf's values (FNV-1a 32 modulo
// 256 of the key, else of the event id).
func TestLaneOf(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		key, id string
		want    int16
	}{
		{"k0", "", 46}, {"k3", "x", 155}, {"", "e2e-42", 142}, {"", "w1-0", 216}, {"ключ", "", 225},
	} {
		if got := laneOf(tc.key, tc.id); got != tc.want {
			t.Errorf("laneOf(%q, %q) = %d, want %d", tc.key, tc.id, got, tc.want)
		}
	}
}

func TestPublishArgs(t *testing.T) {
	t.Parallel()
	var a publishArgs
	a.build([]workerkit.Event{
		{ID: "e0", Key: "b"}, {ID: "e1"}, {ID: "e2", Key: "a", Poison: true}, {ID: "e3", Key: "b"}, {ID: "e4", Key: "b"},
	})
	if !slices.Equal(a.callKeys, []string{"b", "a"}) || !slices.Equal(a.callCounts, []int64{3, 1}) {
		t.Errorf("keys %v counts %v, want [b a] [3 1]", a.callKeys, a.callCounts)
	}
	if !slices.Equal(a.ranks, []int64{1, 0, 1, 2, 3}) || !slices.Equal(a.totals, []int64{3, 0, 1, 3, 3}) {
		t.Errorf("ranks %v totals %v", a.ranks, a.totals)
	}
	if a.keys[1] != nil || *a.keys[0] != "b" || !a.poison[2] || a.poison[0] || a.lanes[1] != laneOf("", "e1") || a.lanes[0] != laneOf("b", "e0") {
		t.Errorf("keys, poison or lanes wrong: %+v", a)
	}
}

// TestRuns: a keyed claim is cut to whole prefixes, grouped per
// (handler, key) and run in sequence order; a run stops at a failure
// (its later deliveries wait) or at a head not due.
func TestRuns(t *testing.T) {
	t.Parallel()
	d := &dispatcher{keyed: true, batch: 5, failFirst: 1, schedule: workerkit.RetrySchedule{Base: time.Millisecond, Max: time.Second}, fatalCh: make(chan struct{}),
		w: &worker{Session: &workerkit.Session{Cfg: &protocol.Config{Name: "disp"}}}}
	rec, err := record.Create(filepath.Join(t.TempDir(), "disp.rec"))
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	d.rec = rec
	claims := []delivery{
		{id: 4, eventID: "e4", handler: "h", key: "k2", sequence: 1, lane: 1, due: true, attempts: 1, maxAttempts: 3, payload: []byte("N")},
		{id: 2, eventID: "e2", handler: "h", key: "k1", sequence: 2, lane: 1, due: true, attempts: 0, maxAttempts: 3, payload: []byte("N")},
		{id: 1, eventID: "e1", handler: "h", key: "k1", sequence: 1, lane: 1, due: true, attempts: 1, maxAttempts: 3, payload: []byte("N")},
		{id: 6, eventID: "e6", handler: "h", key: "k3", sequence: 1, lane: 2, due: false, attempts: 1, maxAttempts: 3, payload: []byte("N")},
		{id: 5, eventID: "e5", handler: "h", key: "k2", sequence: 2, lane: 1, due: true, attempts: 0, maxAttempts: 3, payload: []byte("N")},
		{id: 7, eventID: "e7", handler: "h", key: "k3", sequence: 2, lane: 2, due: true, attempts: 0, maxAttempts: 3, payload: []byte("N")},
	}
	s := &stream{d: d, ask: 2}
	claims = s.cut(claims)
	var ids []int64
	for _, c := range claims {
		ids = append(ids, c.id)
	}
	// Sorted by (lane, handler, key, sequence), cut to the batch of 5.
	if !slices.Equal(ids, []int64{1, 2, 4, 5, 6}) {
		t.Fatalf("cut kept %v, want [1 2 4 5 6]", ids)
	}
	for i := range claims {
		claims[i].token = leaseToken(claims[i].lane, 9)
	}
	runs := d.runsOf(claims)
	if len(runs) != 3 || len(runs[0]) != 2 || len(runs[1]) != 2 || len(runs[2]) != 1 {
		t.Fatalf("runs %v", runs)
	}
	// The run of a key whose head is not due runs nothing.
	if out := d.runOne(runs[2]); len(out.done)+len(out.failures) != 0 || out.released != 1 {
		t.Errorf("a head not due: %+v", out)
	}
	// k1: sequence 1 at its second attempt succeeds (fail_first 1),
	// sequence 2 at its first fails and is rescheduled.
	out := d.runOne(runs[0])
	if len(out.done) != 1 || len(out.failures) != 1 || out.failures[0].id != 2 || out.failures[0].dead ||
		out.failures[0].delayUs != 1000 && (out.failures[0].delayUs < 900 || out.failures[0].delayUs > 1100) {
		t.Errorf("k1: %+v", out)
	}
	// A failure stops its key's run: k2's sequence 1 is handled, fails
	// (attempt 1), and the rest of k2 waits.
	runs[1][0].attempts = 0
	if out := d.runOne(runs[1]); len(out.done) != 0 || len(out.failures) != 1 || out.failures[0].id != 4 || out.released != 1 {
		t.Errorf("k2: %+v", out)
	}
	// The last attempt's failure buries.
	last := []delivery{{id: 8, eventID: "e8", handler: "h", key: "k4", sequence: 1, due: true, attempts: 2, maxAttempts: 3, payload: []byte("P"), token: "0:9"}}
	if out := d.runOne(last); len(out.failures) != 1 || !out.failures[0].dead || out.buried != 1 ||
		!strings.Contains(out.failures[0].err, "poison=true, attempt 3") {
		t.Errorf("poison at its last attempt: %+v", out)
	}
	if d.fatalErr != nil {
		t.Error(d.fatalErr)
	}
}

// TestMove: the ring position and the lanes of the next claim.
func TestMove(t *testing.T) {
	t.Parallel()
	d := &dispatcher{batch: 10, maxLanes: 8}
	claimsOf := func(n int, lanes ...int16) []delivery {
		var cs []delivery
		for i := range n {
			cs = append(cs, delivery{lane: lanes[i%len(lanes)], ctid: pgtype.TID{}})
		}
		return cs
	}
	s := &stream{d: d, start: 10, ask: 1}
	if wrapped := s.move([]int16{12}, claimsOf(10, 12)); wrapped || s.start != 13 || s.ask != 1 {
		t.Errorf("full claim from one lane: start %d ask %d wrapped %v", s.start, s.ask, wrapped)
	}
	if wrapped := s.move([]int16{13}, claimsOf(4, 13)); wrapped || s.start != 14 || s.ask != 2 {
		t.Errorf("short claim, every lane asked for: start %d ask %d wrapped %v", s.start, s.ask, wrapped)
	}
	if wrapped := s.move([]int16{200}, claimsOf(4, 200)); !wrapped || s.start != 0 || s.ask != 2 {
		t.Errorf("fewer lanes than asked: start %d ask %d wrapped %v", s.start, s.ask, wrapped)
	}
	s.ask = 8
	if wrapped := s.move([]int16{1, 2, 3, 4, 5, 6, 7, 8}, claimsOf(10, 1, 2, 3)); wrapped || s.start != 9 || s.ask != 3 {
		t.Errorf("full claim from 3 of 8 lanes: start %d ask %d wrapped %v", s.start, s.ask, wrapped)
	}
	s.ask = 1
	if wrapped := s.move([]int16{255}, claimsOf(10, 255)); !wrapped || s.start != 0 {
		t.Errorf("lane 255: start %d wrapped %v", s.start, wrapped)
	}
}

func TestLeaseToken(t *testing.T) {
	t.Parallel()
	if got := leaseToken(7, 123456789); got != "7:123456789" {
		t.Errorf("leaseToken = %q", got)
	}
}
