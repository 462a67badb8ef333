package validate

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berkcansavur/relaybus/bench/protocol"
	"github.com/berkcansavur/relaybus/bench/record"
)

// Times of the clean run (ns): event i is published in the call
// [pubStart+i*step, pubStart+i*step+callLen) and handled at
// handleStart+i*step.
const (
	pubStart    = int64(1_000_000)
	handleStart = int64(5_000_000)
	step        = int64(1000)
	callLen     = int64(400)
	handlerLen  = int64(100)
)

// cleanRun builds an exact run: n events published by pub-0, keyed round
// robin over keys keys (0 = unkeyed), every event handled once by each
// handler in sequence order, even events by disp-0 and odd ones by
// disp-1.
func cleanRun(n, keys int, handlers ...string) *Input {
	in := &Input{Handlers: handlers, Files: []File{{Name: "pub-0"}, {Name: "disp-0"}, {Name: "disp-1"}}}
	seq := map[string]int64{}
	for i := range n {
		id := "e" + strconv.Itoa(i)
		key := ""
		var s int64
		if keys > 0 {
			key = "k" + strconv.Itoa(i%keys)
			seq[key]++
			s = seq[key]
		}
		start := pubStart + int64(i)*step
		in.Files[0].Published = append(in.Files[0].Published,
			record.Published{EventID: id, EventType: "t", Key: key, CallStartNs: start, CommitNs: start + callLen})
		for _, h := range handlers {
			d := &in.Files[1+i%2]
			at := handleStart + int64(i)*step
			d.Handled = append(d.Handled, record.Handled{EventID: id, Handler: h, Key: key, Sequence: s,
				Attempt: 1, HandleNs: at, OK: true, EndNs: at + handlerLen, Holder: d.Name, Token: "t" + strconv.Itoa(i)})
		}
	}
	return in
}

// file returns in's file of that process.
func file(in *Input, name string) *File {
	for i := range in.Files {
		if in.Files[i].Name == name {
			return &in.Files[i]
		}
	}
	panic("no file " + name)
}

// handled finds the handle of event id by handler h in any file.
func handled(in *Input, id, h string) *record.Handled {
	for fi := range in.Files {
		for ri := range in.Files[fi].Handled {
			if r := &in.Files[fi].Handled[ri]; r.EventID == id && r.Handler == h {
				return r
			}
		}
	}
	panic("no handle " + id + "/" + h)
}

// killAt makes in a fault cell in which proc was killed at ns: what
// proc handled later is handled by the other dispatcher instead.
func killAt(in *Input, proc string, ns int64) {
	in.Expect.AllowRedelivery = true
	in.Expect.Faults = append(in.Expect.Faults, Fault{Kind: FaultKill, Process: proc, StartNs: ns, EndNs: ns})
	survivor := "disp-0"
	if proc == survivor {
		survivor = "disp-1"
	}
	f, s := file(in, proc), file(in, survivor)
	late := func(h record.Handled) bool { return h.HandleNs > ns }
	for _, h := range f.Handled {
		if late(h) {
			h.Holder = s.Name
			s.Handled = append(s.Handled, h)
		}
	}
	f.Handled = slices.DeleteFunc(f.Handled, late)
}

// poisonFirstOfK1 makes e1 (key k1, sequence 1) poison with a budget of
// 2: both handlers fail it at its time and again at second, and it is
// dead.
func poisonFirstOfK1(in *Input, second int64) {
	in.Expect.PoisonEventIDs, in.Expect.MaxAttempts = map[string]bool{"e1": true}, 2
	for _, name := range []string{"a", "b"} {
		h := handled(in, "e1", name)
		h.OK = false
		again := *h
		again.HandleNs, again.Attempt = second, 2
		rerun(file(in, "disp-1"), again)
		in.Final.DeadLetters = append(in.Final.DeadLetters, DeadLetter{EventID: "e1", Handler: name, Attempts: 2})
	}
	in.Final.Dead = 2
}

// restartLater makes in a fault cell whose database restarted after
// everything was handled.
func restartLater(in *Input) {
	in.Expect.AllowRedelivery = true
	in.Expect.Faults = append(in.Expect.Faults, Fault{Kind: FaultRestart, StartNs: handleStart + 100*step, EndNs: handleStart + 101*step})
}

// rerun appends a run of h's delivery to f: a handle by f's process
// under a lease token of its own, ending handlerLen after it started.
func rerun(f *File, h record.Handled) {
	h.Holder, h.EndNs = f.Name, h.HandleNs+handlerLen
	h.Token = fmt.Sprintf("t-%s-%s-%s-%d-%d", h.EventID, h.Handler, f.Name, h.Attempt, h.HandleNs)
	f.Handled = append(f.Handled, h)
}

// crashAt makes in a fault cell whose database crashed at ns and
// accepted again 200 ns later, with a lease of 2 µs.
func crashAt(in *Input, ns int64) {
	in.Expect.AllowRedelivery, in.Expect.Lease = true, 2*time.Microsecond
	in.Expect.Faults = append(in.Expect.Faults, Fault{Kind: FaultCrash, StartNs: ns, EndNs: ns + 200})
}

// noKeyOrder makes in's handles those of a store that keeps no per-key
// order: no sequences, and e2 handled before e0 (both of key k0).
func noKeyOrder(in *Input) {
	for fi := range in.Files {
		for ri := range in.Files[fi].Handled {
			in.Files[fi].Handled[ri].Sequence = 0
		}
	}
	for _, h := range []string{"a", "b"} {
		x, y := handled(in, "e0", h), handled(in, "e2", h)
		x.HandleNs, y.HandleNs, x.EndNs, y.EndNs = y.HandleNs, x.HandleNs, y.EndNs, x.EndNs
	}
}

// listProcesses lists in's files as the processes that wrote them, as
// the harness does: pub-* publishers and the rest dispatchers, each
// ended with its done line and counters that match its file, except a
// process the fault plan killed, whose last counters report its
// completed deliveries only.
func listProcesses(in *Input) {
	killed := map[string]bool{}
	for _, f := range in.Expect.Faults {
		if f.Kind == FaultKill {
			killed[f.Process] = true
		}
	}
	in.Processes = nil
	for i := range in.Files {
		f := &in.Files[i]
		n := countLines(f)
		p := Process{Name: f.Name, Role: protocol.RoleDispatcher, Record: f.Name + RecordFileExt, End: EndDone,
			Counters: &protocol.Counters{Handled: n.ok, HandlerFailed: n.failed, Completed: n.ok, Published: n.certain, Uncertain: n.uncertain}}
		if strings.HasPrefix(f.Name, "pub-") {
			p.Role = protocol.RolePublisher
		}
		if killed[f.Name] {
			p.End = EndKilled
		}
		in.Processes = append(in.Processes, p)
	}
}

// withCompletions gives in the completion lines a worker with
// completion records writes: one for every ok handle, by its process,
// completionLag after the handler returned; and lists the processes,
// their dispatchers as writing them (counters count every ok handle as
// completed).
func withCompletions(in *Input) {
	for fi := range in.Files {
		f := &in.Files[fi]
		for _, h := range f.Handled {
			if h.OK {
				f.Completed = append(f.Completed, record.Completed{EventID: h.EventID, Handler: h.Handler, Attempt: h.Attempt,
					Token: h.Token, CompletedNs: h.EndNs + completionLag})
			}
		}
	}
	listProcesses(in)
	for i := range in.Processes {
		in.Processes[i].CompletionRecords = in.Processes[i].Role == protocol.RoleDispatcher
	}
}

// withKeys gives in's final state the per-key state a store that kept
// every event reports: per key of the records, its highest handled
// sequence as counter, event count and highest sequence.
func withKeys(in *Input) {
	top := map[string]int64{}
	for fi := range in.Files {
		for _, h := range in.Files[fi].Handled {
			if h.Key != "" {
				top[h.Key] = max(top[h.Key], h.Sequence)
			}
		}
	}
	keys := slices.Sorted(maps.Keys(top))
	in.Final.KeysReported, in.Final.Keys = true, nil
	for _, k := range keys {
		in.Final.Keys = append(in.Final.Keys, protocol.KeyState{Key: k, LastSequence: top[k], Events: top[k], MaxSequence: top[k]})
	}
}

// completionLag is how long after a handler returned its completion
// line is written, in the clean run.
const completionLag = 50

// completedLine finds the completion line of event id by handler h.
func completedLine(in *Input, id, h string) *record.Completed {
	for fi := range in.Files {
		for ci := range in.Files[fi].Completed {
			if c := &in.Files[fi].Completed[ci]; c.EventID == id && c.Handler == h {
				return c
			}
		}
	}
	panic("no completion " + id + "/" + h)
}

