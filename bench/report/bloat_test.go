package report

import (
	"bytes"
	"strings"
	"testing"

	"github.com/berkcansavur/relaybus/bench/result"
	"github.com/berkcansavur/relaybus/bench/validate"
)

// bloatSample is a VALID window with a table sample at its start and
// end and two steps.
func bloatSample(side string, rate, p99, deadEnd float64, heldXmin bool) *result.Sample {
	p := p99
	b := &result.Bloat{StepMs: 5000, HoldXmin: heldXmin, HoldXminAgeEnd: 4000,
		Steps: []result.Step{{EndMs: 5000, DeliveriesPerS: rate, E2EP99Ms: &p}, {EndMs: 10000, DeliveriesPerS: rate, E2EP99Ms: &p}},
		Tables: []result.TablePoint{
			{AtMs: -3, Tables: map[string]result.TableSize{"relaybus_deliveries": {HeapBytes: 1 << 20, IndexBytes: 1 << 19, Dead: 10}}},
			{AtMs: 10002, Tables: map[string]result.TableSize{"relaybus_deliveries": {HeapBytes: 3 << 20, IndexBytes: 1 << 20, Dead: int64(deadEnd)}}},
		}}
	if heldXmin {
		b.Hold = "repeatable-read"
	}
	m := map[string]float64{result.MetricDeliveriesPerS: rate, result.MetricE2EP99Ms: p99}
	for k, v := range b.Metrics() {
		m[k] = v
	}
	return &result.Sample{Side: side, Metrics: m, Bloat: b, Validation: &validate.Result{Valid: true},
		Tables: map[string]string{result.TableRoleDeliveries: "relaybus_deliveries"}}
}

func bloatRun() *result.Run {
	group := "1000/s, tuned dispatchers"
	none := &result.Cell{Scenario: "held-snapshot", Store: "postgres", Name: group + ", no snapshot held",
		Config: map[string]any{"hold_group": group}}
	held := &result.Cell{Scenario: "held-snapshot", Store: "postgres", Name: group + ", REPEATABLE READ snapshot held",
		Config: map[string]any{"hold_group": group, "hold": "repeatable-read"}}
	for _, side := range []string{result.SideBase, result.SideCandidate} {
		none.Samples = append(none.Samples, bloatSample(side, 1000, 20, 100, false), bloatSample(side, 1000, 20, 100, false))
	}
	held.Samples = append(held.Samples,
		bloatSample(result.SideBase, 500, 80, 60000, true), bloatSample(result.SideBase, 500, 80, 60000, true),
		bloatSample(result.SideCandidate, 950, 30, 1000, true), bloatSample(result.SideCandidate, 950, 30, 1000, true))
	// An INVALID window is left out of the medians.
	bad := bloatSample(result.SideCandidate, 1, 1, 1, true)
	bad.Error = "boom"
	held.Samples = append(held.Samples, bad)
	other := &result.Cell{Scenario: "dispatch", Store: "postgres", Name: "2 inst", Samples: []*result.Sample{{Side: result.SideBase}}}
	return &result.Run{Base: result.RefInfo{Ref: "v0.2.2"}, Candidate: result.RefInfo{Ref: "HEAD"}, Cells: []*result.Cell{other, none, held}}
}

// TestWriteBloat: each side's held cell against its own cell without a
// hold (medians of VALID windows), and the tables at start and end.
func TestWriteBloat(t *testing.T) {
	var b bytes.Buffer
	writeBloat(&b, bloatRun(), []string{"x-overtime-rate.svg"})
	out := b.String()
	for _, want := range []string{
		"## Held snapshot and soak",
		"| 1000/s, tuned dispatchers | repeatable-read | base (v0.2.2) | 2/2 | 0.50x (500 / 1000) | 4.00x (80 / 20) | 600.00x (60000 / 100) | 1.00x (2.50 MiB / 2.50 MiB) |",
		"| 1000/s, tuned dispatchers | repeatable-read | candidate (HEAD) | 2/2 | 0.95x (950 / 1000) | 1.50x (30 / 20) | 10.00x (1000 / 100) | 1.00x (2.50 MiB / 2.50 MiB) |",
		"| base (v0.2.2) | relaybus_deliveries | 1.00 MiB → 3.00 MiB | 0.50 MiB → 1.00 MiB | 0 → 0 | 10 → 60000 | 0 → 0 |",
		"- candidate (HEAD): 2 VALID window(s), deliveries/s 950, deliveries/s last minute / first minute 1.00, e2e p99 last minute / first minute 1.00, the held xmin 4000 transactions old at the end",
		"![x-overtime-rate.svg](x-overtime-rate.svg)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}
	if strings.Contains(out, "2 inst") {
		t.Error("a cell without bloat data is in the section")
	}
	var empty bytes.Buffer
	writeBloat(&empty, &result.Run{Cells: []*result.Cell{{Name: "x"}}}, nil)
	if empty.Len() != 0 {
		t.Errorf("a run without bloat cells wrote %q", empty.String())
	}
}

// TestBloatFiles: four plots per hold group and per bloat cell, each an
// SVG; none for a run without bloat cells.
func TestBloatFiles(t *testing.T) {
	files := map[string][]byte{}
	names, err := bloatFiles(bloatRun(), files)
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != 4*3 || len(files) != len(names) {
		t.Fatalf("%d plots (%v), want 4 for the group and 4 for each of 2 cells", len(names), names)
	}
	if !strings.HasPrefix(names[0], "hold00-") || !strings.HasSuffix(names[len(names)-1], "-overtime-dead.svg") {
		t.Errorf("names %v", names)
	}
	for n, data := range files {
		if !bytes.Contains(data, []byte("<svg")) {
			t.Errorf("%s is not an SVG", n)
		}
	}
	if names, _ := bloatFiles(&result.Run{Cells: []*result.Cell{{Name: "x"}}}, map[string][]byte{}); len(names) != 0 {
		t.Errorf("plots %v for a run without bloat cells", names)
	}
}
