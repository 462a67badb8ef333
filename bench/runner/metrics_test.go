package runner

import (
	"math"
	"testing"
	"time"

	"github.com/berkcansavur/relaybus/bench/protocol"
	"github.com/berkcansavur/relaybus/bench/record"
	"github.com/berkcansavur/relaybus/bench/result"
	"github.com/berkcansavur/relaybus/bench/scenarios"
	"github.com/berkcansavur/relaybus/bench/validate"
)

const sec = int64(time.Second)

// TestWindowMetricsCountsOnlyInsideTheWindow: commits and handles before
// t0 or at/after t1 are not the window's.
func TestWindowMetricsCountsOnlyInsideTheWindow(t *testing.T) {
	t.Parallel()
	win := span{10 * sec, 12 * sec}
	files := []validate.File{{Name: "pub-0"}, {Name: "disp-0"}}
	for i, ns := range []int64{9 * sec, 10 * sec, 11 * sec, 12*sec - 1, 12 * sec} {
		id := string(rune('a' + i))
		files[0].Published = append(files[0].Published, record.Published{EventID: id, CommitNs: ns})
		files[1].Handled = append(files[1].Handled, record.Handled{EventID: id, Handler: "a", OK: true, HandleNs: ns + int64(time.Millisecond)})
	}
	// A failed handle is not a delivery.
	files[1].Handled = append(files[1].Handled, record.Handled{EventID: "b", Handler: "a", OK: false, HandleNs: 11 * sec})
	c := &scenarios.Cell{Workload: protocol.Workload{Handlers: []string{"a"}}, PublisherProcs: 1, DispatcherProcs: 1}
	r := windowMetrics(files, win, c, nil, 7)
	// Handles at 10s+1ms, 11s+1ms in; 12s-1ns+1ms and 12s+1ms out.
	if got := r.metrics[result.MetricDeliveriesPerS]; got != 1 {
		t.Errorf("deliveries/s = %v, want 2 / 2 s = 1", got)
	}
	// Commits at 10s, 11s, 12s-1ns in.
	if got := r.metrics[result.MetricEventsPerS]; got != 1.5 {
		t.Errorf("events/s = %v, want 3 / 2 s", got)
	}
	if len(r.series) != 2 || r.series[0] != 1 || r.series[1] != 1 {
		t.Errorf("series %v, want [1 1]", r.series)
	}
	// Latency: 1 ms for each of the three events committed in the window.
	if got := r.metrics[result.MetricE2EP50Ms]; math.Abs(got-1) > 1e-9 {
		t.Errorf("e2e p50 = %v", got)
	}
	if r.metrics[result.MetricBacklogMax] != 7 || r.units != 2 {
		t.Errorf("backlog %v units %v", r.metrics[result.MetricBacklogMax], r.units)
	}
}
