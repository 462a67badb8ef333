package record

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWriteReadRoundTrip(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "r.txt")
	w, err := Create(path)
	if err != nil {
		t.Fatal(err)
	}
	pubs := []Published{
		{EventID: "e1", EventType: "order.created", Key: "k1", CommitNs: 1700000000000000001},
		{EventID: "e2", EventType: "order.created", Key: "", CommitNs: 5, Uncertain: true},
		{EventID: "e3", EventType: "order.created", Key: "k1", CommitNs: 90, CallStartNs: 80},
	}
	hs := []Handled{
		{EventID: "e1", Handler: "h1", Key: "k1", Sequence: 1, Attempt: 1, HandleNs: 42, OK: true},
		{EventID: "e2", Handler: "h2", Attempt: 3, HandleNs: -7, OK: false},
		{EventID: "e3", Handler: "h1", Key: "k1", Sequence: 2, Attempt: 1, HandleNs: 100, OK: true,
			EndNs: 150, Holder: "disp-1", Token: "7.3.12"},
	}
	for _, p := range pubs {
		if err := w.AddPublished(p); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, h := range hs {
		if err := w.AddHandled(h); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil { // empty: no write
		t.Fatal(err)
	}
	bytes, writes, _ := w.Stats()
	if writes != 2 {
		t.Fatalf("writes = %d, want 2 (one per non-empty flush)", writes)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err == nil {
		t.Fatal("second Close: want error")
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(data)) != bytes {
		t.Fatalf("file has %d bytes, Stats said %d", len(data), bytes)
	}
	want := "P\te1\torder.created\tk1\t1700000000000000001\t0\n" +
		"P\te2\torder.created\t\t5\t1\n" +
		"P\te3\torder.created\tk1\t90\t0\t80\n" +
		"H\te1\th1\tk1\t1\t1\t42\t1\n" +
		"H\te2\th2\t\t0\t3\t-7\t0\n" +
		"H\te3\th1\tk1\t2\t1\t100\t1\t150\tdisp-1\t7.3.12\n"
	if string(data) != want {
		t.Fatalf("file:\n%q\nwant\n%q", data, want)
	}
	f, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if f.TruncatedTail {
		t.Fatal("TruncatedTail on a complete file")
	}
	if len(f.Published) != 3 || f.Published[0] != pubs[0] || f.Published[1] != pubs[1] || f.Published[2] != pubs[2] {
		t.Fatalf("published = %+v", f.Published)
	}
	if len(f.Handled) != 3 || f.Handled[0] != hs[0] || f.Handled[1] != hs[1] || f.Handled[2] != hs[2] {
		t.Fatalf("handled = %+v", f.Handled)
	}
}

func TestCreateTruncates(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "r.txt")
	if err := os.WriteFile(path, []byte("P\told\tt\t\t1\t0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	w, err := Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Published) != 0 {
		t.Fatalf("stale records survived Create: %+v", f.Published)
	}
}

func TestWriterRejects(t *testing.T) {
	t.Parallel()
	w, err := Create(filepath.Join(t.TempDir(), "r.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	bad := []Published{
		{EventID: "", EventType: "t"},
		{EventID: "a\tb", EventType: "t"},
		{EventID: "a", EventType: "t\n"},
		{EventID: "a", EventType: "t", Key: "k\r"},
	}
	for _, p := range bad {
		if err := w.AddPublished(p); err == nil || !strings.HasPrefix(err.Error(), "record: ") {
			t.Errorf("AddPublished(%+v) = %v, want a record: error", p, err)
		}
	}
	badH := []Handled{
		{EventID: "", Handler: "h"},
		{EventID: "e", Handler: ""},
		{EventID: "e", Handler: "h\t"},
		{EventID: "e", Handler: "h", Key: "\n"},
		// The lease fields come all or none.
		{EventID: "e", Handler: "h", EndNs: 5},
		{EventID: "e", Handler: "h", EndNs: 5, Holder: "d"},
		{EventID: "e", Handler: "h", EndNs: 5, Token: "t"},
		{EventID: "e", Handler: "h", Holder: "d", Token: "t"},
		{EventID: "e", Handler: "h", EndNs: -5, Holder: "d", Token: "t"},
		{EventID: "e", Handler: "h", EndNs: 5, Holder: "d\t", Token: "t"},
		{EventID: "e", Handler: "h", EndNs: 5, Holder: "d", Token: "t\n"},
		{EventID: "e", Handler: "h", EndNs: 5, Holder: "d", Token: "t\r"},
	}
	for _, h := range badH {
		if err := w.AddHandled(h); err == nil {
			t.Errorf("AddHandled(%+v): want error", h)
		}
	}
	if len(w.buf) != 0 {
		t.Fatalf("rejected records reached the batch: %q", w.buf)
	}
}

// parseCases are the parser's table tests; the fuzz target starts from
// them too.
var parseCases = []struct {
	name, in  string
	wantErr   string // substring; empty = no error
	nP, nH    int
	nC        int
	truncated bool
}{
	{name: "empty", in: ""},
	{name: "one P", in: "P\te\tt\tk\t1\t0\n", nP: 1},
	{name: "one H", in: "H\te\th\t\t0\t1\t5\t1\n", nH: 1},
	{name: "truncated tail", in: "P\te\tt\tk\t1\t0\nH\te\th\t", nP: 1, truncated: true},
	{name: "truncated tail only", in: "P\te", truncated: true},
	{name: "unknown kind", in: "X\te\n", wantErr: "line 1: unknown kind"},
	{name: "empty line", in: "P\te\tt\tk\t1\t0\n\n", wantErr: "line 2"},
	{name: "P few fields", in: "P\te\tt\tk\t1\n", wantErr: "6"},
	{name: "P with call start (since v0.2)", in: "P\te\tt\tk\t9\t0\t7\n", nP: 1},
	{name: "P bad call start", in: "P\te\tt\tk\t1\t0\tx\n", wantErr: "call_start_ns"},
	{name: "P zero call start", in: "P\te\tt\tk\t1\t0\t0\n", wantErr: "non-canonical"},
	{name: "P negative call start", in: "P\te\tt\tk\t1\t0\t-4\n", wantErr: "non-canonical"},
	{name: "P many fields", in: "P\te\tt\tk\t1\t0\t3\tx\n", wantErr: "6 or 7"},
	{name: "H few fields", in: "H\te\th\tk\t1\t1\t5\n", wantErr: "8"},
	{name: "H with lease (v0.2.1's eight fields before)", in: "H\te\th\tk\t1\t1\t5\t1\t9\tdisp-0\t3.1.4\n", nH: 1},
	{name: "H lease part only", in: "H\te\th\tk\t1\t1\t5\t1\t9\tdisp-0\n", wantErr: "8 or 11"},
	{name: "H lease end only", in: "H\te\th\tk\t1\t1\t5\t1\t9\n", wantErr: "8 or 11"},
	{name: "H lease zero end", in: "H\te\th\tk\t1\t1\t5\t1\t0\tdisp-0\tt\n", wantErr: "non-canonical end_ns"},
	{name: "H lease negative end", in: "H\te\th\tk\t1\t1\t5\t1\t-9\tdisp-0\tt\n", wantErr: "non-canonical end_ns"},
	{name: "H lease bad end", in: "H\te\th\tk\t1\t1\t5\t1\t09\tdisp-0\tt\n", wantErr: "end_ns"},
	{name: "H lease empty holder", in: "H\te\th\tk\t1\t1\t5\t1\t9\t\tt\n", wantErr: "empty holder"},
	{name: "H lease empty token", in: "H\te\th\tk\t1\t1\t5\t1\t9\tdisp-0\t\n", wantErr: "empty token"},
	{name: "H too many fields", in: "H\te\th\tk\t1\t1\t5\t1\t9\tdisp-0\tt\tx\n", wantErr: "too many"},
	{name: "too many fields", in: "H\te\th\tk\t1\t1\t5\t1\tx\ty\n", wantErr: "8 or 11"},
	{name: "bad bool", in: "P\te\tt\tk\t1\t2\n", wantErr: "uncertain"},
	{name: "bad int", in: "P\te\tt\tk\tx\t0\n", wantErr: "commit_ns"},
	{name: "plus sign", in: "P\te\tt\tk\t+1\t0\n", wantErr: "non-canonical"},
	{name: "leading zero", in: "H\te\th\tk\t01\t1\t5\t1\n", wantErr: "non-canonical"},
	{name: "minus zero", in: "H\te\th\tk\t-0\t1\t5\t1\n", wantErr: "non-canonical"},
	{name: "empty int", in: "H\te\th\tk\t\t1\t5\t1\n", wantErr: "sequence"},
	{name: "overflow", in: "P\te\tt\tk\t99999999999999999999\t0\n", wantErr: "commit_ns"},
	{name: "empty event id", in: "P\t\tt\tk\t1\t0\n", wantErr: "event id"},
	{name: "empty handler", in: "H\te\t\tk\t1\t1\t5\t1\n", wantErr: "handler"},
	{name: "carriage return", in: "P\te\tt\tk\t1\t0\r\n", wantErr: "carriage"},
	{name: "error on line 3", in: "P\te\tt\tk\t1\t0\nP\te\tt\tk\t1\t0\nP\n", wantErr: "line 3"},
	{name: "negative ints", in: "H\te\th\tk\t-3\t-1\t-5\t0\n", nH: 1},
	{name: "one C", in: "C\te\th\t2\t3.1.4\t9\n", nC: 1},
	{name: "C few fields", in: "C\te\th\t2\t3.1.4\n", wantErr: "want 6"},
	{name: "C many fields", in: "C\te\th\t2\t3.1.4\t9\tx\n", wantErr: "want 6"},
	{name: "C empty event id", in: "C\t\th\t2\tt\t9\n", wantErr: "event id"},
	{name: "C empty handler", in: "C\te\t\t2\tt\t9\n", wantErr: "handler"},
	{name: "C empty token", in: "C\te\th\t2\t\t9\n", wantErr: "token"},
	{name: "C bad attempt", in: "C\te\th\tx\tt\t9\n", wantErr: "attempt"},
	{name: "C zero time", in: "C\te\th\t2\tt\t0\n", wantErr: "non-canonical completed_ns"},
	{name: "C negative time", in: "C\te\th\t2\tt\t-1\n", wantErr: "non-canonical completed_ns"},
}

func TestParse(t *testing.T) {
	t.Parallel()
	for _, tc := range parseCases {
		f, err := Parse([]byte(tc.in))
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.HasPrefix(err.Error(), "record: ") {
				t.Errorf("%s: err = %v, want one containing %q", tc.name, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if len(f.Published) != tc.nP || len(f.Handled) != tc.nH || len(f.Completed) != tc.nC || f.TruncatedTail != tc.truncated {
			t.Errorf("%s: got %d P, %d H, %d C, truncated %v; want %d, %d, %d, %v",
				tc.name, len(f.Published), len(f.Handled), len(f.Completed), f.TruncatedTail, tc.nP, tc.nH, tc.nC, tc.truncated)
		}
	}
}

func TestLineTooLong(t *testing.T) {
	t.Parallel()
	in := "P\t" + strings.Repeat("x", MaxLineBytes) + "\tt\t\t1\t0\n"
	if _, err := Parse([]byte(in)); err == nil || !strings.Contains(err.Error(), "longer") {
		t.Fatalf("err = %v", err)
	}
}

func TestReadFileMissing(t *testing.T) {
	t.Parallel()
	if _, err := ReadFile(filepath.Join(t.TempDir(), "nope")); err == nil {
		t.Fatal("want error")
	}
}

// FuzzParse: the parser never panics, and every line it accepts
// re-encodes to exactly the same bytes (the format is canonical).
func FuzzParse(f *testing.F) {
	for _, tc := range parseCases {
		f.Add([]byte(tc.in))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse(data)
		if err != nil {
			return
		}
		// Re-encode in file order: P and H lines are interleaved in the
		// input, so rebuild by walking the lines again.
		var out []byte
		pi, hi, ci := 0, 0, 0
		complete := data
		if file.TruncatedTail {
			i := strings.LastIndexByte(string(data), '\n')
			complete = data[:i+1]
		}
		for _, line := range strings.SplitAfter(string(complete), "\n") {
			if line == "" {
				continue
			}
			switch line[0] {
			case 'P':
				out = appendPublished(out, file.Published[pi])
				pi++
			case 'H':
				out = appendHandled(out, file.Handled[hi])
				hi++
			case 'C':
				out = appendCompleted(out, file.Completed[ci])
				ci++
			default:
				t.Fatalf("accepted a line of kind %q", line[0])
			}
		}
		if pi != len(file.Published) || hi != len(file.Handled) || ci != len(file.Completed) {
			t.Fatalf("parsed %d P, %d H, %d C; lines say %d, %d, %d", len(file.Published), len(file.Handled), len(file.Completed), pi, hi, ci)
		}
		if string(out) != string(complete) {
			t.Fatalf("re-encoded\n%q\nfrom\n%q", out, complete)
		}
	})
}

// BenchmarkAddHandledFlush100 measures the recording cost of a
// dispatcher: 100 AddHandled then one Flush (one write(2)). Reported per
// record.
func BenchmarkAddHandledFlush100(b *testing.B) {
	w, err := Create(filepath.Join(b.TempDir(), "r.txt"))
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	h := Handled{EventID: "run1-w3-0000000123456", Handler: "handler-0", Key: "key-0042",
		Sequence: 123456, Attempt: 1, HandleNs: 1700000000123456789, OK: true,
		EndNs: 1700000000123467890, Holder: "disp-1", Token: "117:3:2041"}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		for j := 0; j < 100; j++ {
			h.Sequence = int64(i*100 + j)
			if err := w.AddHandled(h); err != nil {
				b.Fatal(err)
			}
		}
		if err := w.Flush(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*100), "ns/record")
}

// TestOldHandledLines: a line of a v0.1.0 to v0.2.1 worker (eight fields)
// reads with the lease fields unset, and re-encodes to the same bytes.
func TestOldHandledLines(t *testing.T) {
	t.Parallel()
	in := "H\te1\th1\tk1\t4\t2\t1700000000000000001\t1\n"
	f, err := Parse([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	h := f.Handled[0]
	if h.EndNs != 0 || h.Holder != "" || h.Token != "" || h.HasLease() {
		t.Fatalf("old line read with lease fields: %+v", h)
	}
	if out := string(appendHandled(nil, h)); out != in {
		t.Fatalf("re-encoded %q, want %q", out, in)
	}
}

// TestWriterRefusesOverlongLines: a record whose line the reader would
// refuse (longer than MaxLineBytes) is refused by the writer, and the
// batch keeps what it had (found by fuzzing: a 64 KiB event id was
// written, and the file could not be read back).
func TestWriterRefusesOverlongLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.rec")
	w, err := Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.AddPublished(Published{EventID: "ok", CommitNs: 1}); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("x", MaxLineBytes)
	if err := w.AddPublished(Published{EventID: long, CommitNs: 1}); err == nil {
		t.Fatal("a published line longer than MaxLineBytes was accepted")
	}
	if err := w.AddHandled(Handled{EventID: "e", Handler: long, Attempt: 1, HandleNs: 1}); err == nil {
		t.Fatal("a handled line longer than MaxLineBytes was accepted")
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := ReadFile(path)
	if err != nil || len(f.Published) != 1 || len(f.Handled) != 0 {
		t.Fatalf("read back: %v, %+v", err, f)
	}
}
