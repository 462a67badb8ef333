package validate

import (
	"strconv"
	"strings"
	"testing"

	"github.com/berkcansavur/relaybus/bench/record"
)

// run builds a clean run: n events, keyed round robin over keys keys
// (0 = unkeyed), every event handled once by each handler in sequence
// order.
func cleanRun(n, keys int, handlers ...string) *Input {
	in := &Input{Handlers: handlers}
	seq := map[string]int64{}
	for i := 0; i < n; i++ {
		id := "e" + strconv.Itoa(i)
		key := ""
		var s int64
		if keys > 0 {
			key = "k" + strconv.Itoa(i%keys)
			seq[key]++
			s = seq[key]
		}
		in.Published = append(in.Published, record.Published{EventID: id, EventType: "t", Key: key, CommitNs: int64(i)})
		for _, h := range handlers {
			in.Handled = append(in.Handled, record.Handled{EventID: id, Handler: h, Key: key, Sequence: s,
				Attempt: 1, HandleNs: int64(1000 + i), OK: true})
		}
	}
	return in
}

// want lists the counts a test expects; every count not listed must be 0.
type want struct {
	lost, lostPoison, unexpected, duplicates, redeliveries, order    int64
	pending, processing, deadExpected, deadUnexpected, poisonHandled int64
	failures, handledOK, expected, published, uncertain              int64
	valid                                                            bool
}

func check(t *testing.T, r *Result, w want) {
	t.Helper()
	got := want{r.Lost, r.LostPoison, r.Unexpected, r.Duplicates, r.Redeliveries, r.OrderViolations,
		r.Pending, r.Processing, r.DeadExpected, r.DeadUnexpected, r.PoisonHandled,
		r.Failures, r.HandledOK, r.Expected, r.Published, r.Uncertain, r.Valid}
	if got != w {
		t.Fatalf("got  %+v\nwant %+v\n%s\n%s", got, w, r, strings.Join(r.Examples, "\n"))
	}
	if r.Valid != strings.HasPrefix(r.String(), "VALID") {
		t.Fatalf("Valid %v but String %q", r.Valid, r)
	}
	if !r.Valid && len(r.Examples) == 0 {
		t.Fatal("INVALID without an example")
	}
}

func TestClean(t *testing.T) {
	t.Parallel()
	r := Validate(cleanRun(100, 4, "a", "b"))
	check(t, r, want{handledOK: 200, expected: 200, published: 100, valid: true})
	if got := r.String(); got != "VALID (published 100, expected 200, handled 200)" {
		t.Fatalf("String = %q", got)
	}
}

func TestLost(t *testing.T) {
	t.Parallel()
	in := cleanRun(10, 0, "a", "b")
	in.Handled = in.Handled[:len(in.Handled)-1] // e9/b never handled
	r := Validate(in)
	check(t, r, want{lost: 1, handledOK: 19, expected: 20, published: 10})
	if !strings.Contains(r.Examples[0], "e9 handler b") {
		t.Fatalf("example %q", r.Examples[0])
	}
	if !strings.HasPrefix(r.String(), "INVALID: lost 1") {
		t.Fatalf("String = %q", r)
	}
}

func TestFailedHandleIsNotHandled(t *testing.T) {
	t.Parallel()
	in := cleanRun(3, 0, "a")
	in.Handled[1].OK = false // e1 failed and never retried: lost
	r := Validate(in)
	check(t, r, want{lost: 1, failures: 1, handledOK: 2, expected: 3, published: 3})
}

func TestFailuresThenSuccessIsValid(t *testing.T) {
	t.Parallel()
	in := cleanRun(3, 2, "a")
	fail := in.Handled[1]
	fail.OK, fail.HandleNs = false, fail.HandleNs-1
	in.Handled = append(in.Handled, fail)
	r := Validate(in)
	check(t, r, want{failures: 1, handledOK: 3, expected: 3, published: 3, valid: true})
}

func TestUnexpected(t *testing.T) {
	t.Parallel()
	in := cleanRun(3, 0, "a")
	in.Handled = append(in.Handled,
		record.Handled{EventID: "ghost", Handler: "a", Attempt: 1, OK: true},
		record.Handled{EventID: "e0", Handler: "nobody", Attempt: 1, OK: true})
	r := Validate(in)
	check(t, r, want{unexpected: 2, handledOK: 3, expected: 3, published: 3})
}