// proc returns in's listed process of that name.
func proc(in *Input, name string) *Process {
	for i := range in.Processes {
		if in.Processes[i].Name == name {
			return &in.Processes[i]
		}
	}
	panic("no process " + name)
}

// counts names every count of a result; a case lists the ones it expects
// to be non-zero and every other must be 0.
func counts(r *Result) map[string]int64 {
	return map[string]int64{
		"published": r.Published, "expected": r.Expected, "handled": r.HandledOK, "uncertain": r.Uncertain,
		"uncertainHandled": r.UncertainHandled, "lost": r.Lost, "lostPoison": r.LostPoison, "unexpected": r.Unexpected,
		"duplicates": r.Duplicates, "redeliveries": r.Redeliveries, "order": r.OrderViolations, "keyMismatches": r.KeyMismatches,
		"sequenceConflicts": r.SequenceConflicts, "commitOrder": r.CommitOrderViolations, "pending": r.Pending,
		"processing": r.Processing, "deadExpected": r.DeadExpected, "deadUnexpected": r.DeadUnexpected,
		"poisonHandled": r.PoisonHandled, "overBudget": r.OverBudget, "publishErrors": r.PublishErrors,
		"truncated": r.TruncatedFiles, "failures": r.Failures, "empty": b2i(r.Empty), "idle": b2i(r.Idle),
		"unverified": b2i(r.DeadLettersUnverified), "commitOrderSkipped": r.CommitOrderSkipped,
		"keyOrderSkipped": r.KeyOrderSkipped, "tokenConflicts": r.TokenConflicts, "attempts": r.AttemptViolations, "causality": r.CausalityViolations, "causalityUnchecked": r.CausalityUnchecked, "publishErrorsAllowed": r.PublishErrorsAllowed, "deadMismatch": r.DeadLetterMismatches, "sequenceGaps": r.SequenceGaps, "uncertainUnexplained": r.UncertainUnexplained, "failuresUnexplained": r.FailuresUnexplained, "noHandlers": b2i(r.NoHandlers), "tokensUnchecked": r.TokensUnchecked,
		"overlapUnchecked": r.OverlapUnchecked, "filesMissing": r.RecordFilesMissing, "filesUnlisted": r.RecordFilesUnlisted,
		"counterMismatches": r.CounterMismatches, "processList": r.ProcessListViolations,
		"completion": r.CompletionViolations, "keyStates": r.KeyStateViolations,
	}
}

