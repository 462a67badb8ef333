package runner

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/berkcansavur/relaybus/bench/protocol"
	"github.com/berkcansavur/relaybus/bench/record"
	"github.com/berkcansavur/relaybus/bench/result"
	"github.com/berkcansavur/relaybus/bench/scenarios"
	"github.com/berkcansavur/relaybus/bench/validate"
)

const (
	sec = int64(time.Second)
	ms  = int64(time.Millisecond)
)

func mixedCell() *scenarios.Cell {
	return &scenarios.Cell{Workload: protocol.Workload{Handlers: []string{"a"}}, PublisherProcs: 1, DispatcherProcs: 1}
}

// TestWindowMetricsCountsOnlyInsideTheWindow: commits and handles before
// t0 or at/after t1 are not the window's.
func TestWindowMetricsCountsOnlyInsideTheWindow(t *testing.T) {
	t.Parallel()
	win := span{10 * sec, 12 * sec}
	in := &validate.Input{Handlers: []string{"a"}, Files: []validate.File{{Name: "pub-0"}, {Name: "disp-0"}}}
	for i, ns := range []int64{9 * sec, 10 * sec, 11 * sec, 12*sec - 1, 12 * sec} {
		id := string(rune('a' + i))
		in.Files[0].Published = append(in.Files[0].Published, record.Published{EventID: id, CallStartNs: ns - 2*ms, CommitNs: ns})
		in.Files[1].Handled = append(in.Files[1].Handled, record.Handled{EventID: id, Handler: "a", OK: true, HandleNs: ns + ms})
	}
	// A failed handle is not a delivery.
	in.Files[1].Handled = append(in.Files[1].Handled, record.Handled{EventID: "b", Handler: "a", OK: false, HandleNs: 11 * sec})
	r := windowMetrics(in, win, mixedCell())
	// Handles at 10s+1ms, 11s+1ms in; 12s-1ns+1ms and 12s+1ms out.
	if got := r.metrics[result.MetricDeliveriesPerS]; got != 1 {
		t.Errorf("deliveries/s = %v, want 2 / 2 s = 1", got)
	}
	// Commits at 10s, 11s, 12s-1ns in.
	if got := r.metrics[result.MetricEventsPerS]; got != 1.5 {
		t.Errorf("events/s = %v, want 3 / 2 s", got)
	}
	// 250 ms buckets as rates per second: one handle in the first
	// bucket of each second (4/s there), none in the others.
	// The server metrics' divisor: the deliveries published inside the
	// window (3 events, one handler), not the 2 handled.
	if !slices.Equal(r.series, []float64{4, 0, 0, 0, 4, 0, 0, 0}) || r.units != 3 {
		t.Errorf("series %v units %v, want [4 0 0 0 4 0 0 0] and 3", r.series, r.units)
	}
	// A window that is not a whole number of buckets: the last bucket
	// takes the rest, and its rate is over its own length.
	r = windowMetrics(in, span{10 * sec, 11*sec + 100*ms}, mixedCell())
	if len(r.series) != 4 || math.Abs(r.series[3]-1/0.35) > 1e-9 || r.series[0] != 4 {
		t.Errorf("series %v: want 4 buckets, the last of 350 ms holding the handle at 11 s (%.3f/s)", r.series, 1/0.35)
	}
	// Publish latency: three calls of 2 ms each.
	if got := r.metrics[result.MetricPublishP99Ms]; math.Abs(got-2) > 1e-9 {
		t.Errorf("publish p99 = %v, want 2", got)
	}
	// Latency: 1 ms for the two events handled inside the window; the one
	// committed 1 ns before its end counts its age then (1 ns), not its
	// handle after the window.
	if got := r.metrics[result.MetricE2EP50Ms]; math.Abs(got-1) > 1e-9 {
		t.Errorf("e2e p50 = %v, want 1", got)
	}
	if got := r.metrics[result.MetricE2EP99Ms]; got > 1 {
		t.Errorf("e2e p99 = %v, want at most 1 ms", got)
	}
}

// TestWindowMetricsUnitsOfABurstyDispatcher: in a cell that publishes
// while it dispatches, a dispatcher that completes a second's backlog at
// once inside the window has its server metrics divided by what was
// published in the window (the same for both sides), not by the burst it
// completed; in a drain, by what it handled.
func TestWindowMetricsUnitsOfABurstyDispatcher(t *testing.T) {
	t.Parallel()
	win := span{10 * sec, 12 * sec}
	in := &validate.Input{Handlers: []string{"a", "b"}, Files: []validate.File{{Name: "pub-0"}, {Name: "disp-0"}}}
	// 4 events committed inside the window; 10 events of the second
	// before it completed at its start, with the window's own.
	for i := range 14 {
		id := string(rune('a' + i))
		commit := 9*sec + int64(i)*100*ms
		if i >= 10 {
			commit = 10*sec + int64(i-10)*400*ms
		}
		in.Files[0].Published = append(in.Files[0].Published, record.Published{EventID: id, CallStartNs: commit - ms, CommitNs: commit})
		for _, h := range in.Handlers {
			in.Files[1].Handled = append(in.Files[1].Handled, record.Handled{EventID: id, Handler: h, OK: true, HandleNs: 11 * sec})
		}
	}
	r := windowMetrics(in, win, mixedCell())
	if got := r.metrics[result.MetricDeliveriesPerS]; got != 14 {
		t.Errorf("deliveries/s = %v, want 28 handled / 2 s", got)
	}
	if r.units != 8 {
		t.Errorf("units %v, want 8: 4 events published in the window, 2 handlers each", r.units)
	}
	drain := &scenarios.Cell{Workload: protocol.Workload{Handlers: []string{"a", "b"}}, DispatcherProcs: 1, Preload: 14}
	if r := windowMetrics(in, win, drain); r.units != 28 {
		t.Errorf("a drain's units %v, want the 28 handled", r.units)
	}
}