func TestDuplicateUnkeyed(t *testing.T) {
	t.Parallel()
	in := cleanRun(3, 0, "a")
	in.Handled = append(in.Handled, in.Handled[2], in.Handled[2])
	r := Validate(in)
	check(t, r, want{duplicates: 2, handledOK: 3, expected: 3, published: 3})
}

func TestRedeliveryAllowed(t *testing.T) {
	t.Parallel()
	in := cleanRun(4, 2, "a") // keys k0: e0 (1), e2 (2); k1: e1, e3
	// e0 (k0 seq 1) redelivered after e2 (k0 seq 2): allowed.
	again := in.Handled[0]
	again.HandleNs = 5000
	in.Handled = append(in.Handled, again)
	in.Expect.AllowRedelivery = true
	check(t, Validate(in), want{redeliveries: 1, handledOK: 4, expected: 4, published: 4, valid: true})

	// The same without AllowRedelivery: a duplicate, and being handled
	// after a later sequence of its key, an order violation.
	in.Expect.AllowRedelivery = false
	check(t, Validate(in), want{duplicates: 1, order: 1, handledOK: 4, expected: 4, published: 4})
}

func TestOrderViolation(t *testing.T) {
	t.Parallel()
	in := cleanRun(4, 2, "a", "b")
	// Handler a, key k0: e2 (seq 2) starts before e0 (seq 1).
	for i := range in.Handled {
		h := &in.Handled[i]
		if h.EventID == "e2" && h.Handler == "a" {
			h.HandleNs = 1
		}
	}
	r := Validate(in)
	check(t, r, want{order: 1, handledOK: 8, expected: 8, published: 4})
	if !strings.Contains(r.Examples[0], "handler a key \"k0\" handled sequence 1 (event e0) after sequence 2 (event e2)") {
		t.Fatalf("example %q", r.Examples[0])
	}
	// Redelivery mode does not excuse a first handle out of order.
	in.Expect.AllowRedelivery = true
	check(t, Validate(in), want{order: 1, handledOK: 8, expected: 8, published: 4})
}

func TestOrderTiesBySequence(t *testing.T) {
	t.Parallel()
	in := cleanRun(4, 1, "a")
	for i := range in.Handled {
		in.Handled[i].HandleNs = 7 // all at once: ordered by sequence
	}
	check(t, Validate(in), want{handledOK: 4, expected: 4, published: 4, valid: true})
}

func TestOrderNonPositiveSequence(t *testing.T) {
	t.Parallel()
	in := cleanRun(2, 2, "a")
	in.Handled[1].Sequence = 0
	check(t, Validate(in), want{order: 1, handledOK: 2, expected: 2, published: 2})
}

func TestPendingProcessing(t *testing.T) {
	t.Parallel()
	in := cleanRun(2, 0, "a")
	in.Final.Pending, in.Final.Processing = 3, 1
	check(t, Validate(in), want{pending: 3, processing: 1, handledOK: 2, expected: 2, published: 2})
}