// mutations is the table of record sets and the verdict each must get:
// the cases issue 11 names (every delivery handled twice in a fault cell,
// an old sequence handled again after later ones, an empty key, an empty
// run, ...) and the checks' own edges. Every case starts from a clean run
// of 8 events on 2 keys with handlers a and b, unless it builds its own.
var mutations = []struct {
	name  string
	build func() *Input // nil: cleanRun(8, 2, "a", "b")
	edit  func(*Input)
	valid bool
	want  map[string]int64 // non-zero counts besides published 8, expected 16, handled 16
	// example must appear in an example (INVALID) or a note (VALID).
	example string
}{
	{name: "clean", edit: func(*Input) {}, valid: true},
	{name: "a dropped handle is lost", edit: func(in *Input) {
		d := file(in, "disp-1")
		d.Handled = d.Handled[:len(d.Handled)-1]
	}, want: map[string]int64{"lost": 1, "handled": 15}, example: "lost: event e7 handler b"},
	{name: "swapped handles of a key break order", edit: func(in *Input) {
		// Key k0: e0 (seq 1), e2 (seq 2). Handler a runs e2 first.
		h := handled(in, "e2", "a")
		h.HandleNs, h.EndNs = handleStart-step/2, handleStart-step/2+handlerLen
	}, want: map[string]int64{"order": 1}, example: `handled sequence 1 (event e0) after sequence 2 (event e2)`},
	{name: "every delivery handled twice in a fault cell", edit: func(in *Input) {
		for fi := range in.Files {
			f := &in.Files[fi]
			for _, h := range slices.Clone(f.Handled) {
				h.HandleNs += step / 2
				h.EndNs += step / 2
				f.Handled = append(f.Handled, h)
			}
		}
		killAt(in, "disp-1", handleStart+3*step+step/2) // disp-1 dies after e3
	},
		// None is explained: disp-0 was not killed, and disp-1's repeats
		// of its handles before the kill (e1, e3 x 2 handlers) start
		// before the kill, with the same attempt (issue 24, class 1).
		// (Each repeat follows its first handle at once, so order holds.)
		want: map[string]int64{"attempts": 16, "duplicates": 16, "tokenConflicts": 16}, example: "the repeat started before the kill of disp-1"},
	{name: "stale lease: an old sequence again after later ones", edit: func(in *Input) {
		// A fault cell, whose fault hit a process that is not this one.
		in.Expect.AllowRedelivery = true
		in.Expect.Faults = []Fault{{Kind: FaultKill, Process: "disp-9", StartNs: 1, EndNs: 1}}
		again := *handled(in, "e0", "a")
		again.HandleNs = handleStart + 10*step
		f := file(in, "disp-1")
		rerun(f, again)
	}, want: map[string]int64{"attempts": 1, "duplicates": 1, "order": 1}, example: "which a live owner had handled"},
	{name: "the killed dispatcher's delivery runs again on the survivor", edit: func(in *Input) {
		// disp-1 handled e3 and was killed before completing it; disp-0
		// takes the key over: e3 again, then e5 and e7 as before.
		killAt(in, "disp-1", handleStart+3*step+10)
		for _, h := range []string{"a", "b"} {
			again := *handled(in, "e3", h)
			again.HandleNs, again.Attempt = handleStart+4*step+50, 2
			f := file(in, "disp-0")
			rerun(f, again)
		}
	}, valid: true, want: map[string]int64{"redeliveries": 2}},
	{name: "a redelivery within a lease of a database restart", edit: func(in *Input) {
		in.Expect.AllowRedelivery, in.Expect.Lease = true, 2*time.Microsecond
		in.Expect.Faults = []Fault{{Kind: FaultRestart, StartNs: handleStart + 6*step, EndNs: handleStart + 6*step + 100}}
		again := *handled(in, "e5", "a") // handled 1 µs before the restart
		again.HandleNs = handleStart + 6*step + 150
		f := file(in, "disp-1")
		rerun(f, again)
	}, valid: true, want: map[string]int64{"redeliveries": 1}},
	{name: "a repeat long before a database restart", edit: func(in *Input) {
		in.Expect.AllowRedelivery, in.Expect.Lease = true, 2*time.Microsecond
		in.Expect.Faults = []Fault{{Kind: FaultRestart, StartNs: handleStart + 6*step, EndNs: handleStart + 6*step + 100}}
		again := *handled(in, "e1", "a") // 5 µs before the restart: not in flight
		again.HandleNs += 50
		f := file(in, "disp-1")
		rerun(f, again)
	}, want: map[string]int64{"attempts": 1, "duplicates": 1}},
	// Issue 24, class 1: a repeat is explained by its own time and
	// attempt too, not only by the time of the handle it repeats.
	{name: "class 1: a survivor repeats a delivery before the kill", edit: func(in *Input) {
		killAt(in, "disp-1", handleStart+3*step+10)
		again := *handled(in, "e3", "a")
		again.HandleNs, again.Attempt = handleStart+3*step+5, 2 // 5 ns before the kill
		f := file(in, "disp-0")
		rerun(f, again)
	}, want: map[string]int64{"duplicates": 1}, example: "the repeat started before the kill of disp-1"},
	{name: "class 1: a kill stamped before and after its call bounds the repeat by its start", edit: func(in *Input) {
		killAt(in, "disp-1", handleStart+3*step+100)
		in.Expect.Faults[0].StartNs = handleStart + 3*step + 10
		again := *handled(in, "e3", "a")
		again.HandleNs, again.Attempt = handleStart+3*step+50, 2 // after the kill began
		rerun(file(in, "disp-0"), again)
	}, valid: true, want: map[string]int64{"redeliveries": 1}},
	{name: "class 1: a takeover repeat without a higher attempt", edit: func(in *Input) {
		killAt(in, "disp-1", handleStart+3*step+10)
		again := *handled(in, "e3", "a")
		again.HandleNs = handleStart + 4*step + 50 // attempt 1 again
		f := file(in, "disp-0")
		rerun(f, again)
	}, want: map[string]int64{"attempts": 1, "duplicates": 1}, example: "the repeat carries no higher attempt than the handle it repeats"},
	{name: "class 1: a repeat before the restart began", edit: func(in *Input) {
		in.Expect.AllowRedelivery, in.Expect.Lease = true, 2*time.Microsecond
		in.Expect.Faults = []Fault{{Kind: FaultRestart, StartNs: handleStart + 6*step, EndNs: handleStart + 6*step + 100}}
		again := *handled(in, "e5", "a") // handled 1 µs before the restart
		again.HandleNs, again.Attempt = again.HandleNs+50, 2
		f := file(in, "disp-1")
		rerun(f, again)
	}, want: map[string]int64{"duplicates": 1}, example: "the repeat started before the database restart began"},
	// Issue 23: a database crash can lose a claim (the attempt it
	// charged too) and the work in flight, like a restart.
	{name: "a redelivery after a database crash", edit: func(in *Input) {
		crashAt(in, handleStart+6*step)
		again := *handled(in, "e5", "a") // handled 1 µs before the crash
		again.HandleNs = handleStart + 6*step + 300
		f := file(in, "disp-0")
		rerun(f, again)
	}, valid: true, want: map[string]int64{"redeliveries": 1}},
	{name: "crash: a repeat before the crash began", edit: func(in *Input) {
		crashAt(in, handleStart+6*step)
		again := *handled(in, "e5", "a")
		again.HandleNs, again.Attempt = again.HandleNs+50, 2
		f := file(in, "disp-0")
		rerun(f, again)
	}, want: map[string]int64{"duplicates": 1}, example: "the repeat started before the database crash began"},
	{name: "crash: a repeat of a handle out of the crash's reach", edit: func(in *Input) {
		crashAt(in, handleStart+6*step)
		again := *handled(in, "e1", "a") // 5 µs before the crash, the lease is 2 µs
		again.HandleNs, again.Attempt = handleStart+6*step+300, 2
		f := file(in, "disp-0")
		rerun(f, again)
	}, want: map[string]int64{"duplicates": 1, "order": 1}, example: "no fault explains it"},
	// Issue 23: one lease token of a delivery is one claim: one holder
	// runs it once, in every cell.
	{name: "lease token: the survivor runs the killed holder's token", edit: func(in *Input) {
		killAt(in, "disp-1", handleStart+3*step+10)
		again := *handled(in, "e3", "a")
		again.HandleNs, again.EndNs, again.Attempt, again.Holder = handleStart+4*step+50, handleStart+4*step+60, 2, "disp-0"
		f := file(in, "disp-0")
		f.Handled = append(f.Handled, again) // a valid redelivery but for its token
	}, want: map[string]int64{"redeliveries": 1, "tokenConflicts": 1}, example: `token "t3" of event e3 handler a held by two holders`},
	{name: "lease token: one token run twice by one holder after a crash", edit: func(in *Input) {
		crashAt(in, handleStart+6*step)
		again := *handled(in, "e5", "a") // handled 1 µs before the crash
		again.HandleNs, again.EndNs = handleStart+6*step+300, handleStart+6*step+350
		f := file(in, "disp-1")
		f.Handled = append(f.Handled, again)
	}, want: map[string]int64{"redeliveries": 1, "tokenConflicts": 1}, example: `token "t5" of event e5 handler a run twice by holder disp-1`},
	{name: "lease token: a failed run and an ok run of one token by two holders", edit: func(in *Input) {
		in.Expect.FailFirst = 1 // the workload fails the first attempts
		h := handled(in, "e6", "b")
		h.OK = false
		again := *h
		again.HandleNs, again.EndNs, again.OK, again.Holder, again.Attempt = h.HandleNs+300, h.HandleNs+350, true, "disp-1", 2
		f := file(in, "disp-1")
		f.Handled = append(f.Handled, again)
	}, want: map[string]int64{"tokenConflicts": 1, "failures": 1}, example: "held by two holders"},
	{name: "records without tokens or holders are not checked for them", edit: func(in *Input) {
		for fi := range in.Files {
			for ri := range in.Files[fi].Handled {
				in.Files[fi].Handled[ri].Token, in.Files[fi].Handled[ri].Holder = "", ""
			}
		}
	}, valid: true, want: map[string]int64{"tokensUnchecked": 16}, example: "16 handles not checked for lease tokens"},
	{name: "two sequences of a key at once", edit: func(in *Input) {
		// e0 (k0, sequence 1) still runs when e2 (sequence 2) starts.
		handled(in, "e0", "a").EndNs = handled(in, "e2", "a").HandleNs + 50
	}, want: map[string]int64{"order": 1}, example: `handler a key "k0" ran sequences 1 (event e0, disp-0) and 2 (event e2, disp-0) at once`},
	{name: "a failed handle overlapping the next sequence", edit: func(in *Input) {
		in.Expect.FailFirst = 1 // the workload fails the first attempts
		// e5 (k1, sequence 3) fails on disp-1, and its failed run ends
		// after e7 (sequence 4) started.
		h := handled(in, "e5", "b")
		h.OK, h.EndNs = false, handled(in, "e7", "b").HandleNs+1
		again := *h
		again.HandleNs, again.EndNs, again.Attempt, again.OK, again.Token = h.HandleNs+300, h.HandleNs+400, 2, true, "t5-2"
		file(in, "disp-1").Handled = append(file(in, "disp-1").Handled, again)
	}, want: map[string]int64{"order": 1, "failures": 1}, example: "at once"},
	{name: "records without handler ends are not checked for overlap", edit: func(in *Input) {
		for fi := range in.Files {
			for ri := range in.Files[fi].Handled {
				in.Files[fi].Handled[ri].EndNs = 0
			}
		}
		handled(in, "e0", "a").HandleNs = handled(in, "e2", "a").HandleNs - 1 // would overlap, if it ended
	}, valid: true, want: map[string]int64{"overlapUnchecked": 16}, example: "16 keyed handles not checked for overlap"},
	// Issue 24, class 2: attempts are accounted.
	{name: "class 2: one attempt failed by two owners", edit: func(in *Input) {
		in.Expect.FailFirst = 1 // the workload fails the first attempts
		in.Expect.AllowRedelivery = true
		in.Expect.Faults = []Fault{{Kind: FaultKill, Process: "disp-9", StartNs: 1, EndNs: 1}}
		h := handled(in, "e2", "a") // disp-0, attempt 1
		h.OK = false
		fail, ok := *h, *h
		fail.HandleNs = h.HandleNs + 200
		ok.HandleNs, ok.Attempt, ok.OK = h.HandleNs+400, 2, true
		rerun(file(in, "disp-1"), fail)
		rerun(file(in, "disp-1"), ok)
	}, want: map[string]int64{"attempts": 1, "failures": 2}, example: "ran attempt 1 twice (disp-0, ok false, and disp-1, ok false)"},
	{name: "class 2: a long run of attempts repeats one", edit: func(in *Input) {
		in.Expect.FailFirst = 30
		h := handled(in, "e0", "a")
		h.OK = false
		base := *h
		for i, a := range []int{2, 3, 4, 5, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20} {
			again := base
			again.HandleNs, again.Attempt = base.HandleNs+int64(i+1)*10, a
			rerun(file(in, "disp-0"), again)
		}
		file(in, "disp-0").Handled[len(file(in, "disp-0").Handled)-1].OK = true
	}, want: map[string]int64{"attempts": 1, "failures": 20}, example: "ran attempt 5 twice"},
	{name: "class 2: an attempt gap outside fault cells", edit: func(in *Input) {
		in.Expect.FailFirst = 1 // the workload fails the first attempts
		h := handled(in, "e3", "b")
		h.OK = false
		again := *h
		again.HandleNs, again.Attempt, again.OK = h.HandleNs+300, 3, true
		rerun(file(in, "disp-1"), again)
	}, want: map[string]int64{"attempts": 1, "failures": 1}, example: "ran attempt 3 (disp-1) with no attempt 2 recorded, outside a fault cell"},
	{name: "class 2: a gap in a fault cell is a lost attempt", edit: func(in *Input) {
		in.Expect.FailFirst = 1 // the workload fails the first attempts
		killAt(in, "disp-1", handleStart+3*step+10)
		h := handled(in, "e3", "b")
		h.OK = false
		again := *h
		again.HandleNs, again.Attempt, again.OK = handleStart+4*step+300, 3, true
		rerun(file(in, "disp-0"), again)
	}, valid: true, want: map[string]int64{"failures": 1}},
	{name: "class 2: an attempt lower than one before it", edit: func(in *Input) {
		in.Expect.FailFirst = 2 // the workload fails the first attempts
		in.Expect.AllowRedelivery = true
		in.Expect.Faults = []Fault{{Kind: FaultKill, Process: "disp-9", StartNs: 1, EndNs: 1}}
		h := handled(in, "e3", "b")
		h.OK, h.Attempt = false, 2
		again := *h
		again.HandleNs, again.Attempt, again.OK = h.HandleNs+300, 1, true
		rerun(file(in, "disp-1"), again)
	}, want: map[string]int64{"attempts": 1, "failures": 1}, example: "ran attempt 1 (disp-1) after attempt 2"},
	// Issue 24, class 4: order counts failed handles and ties.
	{name: "class 4: a later sequence handled while an earlier one is retrying", edit: func(in *Input) {
		poisonFirstOfK1(in, handleStart+3*step+300) // e1's second attempt after e3 (sequence 2) was handled
	}, want: map[string]int64{"expected": 14, "handled": 14, "deadExpected": 2, "failures": 4, "order": 2},
		example: `handler a key "k1" handled sequence 2 (event e3, disp-1) ok while sequence 1 (event e1) was retrying: head of line skipped`},
	{name: "class 4: a poison head retried before the next sequence", edit: func(in *Input) {
		poisonFirstOfK1(in, handleStart+step+200)
	}, valid: true, want: map[string]int64{"expected": 14, "handled": 14, "deadExpected": 2, "failures": 4}},
	{name: "class 4: a frozen clock hides a reversed order", edit: func(in *Input) {
		// disp-0 handles key k0 (e0, e2, e4, e6) with a clock that stands
		// still, and its lines say it ran e2 before e0 for handler a.
		d := file(in, "disp-0")
		for i := range d.Handled {
			d.Handled[i].HandleNs, d.Handled[i].EndNs = handleStart+100*step, handleStart+100*step
		}
		d.Handled[0], d.Handled[2] = d.Handled[2], d.Handled[0] // e0/a <-> e2/a
	}, want: map[string]int64{"order": 1}, example: `handler a key "k0" handled sequence 1 (event e0) after sequence 2 (event e2)`},
	// Issue 24, class 3: causality, per event and per process.
	{name: "class 3: a dispatcher whose clock is an hour behind", edit: func(in *Input) {
		d := file(in, "disp-1")
		for i := range d.Handled {
			d.Handled[i].HandleNs -= int64(time.Hour)
			d.Handled[i].EndNs -= int64(time.Hour)
		}
	}, want: map[string]int64{"causality": 8}, example: "disp-1 started 8 handles before their events' publish calls started, by up to 59m59.996s (event e1 handler a)"},
	{name: "class 3: a handle before its publish call started", edit: func(in *Input) {
		h := handled(in, "e0", "a")
		h.HandleNs, h.EndNs = pubStart-1, pubStart+50
	}, want: map[string]int64{"causality": 1}, example: "disp-0 started 1 handles before their events' publish calls started, by up to 1ns (event e0 handler a)"},
	{name: "class 3: a publish call that started after its commit", edit: func(in *Input) {
		p := &file(in, "pub-0").Published[3]
		p.CallStartNs = p.CommitNs + 1
	}, want: map[string]int64{"causality": 1, "commitOrder": 1}, example: "pub-0's publish call of event e3 started"},
	{name: "class 3: a handler that ended before it started", edit: func(in *Input) {
		h := handled(in, "e4", "a")
		h.EndNs = h.HandleNs - 1
	}, want: map[string]int64{"causality": 1}, example: "ended 1 ns before it started"},
	// Issue 24, class 5: a key's sequences have no gaps.
	{name: "class 5: an event nobody recorded leaves a sequence gap", edit: func(in *Input) {
		// e4 (k0, sequence 3) vanishes from every record: 1, 2, 4 remain.
		pub := file(in, "pub-0")
		pub.Published = slices.DeleteFunc(pub.Published, func(p record.Published) bool { return p.EventID == "e4" })
		d := file(in, "disp-0")
		d.Handled = slices.DeleteFunc(d.Handled, func(h record.Handled) bool { return h.EventID == "e4" })
	}, want: map[string]int64{"published": 7, "expected": 14, "handled": 14, "sequenceGaps": 1},
		example: `sequence gap: key "k0" has sequence 4 after 2: 1 sequences below 4 were never handled, and 0 events of the key could hold them`},
	{name: "class 5: a published event nobody handled may hold the missing sequence", edit: func(in *Input) {
		d := file(in, "disp-0")
		d.Handled = slices.DeleteFunc(d.Handled, func(h record.Handled) bool { return h.EventID == "e4" })
	}, want: map[string]int64{"lost": 2, "handled": 14}, example: "lost: event e4"},
	{name: "class 5: a key that does not start at sequence 1", edit: func(in *Input) {
		// e0 (k0, sequence 1) vanishes from every record.
		pub := file(in, "pub-0")
		pub.Published = slices.DeleteFunc(pub.Published, func(p record.Published) bool { return p.EventID == "e0" })
		d := file(in, "disp-0")
		d.Handled = slices.DeleteFunc(d.Handled, func(h record.Handled) bool { return h.EventID == "e0" })
	}, want: map[string]int64{"published": 7, "expected": 14, "handled": 14, "sequenceGaps": 1},
		example: `sequence gap: key "k0" has sequence 2 after 0`},
	// Issue 24, class 6: uncertain commits and failures need a cause.
	{name: "class 6: uncertain commits in a cell without a database fault", edit: func(in *Input) {
		pub := file(in, "pub-0")
		for i := range pub.Published {
			pub.Published[i].Uncertain = true // every one handled, so each exists
		}
	}, want: map[string]int64{"uncertainHandled": 8, "uncertainUnexplained": 8},
		example: "uncertain commits: 8 publish calls did not learn their commit's outcome in a cell without a database restart or crash"},
	{name: "class 6: failures that no plan explains", edit: func(in *Input) {
		h := handled(in, "e6", "a")
		h.OK = false
		again := *h
		again.HandleNs, again.EndNs, again.Attempt, again.OK = h.HandleNs+200, h.HandleNs+300, 2, true
		rerun(file(in, "disp-0"), again)
	}, want: map[string]int64{"failures": 1, "failuresUnexplained": 1},
		example: "unplanned failures: disp-0 failed 1 handles that no poison, planned failure or database fault explains (first: event e6 handler a attempt 1)"},
	{name: "class 6: failures within a database restart's reach", edit: func(in *Input) {
		in.Expect.AllowRedelivery, in.Expect.Lease = true, 2*time.Microsecond
		in.Expect.Faults = []Fault{{Kind: FaultRestart, StartNs: handleStart + 6*step, EndNs: handleStart + 6*step + 100}}
		h := handled(in, "e6", "a")
		h.OK = false
		again := *h
		again.HandleNs, again.EndNs, again.Attempt, again.OK = h.HandleNs+200, h.HandleNs+300, 2, true
		rerun(file(in, "disp-0"), again)
	}, valid: true, want: map[string]int64{"failures": 1}},
	{name: "class 6: a failed handle proves an uncertain event exists", edit: func(in *Input) {
		restartLater(in)
		in.Expect.FailFirst = 1
		file(in, "pub-0").Published[7].Uncertain = true
		d := file(in, "disp-1")
		d.Handled = slices.DeleteFunc(d.Handled, func(h record.Handled) bool { return h.EventID == "e7" && h.Handler == "b" })
		handled(in, "e7", "a").OK = false
	}, want: map[string]int64{"uncertainHandled": 1, "lost": 2, "handled": 14, "failures": 1}, example: "lost: event e7 handler a"},
	// Issue 24, completion records: every completion the store confirmed
	// against the handles and the counters.
	{name: "completions: one per ok handle, after it", edit: withCompletions, valid: true},
	{name: "completions: dispatchers that write none are noted", edit: func(in *Input) {
		withCompletions(in)
		for fi := range in.Files {
			in.Files[fi].Completed = nil
		}
		for i := range in.Processes {
			in.Processes[i].CompletionRecords = false
		}
	}, valid: true, example: "2 of 2 dispatchers not checked for completions"},
	{name: "completions: a completion under a token no handle of its process ran", edit: func(in *Input) {
		withCompletions(in)
		completedLine(in, "e2", "a").Token = "t-other"
	}, want: map[string]int64{"completion": 2},
		example: "completion without its handle: disp-0 completed event e2 handler a attempt 1 under token t-other, and holds no ok handle of that claim"},
	{name: "completions: a completion in another process's file", edit: func(in *Input) {
		withCompletions(in)
		d0, d1 := file(in, "disp-0"), file(in, "disp-1")
		d1.Completed = append(d1.Completed, d0.Completed[0])
		d0.Completed = d0.Completed[1:]
		proc(in, "disp-0").Counters.Completed--
		proc(in, "disp-1").Counters.Completed++
	}, want: map[string]int64{"completion": 2}, example: "completion without its handle: disp-1 completed event e0 handler a"},
	{name: "completions: a completion before its handler returned", edit: func(in *Input) {
		withCompletions(in)
		completedLine(in, "e3", "b").CompletedNs -= completionLag + 30
	}, want: map[string]int64{"completion": 1}, example: "completion before its handle ended: disp-1 completed event e3 handler b"},
	{name: "completions: one delivery completed twice", edit: func(in *Input) {
		withCompletions(in)
		d := file(in, "disp-1")
		d.Completed = append(d.Completed, *completedLine(in, "e5", "a"))
		proc(in, "disp-1").Counters.Completed++
	}, want: map[string]int64{"completion": 1}, example: "completed twice: event e5 handler a was completed by disp-1 and again by disp-1"},
	{name: "completions: a handle after the delivery's completion, which a crash would explain", edit: func(in *Input) {
		withCompletions(in)
		done := completedLine(in, "e4", "a").CompletedNs
		crashAt(in, done+5)
		h := *handled(in, "e4", "a")
		h.Attempt, h.HandleNs, h.OK = 2, done+10, false
		rerun(file(in, "disp-1"), h)
		listProcesses(in)
		for i := range in.Processes {
			in.Processes[i].CompletionRecords = in.Processes[i].Role == protocol.RoleDispatcher
		}
	}, want: map[string]int64{"completion": 1, "redeliveries": 1, "failures": 1},
		example: "handled after its completion: event e4 handler a ran again (disp-1, attempt 2) 10 ns after disp-0's completion of attempt 1 committed"},
	{name: "completions: a completion after a takeover had started a higher attempt", edit: func(in *Input) {
		withCompletions(in)
		killAt(in, "disp-0", handleStart+6*step+handlerLen+completionLag+5)
		// disp-1 took e6/a over (attempt 2) while disp-0 still ran attempt
		// 1, whose completion the store accepted afterwards.
		h := *handled(in, "e6", "a")
		h.Attempt, h.HandleNs = 2, h.HandleNs+handlerLen/2
		h.OK = false
		rerun(file(in, "disp-1"), h)
		listProcesses(in)
		for i := range in.Processes {
			in.Processes[i].CompletionRecords = in.Processes[i].Role == protocol.RoleDispatcher
		}
	}, want: map[string]int64{"completion": 1, "duplicates": 1, "failures": 1, "failuresUnexplained": 1},
		example: "completion under a superseded lease: disp-0 completed event e6 handler a attempt 1, after disp-1 had started attempt 2 of it"},
	{name: "completions: a completion the process counted is missing", edit: func(in *Input) {
		withCompletions(in)
		d := file(in, "disp-0")
		d.Completed = d.Completed[:len(d.Completed)-1]
	}, want: map[string]int64{"completion": 2}, example: "completion records: disp-0 ended with its done line counting 8 completions; its record file holds 7"},
	{name: "completions: lines from a process not listed as writing them", edit: func(in *Input) {
		withCompletions(in)
		proc(in, "disp-1").CompletionRecords = false
	}, want: map[string]int64{"completion": 1}, example: "completion: disp-1 wrote 8 completion lines, but the manifest does not list it"},
	{name: "completions: a killed process may lose its last completion lines", edit: func(in *Input) {
		withCompletions(in)
		killAt(in, "disp-0", handleStart+100*step)
		listProcesses(in)
		for i := range in.Processes {
			in.Processes[i].CompletionRecords = in.Processes[i].Role == protocol.RoleDispatcher
		}
		d := file(in, "disp-0")
		d.Completed = d.Completed[:len(d.Completed)-2]
	}, valid: true},
	// Issue 24, class 5: the store's per-key counters show a lost tail.
	{name: "keys: the store's counters match the records", edit: withKeys, valid: true},
	{name: "keys: not reported by the side, noted", edit: func(*Input) {}, valid: true,
		example: "keys not checked against the store's counters (a lost tail)"},
	{name: "class 5: a lost tail (the last event of a key, recorded and handled by nobody)", edit: func(in *Input) {
		withKeys(in)
		in.Final.Keys[1].LastSequence++ // k1 has one more event in the store
		in.Final.Keys[1].Events++
		in.Final.Keys[1].MaxSequence++
	}, want: map[string]int64{"keyStates": 1},
		example: `lost tail: the store's counter of key "k1" is at 5, the handles show sequences up to 4: 1 committed events of the key were never handled (0 published records of the key have no handle)`},
	{name: "class 5: an uncertain commit the store's counter shows committed, and nobody handled", edit: func(in *Input) {
		withKeys(in)
		in.Final.Keys[1].LastSequence++
		in.Final.Keys[1].Events++
		in.Final.Keys[1].MaxSequence++
		p := file(in, "pub-0")
		p.Published = append(p.Published, record.Published{EventID: "e9", EventType: "t", Key: "k1", CallStartNs: 1, CommitNs: 2, Uncertain: true})
		in.Expect.AllowRedelivery, in.Expect.AllowPublishErrors = true, true
		crashAt(in, handleStart+100*step)
	}, want: map[string]int64{"uncertain": 1, "published": 9, "keyStates": 1}, example: "(1 published records of the key have no handle)"},
	{name: "class 5: the store's counter below a handled sequence", edit: func(in *Input) {
		withKeys(in)
		in.Final.Keys[0].LastSequence--
	}, want: map[string]int64{"keyStates": 2}, example: `key state: the store's counter of key "k0" is at 3, and it holds 4 events`},
	{name: "class 5: the store deleted an event row", edit: func(in *Input) {
		withKeys(in)
		in.Final.Keys[1].Events--
	}, want: map[string]int64{"keyStates": 1}, example: `key state: the store's counter of key "k1" is at 4, and it holds 3 events of the key up to sequence 4`},
	{name: "class 5: a key the store does not hold", edit: func(in *Input) {
		withKeys(in)
		in.Final.Keys = in.Final.Keys[1:]
	}, want: map[string]int64{"keyStates": 1}, example: `key state: key "k0", handled up to sequence 4, is not in the store's keys`},
	{name: "class 5: a key no record names", edit: func(in *Input) {
		withKeys(in)
		in.Final.Keys = append(in.Final.Keys, protocol.KeyState{Key: "k-ghost", LastSequence: 1, Events: 1, MaxSequence: 1})
	}, want: map[string]int64{"keyStates": 1}, example: `key state: the store holds key "k-ghost" (counter 1, 1 events), which no record names`},
	// Issue 24, class 9: the handlers come from the manifest or the
	// caller, never from the records.
	{name: "class 9: no handler list", edit: func(in *Input) { in.Handlers = nil },
		want: map[string]int64{"noHandlers": 1, "expected": 0, "handled": 0, "unexpected": 16}, example: "no handlers: the window's handler list is unknown"},
	{name: "a replay out of order", edit: func(in *Input) {
		killAt(in, "disp-1", handleStart+8*step)
		// disp-1 ran e1, e3, e5, e7 (key k1) and died; disp-0 replays
		// them, but e5 before e3.
		f := file(in, "disp-0")
		for i, id := range []string{"e1", "e5", "e3", "e7"} {
			again := *handled(in, id, "a")
			again.HandleNs, again.Attempt = handleStart+9*step+int64(i)*step/4, 2
			rerun(f, again)
		}
	}, want: map[string]int64{"redeliveries": 4, "order": 1}, example: "again after sequence 3, which a live owner had handled"},
	{name: "a replay out of order within a restart's reach", edit: func(in *Input) {
		// Every handle is within a lease of the restart, so none is firm:
		// only the replay's own order can tell.
		in.Expect.AllowRedelivery, in.Expect.Lease = true, time.Second
		in.Expect.Faults = []Fault{{Kind: FaultRestart, StartNs: handleStart, EndNs: handleStart + 8*step}}
		f := file(in, "disp-0")
		for i, id := range []string{"e5", "e3"} {
			again := *handled(in, id, "a")
			again.HandleNs = handleStart + 9*step + int64(i)*step/4
			rerun(f, again)
		}
	}, want: map[string]int64{"redeliveries": 2, "order": 1}, example: "replayed handler a key \"k1\" out of order: sequence 2 after 3"},
	{name: "an unkeyed duplicate outside fault cells", build: func() *Input { return cleanRun(8, 0, "a", "b") }, edit: func(in *Input) {
		f := file(in, "disp-0")
		f.Handled = append(f.Handled, f.Handled[0])
	}, want: map[string]int64{"attempts": 1, "duplicates": 1, "tokenConflicts": 1}, example: "run twice by holder disp-0"},
	{name: "a keyed duplicate is also out of order", edit: func(in *Input) {
		again := *handled(in, "e6", "b")
		again.HandleNs += 10 * step
		f := file(in, "disp-0")
		rerun(f, again)
	}, want: map[string]int64{"attempts": 1, "duplicates": 1, "order": 1}},
	{name: "a handle without its key", edit: func(in *Input) {
		h := handled(in, "e4", "a")
		h.Key, h.Sequence = "", 0
	}, want: map[string]int64{"keyMismatches": 1, "order": 1}, example: `published with key "k0", handler a reports ""`},
	{name: "two events with one sequence", edit: func(in *Input) {
		for _, h := range []string{"a", "b"} {
			handled(in, "e2", h).Sequence = 1 // e0 holds 1 of k0
		}
	}, want: map[string]int64{"sequenceConflicts": 1, "order": 2, "commitOrder": 1, "sequenceGaps": 1}, example: "both hold sequence 1"},
	{name: "one event with two sequences", edit: func(in *Input) {
		handled(in, "e6", "b").Sequence = 9
	}, want: map[string]int64{"sequenceConflicts": 1}, example: "handled with sequences 4 and 9"},
	{name: "sequences against commit order", edit: func(in *Input) {
		// e0 and e2 (key k0) swap sequences, and are handled in the
		// swapped order: the store's own numbering looks fine, but e0's
		// commit returned before e2's call started.
		for _, h := range []string{"a", "b"} {
			x, y := handled(in, "e0", h), handled(in, "e2", h)
			x.Sequence, y.Sequence = 2, 1
			x.HandleNs, y.HandleNs, x.EndNs, y.EndNs = y.HandleNs, x.HandleNs, y.EndNs, x.EndNs
		}
	}, want: map[string]int64{"commitOrder": 1}, example: "commit order: key \"k0\": event e0 (sequence 2) committed before event e2 (sequence 1) started"},
	{name: "overlapping calls may commit in either order", edit: func(in *Input) {
		pub := file(in, "pub-0")
		pub.Published[2].CallStartNs = pub.Published[0].CallStartNs // e2's call began before e0's returned
		for _, h := range []string{"a", "b"} {
			x, y := handled(in, "e0", h), handled(in, "e2", h)
			x.Sequence, y.Sequence = 2, 1
			x.HandleNs, y.HandleNs, x.EndNs, y.EndNs = y.HandleNs, x.HandleNs, y.EndNs, x.EndNs
		}
	}, valid: true},
	{name: "a v0.1.0 publisher: no call starts", edit: func(in *Input) {
		for i := range file(in, "pub-0").Published {
			file(in, "pub-0").Published[i].CallStartNs = 0
		}
	}, valid: true, want: map[string]int64{"commitOrderSkipped": 8, "causalityUnchecked": 16}, example: "16 handles not checked for causality"},
	{name: "an empty run", build: func() *Input { return &Input{Handlers: []string{"a"}} }, edit: func(*Input) {},
		want: map[string]int64{"published": 0, "expected": 0, "handled": 0, "empty": 1}, example: "empty"},
	{name: "an idle window", edit: func(in *Input) {
		in.Expect.Window = &Span{StartNs: handleStart + 100*step, EndNs: handleStart + 200*step}
	}, want: map[string]int64{"idle": 1}, example: "idle"},
	{name: "publish errors outside fault cells", edit: func(in *Input) { in.PublishErrors = 3 },
		want: map[string]int64{"publishErrors": 3}},
	{name: "publish errors in a fault cell with a database restart", edit: func(in *Input) {
		in.PublishErrors, in.Expect.AllowPublishErrors = 3, true
		in.Expect.AllowRedelivery = true
		in.Expect.Faults = []Fault{{Kind: FaultRestart, StartNs: handleStart + 100*step, EndNs: handleStart + 101*step}}
	}, valid: true, want: map[string]int64{"publishErrorsAllowed": 3}, example: ""},
	// Issue 24, class 8: a kill of a dispatcher fails no publish, and a
	// killed publisher commits nothing after its kill.
	{name: "class 8: publish errors in a kill-only fault cell", edit: func(in *Input) {
		in.PublishErrors, in.Expect.AllowPublishErrors = 3, true
		killAt(in, "disp-1", handleStart+100*step)
	}, want: map[string]int64{"publishErrors": 3}, example: "publish errors: 3 publish calls failed in a cell whose faults (no database restart or crash) cannot fail a publish"},
	{name: "class 8: a killed publisher's commits after its kill", edit: func(in *Input) {
		in.Expect.AllowRedelivery = true
		in.Expect.Faults = []Fault{{Kind: FaultKill, Process: "pub-0", StartNs: pubStart + 5*step, EndNs: pubStart + 5*step}}
	}, want: map[string]int64{"unexpected": 9, "published": 5, "expected": 10, "handled": 10}, example: "unexpected: pub-0 recorded a commit of event e5 after the fault plan killed it"},
	{name: "an uncertain event that one handler ran is certain", edit: func(in *Input) {
		restartLater(in) // only a database fault can leave a commit uncertain
		file(in, "pub-0").Published[5].Uncertain = true
		d := file(in, "disp-1")
		d.Handled = slices.DeleteFunc(d.Handled, func(h record.Handled) bool { return h.EventID == "e5" && h.Handler == "b" })
	}, want: map[string]int64{"uncertainHandled": 1, "lost": 1, "handled": 15}, example: "lost: event e5 handler b"},
	{name: "an uncertain event nobody ran", edit: func(in *Input) {
		restartLater(in) // only a database fault can leave a commit uncertain
		// The last of its key: had it committed, it would be pending, or
		// a later sequence would show its gap.
		file(in, "pub-0").Published[7].Uncertain = true
		d := file(in, "disp-1")
		d.Handled = slices.DeleteFunc(d.Handled, func(h record.Handled) bool { return h.EventID == "e7" })
	}, valid: true, want: map[string]int64{"uncertain": 1, "expected": 14, "handled": 14}},
	{name: "a failed handle of an unknown event", edit: func(in *Input) {
		f := file(in, "disp-0")
		f.Handled = append(f.Handled, record.Handled{EventID: "ghost", Handler: "a", Attempt: 1, HandleNs: 1})
	}, want: map[string]int64{"unexpected": 1, "failures": 1}, example: "ghost"},
	{name: "a handle by the killed process after its kill", edit: func(in *Input) {
		in.Expect.AllowRedelivery = true
		in.Expect.Faults = []Fault{{Kind: FaultKill, Process: "disp-1", StartNs: handleStart + 4*step, EndNs: handleStart + 4*step}}
	}, want: map[string]int64{"unexpected": 4, "handled": 12, "lost": 4}, example: "after the fault plan killed it"},
	{name: "an ok handle by an unknown handler", edit: func(in *Input) {
		f := file(in, "disp-0")
		f.Handled = append(f.Handled, record.Handled{EventID: "e0", Handler: "nobody", Attempt: 1, HandleNs: 1, OK: true})
	}, want: map[string]int64{"unexpected": 1}},
	{name: "a truncated record file of a live process", edit: func(in *Input) { file(in, "disp-0").TruncatedTail = true },
		want: map[string]int64{"truncated": 1}, example: "disp-0"},
	{name: "a truncated record file of the killed process", edit: func(in *Input) {
		killAt(in, "disp-0", handleStart+100*step) // after its last handle
		file(in, "disp-0").TruncatedTail = true
	}, valid: true},
	{name: "left pending", edit: func(in *Input) { in.Final.Pending, in.Final.Processing = 2, 1 },
		want: map[string]int64{"pending": 2, "processing": 1}},
	{name: "the store lists fewer dead than it counts", edit: func(in *Input) { in.Final.Dead = 2 },
		want: map[string]int64{"deadUnexpected": 2}},
	{name: "truncated dead letters", edit: func(in *Input) { in.Final.DeadLettersTruncated = true },
		want: map[string]int64{"unverified": 1}},
	{name: "no sequences, handled out of key order", edit: func(in *Input) { noKeyOrder(in) },
		want: map[string]int64{"order": 16}, example: "has sequence 0, want > 0"},
	{name: "a no-key-order side: no sequences, handled out of key order", edit: func(in *Input) {
		noKeyOrder(in)
		in.Expect.NoKeyOrder = true
	}, valid: true, want: map[string]int64{"keyOrderSkipped": 16}, example: "per-key order not checked for 16 keyed handles"},
	{name: "a no-key-order side: every other check still applies", edit: func(in *Input) {
		noKeyOrder(in)
		in.Expect.NoKeyOrder = true
		d := file(in, "disp-1")
		d.Handled = d.Handled[:len(d.Handled)-1]                        // e7/b lost
		d.Handled = append(d.Handled, *handled(in, "e1", "a"))          // a duplicate
		handled(in, "e2", "b").Key = "k9"                               // a key mismatch
		in.Final.Pending = 1                                            // left over
		file(in, "disp-0").Handled[0].HandleNs = handleStart + 100*step // out of order: not checked
		file(in, "disp-0").Handled[0].EndNs = handleStart + 100*step
	}, want: map[string]int64{"attempts": 1, "lost": 1, "handled": 15, "duplicates": 1, "keyMismatches": 1, "pending": 1, "keyOrderSkipped": 16, "tokenConflicts": 1}},
	// Issue 24: the window manifest's processes against the record files.
	{name: "processes: every record file is a listed process's, with its counters", edit: listProcesses, valid: true},
	{name: "processes: none listed, noted", edit: func(*Input) {}, valid: true, example: "records not checked against the processes"},
	{name: "processes: a listed process's record file is missing", edit: func(in *Input) {
		listProcesses(in)
		in.Processes = append(in.Processes, Process{Name: "disp-2", Role: protocol.RoleDispatcher, Record: "disp-2.rec", End: EndDone,
			Counters: &protocol.Counters{Handled: 4}})
	}, want: map[string]int64{"filesMissing": 1}, example: "record file missing: disp-2 (role dispatcher, ended done) wrote disp-2.rec"},
	{name: "processes: a process that names no record file", edit: func(in *Input) {
		listProcesses(in)
		proc(in, "disp-1").Record = ""
	}, want: map[string]int64{"filesMissing": 1, "filesUnlisted": 1}, example: "disp-1 (role dispatcher) names no record file"},
	{name: "processes: a record file of no listed process", edit: func(in *Input) {
		listProcesses(in)
		in.Processes = in.Processes[:2]
	}, want: map[string]int64{"filesUnlisted": 1}, example: "record file of no process: disp-1.rec"},
	{name: "processes: a lost handle line", edit: func(in *Input) {
		listProcesses(in)
		d := file(in, "disp-1")
		d.Handled = d.Handled[:len(d.Handled)-1] // e7/b: counted, not in the file
	}, want: map[string]int64{"lost": 1, "handled": 15, "counterMismatches": 1},
		example: "counters: disp-1 ended with its done line reporting 8 ok and 0 failed handles, 0 certain and 0 uncertain commits; its record file holds 7, 0, 0 and 0"},
	{name: "processes: a lost commit line of a handled event", edit: func(in *Input) {
		listProcesses(in)
		p := file(in, "pub-0")
		p.Published = p.Published[1:] // e0: committed and counted, its line lost
	}, want: map[string]int64{"counterMismatches": 1, "published": 7, "expected": 14, "handled": 14, "unexpected": 2, "sequenceGaps": 1},
		example: "counters: pub-0 ended with its done line reporting 0 ok and 0 failed handles, 8 certain and 0 uncertain commits; its record file holds 0, 0, 7 and 0"},
	{name: "processes: counters that disagree with the records", edit: func(in *Input) {
		listProcesses(in)
		proc(in, "disp-0").Counters.HandlerFailed = 2
	}, want: map[string]int64{"counterMismatches": 1}, example: "reporting 8 ok and 2 failed handles"},
	{name: "processes: a killed process's counters may run ahead of its records, not its completions", edit: func(in *Input) {
		killAt(in, "disp-0", handleStart+4*step)
		listProcesses(in)
		// Its last counters line counted handles whose records were
		// still in its buffer when it was killed.
		proc(in, "disp-0").Counters.Handled += 3
	}, valid: true},
	{name: "processes: a killed process's completions beyond its records", edit: func(in *Input) {
		killAt(in, "disp-0", handleStart+4*step)
		listProcesses(in)
		proc(in, "disp-0").Counters.Completed++
	}, want: map[string]int64{"counterMismatches": 1}, example: "counters: disp-0 (ended killed) last reported 7 completions"},
	{name: "processes: listed as killed with no kill in the plan", edit: func(in *Input) {
		listProcesses(in)
		proc(in, "disp-0").End = EndKilled
	}, want: map[string]int64{"processList": 1}, example: "disp-0 is listed as killed, but the fault plan killed no such process"},
	{name: "processes: the plan's kill listed as a clean exit", edit: func(in *Input) {
		killAt(in, "disp-0", handleStart+4*step)
		listProcesses(in)
		proc(in, "disp-0").End = EndDone
	}, want: map[string]int64{"processList": 1}, example: "the fault plan killed disp-0, but the list says it ended done"},
	{name: "processes: the plan killed a process the list does not name", edit: func(in *Input) {
		listProcesses(in)
		in.Expect.AllowRedelivery = true
		in.Expect.Faults = []Fault{{Kind: FaultKill, Process: "disp-7", StartNs: 1, EndNs: 1}}
	}, want: map[string]int64{"processList": 1}, example: "the fault plan killed disp-7, which the list does not name"},
	{name: "processes: a failed process outside a database fault", edit: func(in *Input) {
		listProcesses(in)
		proc(in, "disp-1").End, proc(in, "disp-1").Error = EndFailed, "exit status 1"
	}, want: map[string]int64{"processList": 1}, example: "disp-1 failed (exit status 1) in a cell without a database restart or crash"},
	{name: "processes: a process failed in a crash: its counters are a lower bound", edit: func(in *Input) {
		crashAt(in, handleStart+100*step)
		listProcesses(in)
		p := proc(in, "disp-1")
		p.End, p.Counters.Handled = EndFailed, 2
	}, valid: true},
	{name: "processes: listed twice", edit: func(in *Input) {
		listProcesses(in)
		in.Processes = append(in.Processes, in.Processes[1])
	}, want: map[string]int64{"processList": 1}, example: "disp-0 is listed twice"},
	{name: "processes: fewer publish errors than the publishers counted", edit: func(in *Input) {
		listProcesses(in)
		proc(in, "pub-0").Counters.PublishErrors = 2
	}, want: map[string]int64{"counterMismatches": 1}, example: "the window counts 0 failed publish calls, its publishers reported 2"},
	{name: "an attempt past the budget", edit: func(in *Input) {
		in.Expect.MaxAttempts = 3
		handled(in, "e1", "a").Attempt = 4
	}, want: map[string]int64{"attempts": 1, "overBudget": 1}, example: "attempt 4, the budget is 3"},
}