// TestWindowMetricsCensorsAtTheWindowEnd: a side that falls behind shows
// the age of its backlog, however fast the drain handles it later.
func TestWindowMetricsCensorsAtTheWindowEnd(t *testing.T) {
	t.Parallel()
	win := span{0, 10 * sec}
	in := &validate.Input{Handlers: []string{"a"}, Files: []validate.File{{Name: "pub-0"}, {Name: "drain-0"}}}
	for i := range 10 {
		id := string(rune('a' + i))
		in.Files[0].Published = append(in.Files[0].Published, record.Published{EventID: id, CallStartNs: int64(i) * sec, CommitNs: int64(i)*sec + ms})
		// Handled by the drain, a millisecond after the window.
		in.Files[1].Handled = append(in.Files[1].Handled, record.Handled{EventID: id, Handler: "a", OK: true, HandleNs: 10*sec + ms})
	}
	r := windowMetrics(in, win, mixedCell())
	// Ages at the end: 10 s - (i s + 1 ms), i = 0..9: 999 to 9,999 ms,
	// median (4,999 + 5,999) / 2.
	if got := r.metrics[result.MetricE2EP50Ms]; math.Abs(got-5499) > 1e-6 {
		t.Errorf("e2e p50 = %v ms, want 5499", got)
	}
	// Nothing was handled inside the window: the backlog grew to 10.
	if got := r.metrics[result.MetricBacklogMax]; got != 10 {
		t.Errorf("backlog max = %v, want 10", got)
	}
	if r.metrics[result.MetricDeliveriesPerS] != 0 {
		t.Errorf("the drain's handles counted: %v", r.metrics)
	}
}

func TestBacklogMax(t *testing.T) {
	t.Parallel()
	win := span{10, 100}
	commit := map[string]int64{"pre": 5, "e1": 20, "e2": 30, "e3": 40, "late": 200, "p": 25}
	first := map[pair]int64{{"pre", "a"}: 15, {"e1", "a"}: 35, {"e2", "a"}: 36, {"unknown", "a"}: 12}
	lastPoison := map[pair]int64{{"p", "a"}: 50}
	// At 10: "pre" waits (1). 15: 0. 20: 1. 25: 2. 30: 3 (the most). 35,
	// 36: 1. 40: 2. 50: 1.
	if got := backlogMax(commit, first, lastPoison, 1, win); got != 3 {
		t.Fatalf("backlog max = %v, want 3", got)
	}
	// Two handlers: every commit adds two deliveries.
	if got := backlogMax(map[string]int64{"e": 20}, nil, nil, 2, win); got != 2 {
		t.Fatalf("backlog max = %v, want 2", got)
	}
}

func TestWindowMetricsRanOut(t *testing.T) {
	t.Parallel()
	c := &scenarios.Cell{Workload: protocol.Workload{Handlers: []string{"a"}}, Preload: 2, DispatcherProcs: 1}
	in := &validate.Input{Handlers: []string{"a"}, Files: []validate.File{
		{Name: "preload", Published: []record.Published{{EventID: "x", CommitNs: 1}, {EventID: "y", CommitNs: 2}}},
		{Name: "disp-0", Handled: []record.Handled{{EventID: "x", Handler: "a", OK: true, HandleNs: 20}}},
	}}
	if r := windowMetrics(in, span{10, 100}, c); r.ranOut {
		t.Fatal("y is still waiting at the window's end")
	}
	in.Files[1].Handled = append(in.Files[1].Handled, record.Handled{EventID: "y", Handler: "a", OK: true, HandleNs: 99})
	if r := windowMetrics(in, span{10, 100}, c); !r.ranOut {
		t.Fatal("everything was handled inside the window: it ran out")
	}
}

// TestWindowMetricsOldPublisher: records without call starts (a v0.1.0
// worker) give no publish latency rather than a made-up one.
func TestWindowMetricsOldPublisher(t *testing.T) {
	t.Parallel()
	in := &validate.Input{Handlers: []string{"a"}, Files: []validate.File{
		{Name: "pub-0", Published: []record.Published{{EventID: "x", CommitNs: 20}}}}}
	r := windowMetrics(in, span{10, 100}, &scenarios.Cell{Workload: protocol.Workload{Handlers: []string{"a"}}, PublisherProcs: 1})
	if _, ok := r.metrics[result.MetricPublishP50Ms]; ok || !r.noCallStarts {
		t.Fatalf("metrics %v, noCallStarts %v", r.metrics, r.noCallStarts)
	}
}
