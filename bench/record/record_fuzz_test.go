package record

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// FuzzWriteRead is FuzzParse's other direction: a record the Writer
// accepts reads back as exactly that record, and the Writer refuses
// exactly what the format cannot carry (an empty event id or handler, a
// tab, newline or carriage return in a field, a negative call start, and
// lease fields that are not all set: a non-positive end, an empty holder
// or token; a completion without a token or a positive time, which the
// test writes for every handle with lease fields, at its end time). The
// parser must never reject what the writer wrote: a
// worker's records would otherwise fail validation after a clean run.
//
// The seed corpus is testdata/fuzz/FuzzWriteRead (records as the
// v0.1.0, v0.2.1 and current workers write them, plus the edge cases of
// each rule).
func FuzzWriteRead(f *testing.F) {
	// A current worker's P and H records.
	f.Add("run1-w3-0000000123456", "order.created", "k42", int64(1700000000123456789), int64(1700000000123400000), false,
		"handler-0", int64(123456), 1, int64(1700000000223456789), true, int64(1700000000223467890), "disp-1", "117:3:2041")
	// A v0.1.0 worker: no call start, no lease fields; unkeyed.
	f.Add("w1-7", "t", "", int64(1), int64(0), true, "h", int64(0), 3, int64(-5), false, int64(0), "", "")
	// Each refusal.
	f.Add("", "t", "k", int64(1), int64(-1), false, "", int64(1), 1, int64(1), true, int64(0), "disp-0", "")
	f.Add("e\t1", "t\n", "k\r", int64(1), int64(2), false, "h\t", int64(1), 1, int64(1), true, int64(-1), "d\n", "t\r")
	f.Add("e", "t", "k", int64(-9223372036854775808), int64(9223372036854775807), false,
		"h", int64(-9223372036854775808), -2147483648, int64(9223372036854775807), true, int64(1), "x", "y")

	path := filepath.Join(f.TempDir(), "records")
	f.Fuzz(func(t *testing.T, eventID, eventType, key string, commitNs, callStartNs int64, uncertain bool,
		handler string, seq int64, attempt int, handleNs int64, ok bool, endNs int64, holder, token string) {
		p := Published{EventID: eventID, EventType: eventType, Key: key, CommitNs: commitNs, CallStartNs: callStartNs, Uncertain: uncertain}
		h := Handled{EventID: eventID, Handler: handler, Key: key, Sequence: seq, Attempt: attempt, HandleNs: handleNs, OK: ok,
			EndNs: endNs, Holder: holder, Token: token}
		// A line longer than MaxLineBytes (less its newline) is refused by
		// the writer, as the reader would refuse the file.
		pLong := len(appendPublished(nil, p))-1 > MaxLineBytes
		hLong := len(appendHandled(nil, h))-1 > MaxLineBytes

		bad := func(vs ...string) bool {
			for _, v := range vs {
				if strings.ContainsAny(v, "\t\n\r") {
					return true
				}
			}
			return false
		}
		pRefused := eventID == "" || bad(eventID, eventType, key) || callStartNs < 0 || pLong
		hRefused := eventID == "" || handler == "" || bad(eventID, handler, key) || hLong ||
			(h.HasLease() && (endNs <= 0 || holder == "" || token == "" || bad(holder, token)))

		w, err := Create(path)
		if err != nil {
			t.Fatal(err)
		}
		// A completion of the handle, when the worker records one (its
		// lease fields are set).
		c := Completed{EventID: eventID, Handler: handler, Attempt: attempt, Token: token, CompletedNs: endNs}
		cLong := len(appendCompleted(nil, c))-1 > MaxLineBytes
		cRefused := eventID == "" || handler == "" || token == "" || bad(eventID, handler, token) || endNs <= 0 || cLong
		want := &File{Published: []Published{}, Handled: []Handled{}}
		// Twice each, interleaved, so the reader sees P and H lines
		// alternate as in a publisher-and-dispatcher file.
		for range 2 {
			err := w.AddPublished(p)
			if (err != nil) != pRefused {
				t.Fatalf("AddPublished(%+v) = %v; refusal expected: %v", p, err, pRefused)
			}
			if err == nil {
				want.Published = append(want.Published, p)
			}
			err = w.AddHandled(h)
			if (err != nil) != hRefused {
				t.Fatalf("AddHandled(%+v) = %v; refusal expected: %v", h, err, hRefused)
			}
			if err == nil {
				want.Handled = append(want.Handled, h)
			}
			if !h.HasLease() {
				continue
			}
			err = w.AddCompleted(c)
			if (err != nil) != cRefused {
				t.Fatalf("AddCompleted(%+v) = %v; refusal expected: %v", c, err, cRefused)
			}
			if err == nil {
				want.Completed = append(want.Completed, c)
			}
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		got, err := ReadFile(path)
		if err != nil {
			t.Fatalf("the reader rejects what the writer wrote: %v", err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("read back\n%+v\nwrote\n%+v", got, want)
		}
	})
}