func TestMutations(t *testing.T) {
	t.Parallel()
	for _, tc := range mutations {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			in := cleanRun(8, 2, "a", "b")
			if tc.build != nil {
				in = tc.build()
			}
			tc.edit(in)
			r := Validate(in)
			want := map[string]int64{"published": 8, "expected": 16, "handled": 16}
			for k, v := range tc.want {
				want[k] = v
			}
			got := counts(r)
			for k, v := range got {
				if v != want[k] {
					t.Errorf("%s = %d, want %d", k, v, want[k])
				}
			}
			if r.Valid != tc.valid {
				t.Errorf("valid = %v, want %v", r.Valid, tc.valid)
			}
			if r.Valid != strings.HasPrefix(r.String(), "VALID") {
				t.Errorf("Valid %v but String %q", r.Valid, r)
			}
			if !r.Valid && len(r.Examples) == 0 {
				t.Error("INVALID without an example")
			}
			text := strings.Join(append(slices.Clone(r.Examples), r.Notes...), "\n")
			if tc.example != "" && !strings.Contains(text, tc.example) {
				t.Errorf("no example or note contains %q:\n%s", tc.example, text)
			}
			if t.Failed() {
				t.Logf("%s\n%s", r, text)
			}
		})
	}
}

func TestPoison(t *testing.T) {
	t.Parallel()
	base := func() *Input {
		in := cleanRun(4, 0, "a", "b")
		in.Expect.PoisonEventIDs = map[string]bool{"e1": true, "e3": true}
		in.Expect.MaxAttempts = 2
		// Poison events fail every attempt until they are dead.
		for fi := range in.Files {
			f := &in.Files[fi]
			for i := range f.Handled {
				if h := &f.Handled[i]; in.Expect.PoisonEventIDs[h.EventID] {
					h.OK = false
					again := *h
					again.Attempt, again.HandleNs = 2, h.HandleNs+1
					rerun(f, again)
				}
			}
		}
		in.Final.DeadLetters = []DeadLetter{{EventID: "e1", Handler: "a", Attempts: 2}, {EventID: "e1", Handler: "b", Attempts: 2}, {EventID: "e3", Handler: "a", Attempts: 2}, {EventID: "e3", Handler: "b", Attempts: 2}, {EventID: "e3", Handler: "b", Attempts: 2}}
		in.Final.Dead = 4
		return in
	}
	for _, tc := range []struct {
		name  string
		edit  func(*Input)
		valid bool
		want  map[string]int64
	}{
		{"planted and dead", func(*Input) {}, true, nil},
		{"poison handled", func(in *Input) {
			f := file(in, "disp-1")
			rerun(f, record.Handled{EventID: "e1", Handler: "a", Attempt: 2, HandleNs: 9e9, OK: true})
		}, false, map[string]int64{"poisonHandled": 1}},
		{"poison vanished", func(in *Input) {
			in.Final.DeadLetters = in.Final.DeadLetters[:3] // e3/b neither dead nor handled
			in.Final.Dead = 3
		}, false, map[string]int64{"lostPoison": 1, "deadExpected": 3}},
		{"dead unexpected", func(in *Input) {
			in.Final.DeadLetters = append(in.Final.DeadLetters, DeadLetter{EventID: "e0", Handler: "a", Attempts: 2}, DeadLetter{EventID: "ghost", Handler: "a", Attempts: 2})
			in.Final.Dead = 6
		}, false, map[string]int64{"deadUnexpected": 2, "deadMismatch": 1}},
		{"dead and not handled counts once", func(in *Input) {
			d := file(in, "disp-0")
			d.Handled = slices.DeleteFunc(d.Handled, func(h record.Handled) bool { return h.EventID == "e0" && h.Handler == "a" })
			in.Final.DeadLetters = append(in.Final.DeadLetters, DeadLetter{EventID: "e0", Handler: "a", Attempts: 2})
			in.Final.Dead = 5
		}, false, map[string]int64{"deadUnexpected": 1, "handled": 3, "deadMismatch": 1}},
		{"a side that ignores the budget", func(in *Input) {
			// e3/a failed a third time and was buried with 3 attempts.
			f := file(in, "disp-1")
			rerun(f, record.Handled{EventID: "e3", Handler: "a", Attempt: 3, HandleNs: 9e9})
			in.Final.DeadLetters[2].Attempts = 3
		}, false, map[string]int64{"overBudget": 3, "failures": 9}},
		{"buried before the budget was spent", func(in *Input) { in.Final.DeadLetters[0].Attempts = 1 },
			false, map[string]int64{"overBudget": 1, "deadMismatch": 1}},
		// Issue 24, class 7: dead letters against the records.
		{"class 7: a dead letter counts attempts that never failed on record", func(in *Input) {
			d := file(in, "disp-1")
			d.Handled = slices.DeleteFunc(d.Handled, func(h record.Handled) bool { return h.EventID == "e1" && h.Handler == "b" && h.Attempt == 2 })
		}, false, map[string]int64{"deadMismatch": 1, "failures": 7}},
		{"class 7: a kill does not explain a missing attempt after it", func(in *Input) {
			// e3/a's attempts 1 and 3 were recorded after the kill, by
			// live processes, so its missing attempt 2 (dead with 3) was
			// not the killed process's.
			lostThenRunAgain(in)
			in.Expect.AllowRedelivery = true
			in.Expect.Faults = []Fault{{Kind: FaultKill, Process: "disp-9", StartNs: 1, EndNs: 1}}
		}, false, map[string]int64{"deadMismatch": 1}},
		{"class 7: a kill can cost an unrecorded attempt", func(in *Input) {
			d := file(in, "disp-1")
			d.Handled = slices.DeleteFunc(d.Handled, func(h record.Handled) bool { return h.EventID == "e1" && h.Handler == "b" && h.Attempt == 2 })
			in.Expect.AllowRedelivery = true
			in.Expect.Faults = []Fault{{Kind: FaultKill, Process: "disp-1", StartNs: 9e9, EndNs: 9e9}}
		}, true, map[string]int64{"failures": 7}},
		{"class 7: the store counts fewer dead than it lists", func(in *Input) { in.Final.Dead = 0 },
			false, map[string]int64{"deadMismatch": 1}},
		// A lane-lease takeover charges an attempt lost to a fault and
		// gives a delivery that was not a suspect one more run, alone.
		{"a fault cost an attempt: one more run is allowed", func(in *Input) {
			lostThenRunAgain(in)
			in.Expect.AllowRedelivery = true
			// disp-9 ran e3/a's second attempt and was killed before it
			// wrote the record.
			in.Expect.Faults = []Fault{{Kind: FaultKill, Process: "disp-9", StartNs: handleStart + 3*step, EndNs: handleStart + 3*step}}
		}, true, map[string]int64{"failures": 8}},
		{"no fault: the same extra run is over budget", func(in *Input) {
			lostThenRunAgain(in)
		}, false, map[string]int64{"overBudget": 2, "failures": 8, "attempts": 1, "deadMismatch": 1}},
		{"a fault cost an attempt: two more runs are over budget", func(in *Input) {
			lostThenRunAgain(in)
			in.Expect.AllowRedelivery = true
			// disp-9 ran e3/a's second attempt and was killed before it
			// wrote the record.
			in.Expect.Faults = []Fault{{Kind: FaultKill, Process: "disp-9", StartNs: handleStart + 3*step, EndNs: handleStart + 3*step}}
			f := file(in, "disp-1")
			rerun(f, record.Handled{EventID: "e3", Handler: "a", Attempt: 4, HandleNs: 9.5e9})
			in.Final.DeadLetters[2].Attempts = 4
		}, false, map[string]int64{"overBudget": 2, "failures": 9}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			in := base()
			tc.edit(in)
			r := Validate(in)
			want := map[string]int64{"published": 4, "expected": 4, "handled": 4, "deadExpected": 4, "failures": 8}
			for k, v := range tc.want {
				want[k] = v
			}
			for k, v := range counts(r) {
				if v != want[k] {
					t.Errorf("%s = %d, want %d", k, v, want[k])
				}
			}
			if r.Valid != tc.valid {
				t.Errorf("valid %v, want %v: %s %q", r.Valid, tc.valid, r, r.Examples)
			}
		})
	}
}

