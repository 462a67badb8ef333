package protocol

import (
	"encoding/json"
	"strings"
	"testing"
)

// Protocol 1 is frozen: these tests pin what every release's worker
// derives from a config, and the JSON names on the wire. A failure here
// means a change would break the harness's comparison with old releases.

func TestWorkloadIsFrozen(t *testing.T) {
	if got := EventID("w1-", 42); got != "w1-42" {
		t.Errorf("EventID = %q", got)
	}
	for _, tc := range []struct {
		keys  string
		count int
		index int64
		want  string
	}{
		{"none", 5, 7, ""}, {"", 5, 7, ""}, {"hot", 4, 0, "k0"}, {"hot", 4, 7, "k3"},
		{"many", 10000, 123456, "k3456"}, {"hot", 0, 3, ""},
	} {
		if got := Key(tc.keys, tc.count, tc.index); got != tc.want {
			t.Errorf("Key(%q, %d, %d) = %q, want %q", tc.keys, tc.count, tc.index, got, tc.want)
		}
	}
	var poison []int64
	for i := int64(0); i < 30; i++ {
		if IsPoison(i, 10) {
			poison = append(poison, i)
		}
	}
	if len(poison) != 3 || poison[0] != 9 || poison[1] != 19 || poison[2] != 29 {
		t.Errorf("poison indexes of 0..29 every 10 = %v, want [9 19 29]", poison)
	}
	if IsPoison(9, 0) {
		t.Error("PoisonEvery 0 plants poison")
	}
}

func TestWireNamesAreFrozen(t *testing.T) {
	cfg := Config{
		Protocol: 1, Role: RoleDispatcher, Name: "d", RecordPath: "/r", CountersIntervalMs: 5,
		Store:      Store{Kind: "postgres", DSN: "x", PoolSize: 3},
		Workload:   Workload{EventType: "t", Handlers: []string{"h"}, Keys: "hot", KeyCount: 2, PayloadBytes: 9, IDPrefix: "p"},
		Publisher:  Publisher{Publishers: 1, Batch: 2, Events: 3, RatePerSec: 4, StartIndex: 5, Stride: 6},
		Dispatcher: Dispatcher{Concurrency: 1, Batch: 2, PollMs: 3, LeaseMs: 4, CompletionWindowUs: 5, CompletionBatchMax: 6, ExtraCostPerDeliveryUs: 7},
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"protocol":1,"role":"dispatcher","name":"d","record_path":"/r","counters_interval_ms":5,` +
		`"store":{"kind":"postgres","dsn":"x","pool_size":3},` +
		`"workload":{"event_type":"t","handlers":["h"],"keys":"hot","key_count":2,"payload_bytes":9,"id_prefix":"p"},` +
		`"publisher":{"publishers":1,"batch":2,"events":3,"rate_per_sec":4,"start_index":5,"stride":6},` +
		`"dispatcher":{"concurrency":1,"batch":2,"poll_ms":3,"lease_ms":4,"completion_window_us":5,"completion_batch_max":6,"extra_cost_per_delivery_us":7}}`
	if string(b) != want {
		t.Errorf("config JSON changed:\n got %s\nwant %s", b, want)
	}
	var m Message
	line := `{"type":"done","t_ns":1,"counters":{"published":2,"handled":3,"completed":4},"publish":{"calls":1,"p50_ms":1.5,"p95_ms":2,"p99_ms":3,"max_ms":4,"elapsed_ns":5},"inspect":{"pending":0,"processing":0,"completed":1,"dead":1,"dead_letters":[{"event_id":"e","handler":"h","attempts":2}]},"future":true}`
	if err := json.Unmarshal([]byte(line), &m); err != nil {
		t.Fatal(err)
	}
	if m.Type != TypeDone || m.Counters.Handled != 3 || m.Publish.P50Ms != 1.5 || m.Inspect.DeadLetters[0].EventID != "e" {
		t.Errorf("done line decoded as %+v", m)
	}
}

// TestAddedFields pins the wire names of the optional fields added after
// v0.1.0: a worker that predates them lists exactly these as ignored.
func TestAddedFields(t *testing.T) {
	b, err := json.Marshal(Config{CPUProfilePath: "/p", Dispatcher: Dispatcher{CompletionWindowDisabled: true}})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"cpu_profile_path":"/p"`, `"completion_window_disabled":true`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("config JSON %s lacks %s", b, want)
		}
	}
	b, err = json.Marshal(Config{})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "cpu_profile_path") || strings.Contains(string(b), "completion_window_disabled") {
		t.Errorf("unset added fields are on the wire: %s", b)
	}
}
