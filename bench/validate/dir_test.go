package validate

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berkcansavur/relaybus/bench/protocol"
)

func writeFile(t *testing.T, dir, name, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestReadDirV010Records: a v0.1.0 worker's records (six-field P lines,
// no call start) still read and validate, with the commit-order check
// skipped and said so.
func TestReadDirV010Records(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFile(t, dir, "pub-0.rec", "P\tw-pub0-0\tt\tk0\t100\t0\nP\tw-pub0-1\tt\tk0\t200\t0\nP\tw-pub0-2\tt\tk0\t300\t0\n")
	// disp-0 handled w-pub0-0 and w-pub0-1 and was killed while its
	// record of w-pub0-2 was half written; disp-1 ran w-pub0-1 again (it
	// was in flight), then w-pub0-2. w-pub0-2 is poison (every 3rd).
	writeFile(t, dir, "disp-0.rec", "H\tw-pub0-0\ta\tk0\t1\t1\t1000\t1\nH\tw-pub0-1\ta\tk0\t2\t1\t2000\t1\nH\tw-pub0")
	writeFile(t, dir, "disp-1.rec", "H\tw-pub0-1\ta\tk0\t2\t2\t5000\t1\nH\tw-pub0-2\ta\tk0\t3\t1\t6000\t0\nH\tw-pub0-2\ta\tk0\t3\t2\t7000\t0\n")
	writeFile(t, dir, ManifestFile, `{"handlers": ["a"], "poison_every": 3, "poison_prefixes": ["w-pub0-"], "max_attempts": 2,
		"allow_redelivery": true, "lease_ms": 2000, "faults": [{"kind": "kill", "process": "disp-0", "start_ns": 2500, "end_ns": 2500}],
		"window": {"start_ns": 0, "end_ns": 10000},
		"final": {"dead": 1, "dead_letters": [{"event_id": "w-pub0-2", "handler": "a", "attempts": 2}]}}`)
	m, files, found, err := ReadDir(dir)
	if err != nil || !found || len(files) != 3 {
		t.Fatalf("ReadDir: %v found %v files %d", err, found, len(files))
	}
	r := Validate(m.Input(files))
	if !r.Valid || r.Redeliveries != 1 || r.DeadExpected != 1 || r.CommitOrderSkipped != 3 || len(r.Notes) != 6 || !r.ProcessesUnchecked || r.CausalityUnchecked != 5 ||
		r.TokensUnchecked != 5 || r.OverlapUnchecked != 5 {
		t.Fatalf("%s %q %q", r, r.Examples, r.Notes)
	}
	// The same records with no fault: disp-0's cut line is then a lost
	// record, and the repeat is unexplained.
	writeFile(t, dir, ManifestFile, strings.Replace(string(mustRead(t, filepath.Join(dir, ManifestFile))),
		`"faults": [{"kind": "kill", "process": "disp-0", "start_ns": 2500, "end_ns": 2500}],`, "", 1))
	m, files, _, err = ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if r := Validate(m.Input(files)); r.Valid || r.TruncatedFiles != 1 || r.Duplicates != 1 {
		t.Fatalf("%s %q", r, r.Examples)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestReadDirWithoutManifest(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFile(t, dir, "pub-0.rec", "P\te0\tt\t\t100\t0\t90\n")
	writeFile(t, dir, "disp-0.rec", "H\te0\tb\t\t0\t1\t1000\t1\nH\te0\ta\t\t0\t1\t1000\t1\n")
	writeFile(t, dir, "notes.txt", "not a record file")
	m, files, found, err := ReadDir(dir)
	if err != nil || found || len(files) != 2 || len(m.Handlers) != 0 {
		t.Fatalf("ReadDir: %v found %v files %d handlers %v", err, found, len(files), m.Handlers)
	}
	// Issue 24, class 9: no handlers are inferred from the records (a
	// handler c that ran nothing would pass): without them, INVALID.
	if r := Validate(m.Input(files)); r.Valid || !r.NoHandlers {
		t.Fatalf("%s %q", r, r.Examples)
	}
	m.Handlers = []string{"a", "b"}
	if r := Validate(m.Input(files)); !r.Valid || r.HandledOK != 2 {
		t.Fatalf("%s %q", r, r.Examples)
	}
	m.Handlers = []string{"a", "b", "c"}
	if r := Validate(m.Input(files)); r.Valid || r.Lost != 1 {
		t.Fatalf("%s %q", r, r.Examples)
	}
}

func TestReadDirRejects(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct{ rec, manifest, want string }{
		"no records":    {"", `{"handlers":["a"]}`, "no .rec record files"},
		"bad record":    {"X\n", "", "unknown kind"},
		"bad json":      {"P\te\tt\t\t1\t0\n", `{`, "window.json"},
		"unknown field": {"P\te\tt\t\t1\t0\n", `{"handlers":["a"],"poison":1}`, "unknown field"},
		"no handlers":   {"P\te\tt\t\t1\t0\n", `{"handlers":[]}`, "no handlers"},
		"bad fault":     {"P\te\tt\t\t1\t0\n", `{"handlers":["a"],"faults":[{"kind":"flood"}]}`, `fault kind "flood"`},
		"kill nobody":   {"P\te\tt\t\t1\t0\n", `{"handlers":["a"],"faults":[{"kind":"kill"}]}`, "names no process"},
		"empty window":  {"P\te\tt\t\t1\t0\n", `{"handlers":["a"],"window":{"start_ns":5,"end_ns":5}}`, "is empty"},
		"process end":   {"P\te\tt\t\t1\t0\n", `{"handlers":["a"],"processes":[{"name":"p","role":"publisher","record":"p.rec","end":"gone"}]}`, `end "gone"`},
		"process role":  {"P\te\tt\t\t1\t0\n", `{"handlers":["a"],"processes":[{"name":"p","role":"inspect","record":"p.rec","end":"done"}]}`, `role "inspect"`},
		"process name":  {"P\te\tt\t\t1\t0\n", `{"handlers":["a"],"processes":[{"role":"publisher","record":"p.rec","end":"done"}]}`, "without a name"},
	} {
		dir := t.TempDir()
		if tc.rec != "" {
			writeFile(t, dir, "p.rec", tc.rec)
		}
		if tc.manifest != "" {
			writeFile(t, dir, ManifestFile, tc.manifest)
		}
		if _, _, _, err := ReadDir(dir); err == nil || !strings.HasPrefix(err.Error(), "validate: ") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want a validate: error with %q", name, err, tc.want)
		}
	}
}

func TestManifestRoundTrip(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	m := &Manifest{Handlers: []string{"a"}, MaxAttempts: 3, LeaseMs: 2000, AllowRedelivery: true,
		Faults: []Fault{{Kind: FaultRestart, StartNs: 1, EndNs: 2}, {Kind: FaultCrash, StartNs: 3, EndNs: 4}}, Window: &Span{StartNs: 0, EndNs: 9},
		Final: Final{Dead: 1, DeadLetters: []DeadLetter{{EventID: "e", Handler: "a", Attempts: 3}}}, NoKeyOrder: true, FailFirst: 1,
		Processes: []Process{{Name: "p", Role: "publisher", Record: "p.rec", End: EndDone, Counters: &protocol.Counters{Published: 1}}}}
	if err := WriteManifest(dir, m); err != nil {
		t.Fatal(err)
	}
	writeFile(t, dir, "p.rec", "P\te\tt\t\t1\t0\n")
	got, _, found, err := ReadDir(dir)
	if err != nil || !found || got.Final.DeadLetters[0] != m.Final.DeadLetters[0] || got.Window.EndNs != 9 || got.Faults[0] != m.Faults[0] || got.Faults[1] != m.Faults[1] ||
		!got.NoKeyOrder || !got.Input(nil).Expect.NoKeyOrder || got.Input(nil).Expect.FailFirst != 1 ||
		len(got.Processes) != 1 || got.Processes[0].Counters.Published != 1 || got.Processes[0].End != EndDone {
		t.Fatalf("%+v %v", got, err)
	}
	// The record file and the process's counters agree.
	got, files, _, err := ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if r := Validate(got.Input(files)); r.CounterMismatches != 0 || r.RecordFilesMissing != 0 || r.RecordFilesUnlisted != 0 || r.ProcessesUnchecked {
		t.Fatalf("%s %q", r, r.Examples)
	}
}

func TestIsPoison(t *testing.T) {
	t.Parallel()
	prefixes := []string{"w-pre-", "w-pub0-"}
	for id, want := range map[string]bool{"w-pre-0": false, "w-pre-1": true, "w-pre-3": true, "w-pub0-3": true,
		"w-pub0-x3": false, "other-3": false, "w-pre-": false} {
		if got := isPoison(id, prefixes, 2); got != want {
			t.Errorf("isPoison(%q) = %v, want %v", id, got, want)
		}
	}
}