func TestExamplesBounded(t *testing.T) {
	t.Parallel()
	in := cleanRun(50, 0, "a")
	for i := range in.Files {
		in.Files[i].Handled = nil
	}
	r := Validate(in)
	if r.Lost != 50 || len(r.Examples) != MaxExamples {
		t.Fatalf("lost %d, %d examples, want 50 and %d", r.Lost, len(r.Examples), MaxExamples)
	}
	if r.Examples[0] != "lost: event e0 handler a was published but never handled ok" {
		t.Fatalf("examples not in publish order: %q", r.Examples[0])
	}
}

func TestInputNotModified(t *testing.T) {
	t.Parallel()
	in := cleanRun(20, 3, "a")
	d := file(in, "disp-0")
	d.Handled[0], d.Handled[5] = d.Handled[5], d.Handled[0]
	before := fmt.Sprint(in.Files)
	Validate(in)
	if fmt.Sprint(in.Files) != before {
		t.Fatal("Validate changed its input")
	}
}

func TestStringNamesEveryViolation(t *testing.T) {
	t.Parallel()
	r := &Result{Lost: 2, Empty: true, Published: 0}
	if got := r.String(); got != "INVALID: nothing published, lost 2 (published 0, expected 0, handled 0)" {
		t.Fatalf("String = %q", got)
	}
	r = &Result{Valid: true, Published: 3, Expected: 3, HandledOK: 3, Redeliveries: 1}
	if got := r.String(); got != "VALID (published 3, expected 3, handled 3, redeliveries 1)" {
		t.Fatalf("String = %q", got)
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

// lostThenRunAgain rewrites e3/a of TestPoison's run as a lane-lease store
// runs a poison delivery whose second (last) attempt was lost to a killed
// process without a record: handled at attempts 1 and 3, dead with 3.
func lostThenRunAgain(in *Input) {
	for fi := range in.Files {
		f := &in.Files[fi]
		for i := range f.Handled {
			if h := &f.Handled[i]; h.EventID == "e3" && h.Handler == "a" && h.Attempt == 2 {
				h.Attempt = 3
			}
		}
	}
	in.Final.DeadLetters[2].Attempts = 3
}