func TestPoison(t *testing.T) {
	t.Parallel()
	in := cleanRun(4, 0, "a", "b")
	in.Expect.PoisonEventIDs = map[string]bool{"e1": true, "e3": true}
	// Poison events are never handled ok: drop their ok handles, record
	// failures instead.
	var hs []record.Handled
	for _, h := range in.Handled {
		if in.Expect.PoisonEventIDs[h.EventID] {
			h.OK = false
		}
		hs = append(hs, h)
	}
	in.Handled = hs
	in.Final.DeadLetters = []DeadLetter{{"e1", "a"}, {"e1", "b"}, {"e3", "a"}, {"e3", "b"}, {"e3", "b"}}
	in.Final.Dead = 4
	check(t, Validate(in), want{deadExpected: 4, failures: 4, handledOK: 4, expected: 4, published: 4, valid: true})

	t.Run("poison handled", func(t *testing.T) {
		in := *in
		in.Handled = append(append([]record.Handled(nil), in.Handled...),
			record.Handled{EventID: "e1", Handler: "a", Attempt: 2, OK: true})
		check(t, Validate(&in), want{poisonHandled: 1, deadExpected: 4, failures: 4, handledOK: 4, expected: 4, published: 4})
	})
	t.Run("poison vanished", func(t *testing.T) {
		in := *in
		in.Final.DeadLetters = in.Final.DeadLetters[:3] // e3/b neither dead nor handled
		in.Final.Dead = 3
		check(t, Validate(&in), want{lostPoison: 1, deadExpected: 3, failures: 4, handledOK: 4, expected: 4, published: 4})
	})
	t.Run("dead unexpected", func(t *testing.T) {
		in := *in
		in.Final.DeadLetters = append(append([]DeadLetter(nil), in.Final.DeadLetters...),
			DeadLetter{"e0", "a"}, DeadLetter{"ghost", "a"})
		in.Final.Dead = 6
		// e0/a was also handled ok, so it is not lost; it is a dead
		// letter that should not exist.
		check(t, Validate(&in), want{deadUnexpected: 2, deadExpected: 4, failures: 4, handledOK: 4, expected: 4, published: 4})
	})
	t.Run("dead and not handled counts once", func(t *testing.T) {
		in := *in
		in.Handled = in.Handled[1:] // e0/a not handled ...
		in.Final.DeadLetters = append(append([]DeadLetter(nil), in.Final.DeadLetters...), DeadLetter{"e0", "a"})
		in.Final.Dead = 5 // ... but dead: dead unexpected, not also lost
		check(t, Validate(&in), want{deadUnexpected: 1, deadExpected: 4, failures: 4, handledOK: 3, expected: 4, published: 4})
	})
	t.Run("store counts more dead than it lists", func(t *testing.T) {
		in := *in
		in.Final.Dead = 6
		check(t, Validate(&in), want{deadUnexpected: 2, deadExpected: 4, failures: 4, handledOK: 4, expected: 4, published: 4})
	})
	t.Run("truncated dead letters", func(t *testing.T) {
		in := *in
		in.Final.DeadLettersTruncated = true
		r := Validate(&in)
		if r.Valid || !r.DeadLettersUnverified {
			t.Fatalf("truncated dead letters: %s", r)
		}
	})
}

func TestUncertain(t *testing.T) {
	t.Parallel()
	// Both outcomes are fine for an uncertain event: handled or not.
	in := cleanRun(3, 1, "a")
	in.Published[1].Uncertain = true
	check(t, Validate(in), want{uncertain: 1, handledOK: 3, expected: 2, published: 3, valid: true})

	notHandled := cleanRun(3, 0, "a")
	notHandled.Published[1].Uncertain = true
	notHandled.Handled = append(notHandled.Handled[:1], notHandled.Handled[2:]...)
	check(t, Validate(notHandled), want{uncertain: 1, handledOK: 2, expected: 2, published: 3, valid: true})

	// ... but if handled, it must be handled correctly: once, in order.
	dup := cleanRun(3, 0, "a")
	dup.Published[1].Uncertain = true
	dup.Handled = append(dup.Handled, dup.Handled[1])
	check(t, Validate(dup), want{duplicates: 1, uncertain: 1, handledOK: 3, expected: 2, published: 3})

	// An event recorded once uncertain and once certain (a retried
	// publish) is certain.
	retried := cleanRun(2, 0, "a")
	retried.Published = append(retried.Published, retried.Published[1])
	retried.Published[1].Uncertain = true
	check(t, Validate(retried), want{handledOK: 2, expected: 2, published: 2, valid: true})
}

func TestExamplesBounded(t *testing.T) {
	t.Parallel()
	in := cleanRun(50, 0, "a")
	in.Handled = nil
	r := Validate(in)
	check(t, r, want{lost: 50, expected: 50, published: 50})
	if len(r.Examples) != MaxExamples {
		t.Fatalf("%d examples, want %d", len(r.Examples), MaxExamples)
	}
	if r.Examples[0] != "lost: event e0 handler a was published but never handled ok" {
		t.Fatalf("examples not in publish order: %q", r.Examples[0])
	}
}

func TestInputNotModified(t *testing.T) {
	t.Parallel()
	in := cleanRun(20, 3, "a")
	in.Handled[0], in.Handled[19] = in.Handled[19], in.Handled[0]
	before := append([]record.Handled(nil), in.Handled...)
	Validate(in)
	for i := range before {
		if before[i] != in.Handled[i] {
			t.Fatal("Validate reordered its input")
		}
	}
}

// BenchmarkValidate1M: one million (event, handler) deliveries (500k
// events x 2 handlers, keyed over 1000 keys) plus their publish records.
func BenchmarkValidate1M(b *testing.B) {
	in := cleanRun(500_000, 1000, "a", "b")
	b.ReportAllocs()
	for b.Loop() {
		if r := Validate(in); !r.Valid {
			b.Fatal(r)
		}
	}
}
