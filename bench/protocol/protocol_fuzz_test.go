package protocol

import (
	"encoding/json"
	"reflect"
	"testing"
)

// FuzzDecode decodes one JSON document as the harness decodes a worker's
// stdout line (a Message: hello, ready, counters, error, done) and as a
// worker decodes its stdin (a Config), with encoding/json like both
// sides do. The package has no decoder of its own, so what is checked
// is what the wire format promises on top of encoding/json:
//
//   - a value decoded from any input encodes without error and decodes
//     back to the same value, except that an empty list or map of an
//     omitempty field comes back nil (both mean "none");
//   - after that one decode the encoding is a fixed point: decoding and
//     encoding again gives the same bytes;
//   - an unknown field is skipped (protocol rule): the same object with
//     one more field decodes to the same value.
//
// The seed corpus is testdata/fuzz/FuzzDecode: lines as v0.1.0 and
// current workers write them, a peer's hello, and configs.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{"type":"hello","t_ns":1700000000000000001,"protocol":1,"version":"0.1.0"}`,
		`{"type":"hello","t_ns":1700000000000000001,"protocol":1,"version":"0.30.0","capabilities":["peer","peer:river","no-key-order"]}`,
		`{"type":"ready","t_ns":1700000000000000002,"applied":["store.completion_history"],"ignored":["cpu_profile_path","dispatcher.completion_window_disabled"]}`,
		`{"type":"counters","t_ns":1700000000000000003,"counters":{"handled":5,"completed":5,"claims":2,"claimed":5,"record_bytes":400,"record_writes":2,"record_ns":9000}}`,
		`{"type":"done","t_ns":4,"counters":{},"publish":{"calls":10,"p50_ms":1.5,"p95_ms":2.25,"p99_ms":3e-3,"max_ms":4,"elapsed_ns":5}}`,
		`{"type":"done","t_ns":5,"counters":{},"inspect":{"pending":0,"processing":0,"completed":1,"dead":1,"dead_letters":[{"event_id":"e","handler":"h","attempts":2,"error":"poison"}],"dead_letters_truncated":true}}`,
		`{"type":"error","t_ns":6,"error":"worker: config is not valid JSON"}`,
		`{"type":"future","t_ns":7,"future":{"x":[1,2]},"applied":[],"counters":null}`,
		`{"protocol":1,"role":"dispatcher","name":"disp-0","record_path":"/r/disp-0.rec","counters_interval_ms":200,` +
			`"store":{"kind":"postgres","dsn":"postgres://x","pool_size":8,"options":{"completion_history":true,"n":1e3}},` +
			`"workload":{"event_type":"t","handlers":["h0","h1"],"keys":"hot","key_count":4,"payload_bytes":256,"id_prefix":"w1-","poison_every":100,"fail_first":1},` +
			`"publisher":{"publishers":0,"batch":0},"dispatcher":{"concurrency":16,"batch":64,"lease_ms":30000,"completion_window_disabled":true,"options":{}}}`,
		`{"role":"preload","workload":{"handlers":[]},"publisher":{"publishers":4,"batch":10,"events":100000,"rate_per_sec":2500.5,"start_index":-1,"stride":3}}`,
		`{"TYPE":"hello","type":"ready","Protocol":1}`,
		`{"type":"hello","version":"\u00e9\ud800\u2028<&>"}`,
		`[]`, `null`, `{"t_ns":1.5}`, `{"protocol":9223372036854775808}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var m Message
		if json.Unmarshal(data, &m) == nil {
			checkRoundTrip(t, &m, &Message{}, &Message{}, func(v any) { normalizeMessage(v.(*Message)) })
		}
		var c Config
		if json.Unmarshal(data, &c) == nil {
			checkRoundTrip(t, &c, &Config{}, &Config{}, func(v any) { normalizeConfig(v.(*Config)) })
		}
	})
}

// checkRoundTrip checks FuzzDecode's properties for v, a value decoded
// from the fuzz input; v2 and v3 are zero values of its type.
func checkRoundTrip(t *testing.T, v, v2, v3 any, normalize func(any)) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("a decoded %T does not encode: %v", v, err)
	}
	if err := json.Unmarshal(b, v2); err != nil {
		t.Fatalf("%T's encoding %s does not decode: %v", v, b, err)
	}
	normalize(v)
	if !reflect.DeepEqual(v, v2) {
		t.Fatalf("%T decoded as\n%+v\nre-encoded as %s, which decodes as\n%+v", v, v, b, v2)
	}
	b2, err := json.Marshal(v2)
	if err != nil || string(b2) != string(b) {
		t.Fatalf("%T re-encodes as %s, then %s (%v)", v, b, b2, err)
	}
	// Every field of a Message or Config is a struct field, so the
	// encoding is an object; an unknown field in it must be skipped.
	if len(b) < 2 || b[0] != '{' {
		t.Fatalf("%T encodes as %s, not an object", v, b)
	}
	sep := ","
	if b[1] == '}' {
		sep = ""
	}
	extended := `{"zz_unknown":{"a":[1,"x",null,true]}` + sep + string(b[1:])
	if err := json.Unmarshal([]byte(extended), v3); err != nil {
		t.Fatalf("%T with an unknown field %s does not decode: %v", v, extended, err)
	}
	if !reflect.DeepEqual(v3, v2) {
		t.Fatalf("an unknown field changed the decoded %T:\n%+v\nwant\n%+v", v, v3, v2)
	}
}

// normalizeMessage sets m's empty omitempty lists to nil, as an encoding
// round trip does.
func normalizeMessage(m *Message) {
	nilIfEmpty(&m.Capabilities)
	nilIfEmpty(&m.Applied)
	nilIfEmpty(&m.Ignored)
	if m.Inspect != nil {
		nilIfEmpty(&m.Inspect.DeadLetters)
	}
}

// normalizeConfig sets c's empty omitempty maps to nil.
func normalizeConfig(c *Config) {
	for _, m := range []*map[string]any{&c.Store.Options, &c.Publisher.Options, &c.Dispatcher.Options} {
		if len(*m) == 0 {
			*m = nil
		}
	}
}

func nilIfEmpty[T any](s *[]T) {
	if len(*s) == 0 {
		*s = nil
	}
}
