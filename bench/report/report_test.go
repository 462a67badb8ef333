package report

import (
	"bytes"
	"flag"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berkcansavur/relaybus/bench/validate"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

var validResult = &validate.Result{Valid: true, Published: 1000, Expected: 1000, HandledOK: 1000}

// fixedRun is a small run with every case the renderer handles: a clear
// improvement, a clear regression, no difference, too few samples, an
// invalid sample, ignored options, series and latencies.
func fixedRun() *Run {
	start := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	run := &Run{
		Schema: SchemaVersion, Mode: ModeQuick,
		Base:      RefInfo{Ref: "v0.1.0", SHA: "e222e0a0000000000000000000000000000000aa", Version: "0.1.0", Protocol: 1},
		Candidate: RefInfo{Ref: "HEAD", SHA: "f00dfeed00000000000000000000000000000bb", Version: "0.2.0", Protocol: 1, Capabilities: []string{"completion_history"}},
		Started:   start, Finished: start.Add(time.Hour),
		Machine:   map[string]string{"goos": "linux", "goarch": "amd64", "cpus": "2"},
		Databases: []DatabaseInfo{{Kind: "postgres", Provider: "local", Version: "17.2", Settings: map[string]string{"fsync": "on"}}},
	}
	dispatch := &Cell{Scenario: "dispatch", Store: "postgres", Name: "1 inst, defaults (conc 10, batch 10, pool 10, poll 1s)"}
	base := []float64{2100, 2150, 2200, 2170, 2130}
	cand := []float64{3400, 3450, 3390, 3500, 3420}
	walB := []float64{2377, 2380, 2370, 2390, 2375}
	walC := []float64{625, 630, 620, 640, 610}
	order := 0
	for round := range 5 {
		for _, side := range []string{SideBase, SideCandidate} {
			s := &Sample{Side: side, Round: round, Order: order, Validation: validResult,
				Series: []float64{1000, 2000, 2100}}
			order++
			if side == SideBase {
				s.Metrics = map[string]float64{MetricDeliveriesPerS: base[round], MetricWALBytesPerDelivery: walB[round], MetricStmtsPerDelivery: 1.21}
				s.Ignored = []string{"completion_window_us"}
			} else {
				s.Metrics = map[string]float64{MetricDeliveriesPerS: cand[round], MetricWALBytesPerDelivery: walC[round], MetricStmtsPerDelivery: 1.21}
			}
			dispatch.Samples = append(dispatch.Samples, s)
		}
	}
	// One invalid candidate window: must be listed, not averaged in.
	dispatch.Samples = append(dispatch.Samples, &Sample{Side: SideCandidate, Round: 5, Order: order,
		Metrics:    map[string]float64{MetricDeliveriesPerS: 1},
		Validation: &validate.Result{Lost: 3, Published: 1000, Expected: 1000, HandledOK: 997, Examples: []string{"lost"}}})
	publish := &Cell{Scenario: "publish", Store: "postgres", Name: "P=1 batch=1 pool=default"}
	pb := []float64{1350, 1340, 1360, 1355}
	pc := []float64{479, 470, 485, 490}
	for round := range 4 {
		publish.Samples = append(publish.Samples,
			&Sample{Side: SideBase, Round: round, Validation: validResult, Metrics: map[string]float64{MetricEventsPerS: pb[round], MetricPublishP99Ms: 0.9}},
			&Sample{Side: SideCandidate, Round: round, Validation: validResult, Metrics: map[string]float64{MetricEventsPerS: pc[round], MetricPublishP99Ms: 4.9}})
	}
	mixed := &Cell{Scenario: "mixed", Store: "postgres", Name: "1000/s, defaults dispatchers"}
	for round := range 2 {
		mixed.Samples = append(mixed.Samples,
			&Sample{Side: SideBase, Round: round, Validation: validResult, Metrics: map[string]float64{MetricAchievedPerS: 1000, MetricE2EP50Ms: 503.6}, Latencies: []float64{1, 2, 3}},
			&Sample{Side: SideCandidate, Round: round, Validation: validResult, Metrics: map[string]float64{MetricAchievedPerS: 1000, MetricE2EP50Ms: 2262.5}, Latencies: []float64{2, 4, 9}})
	}
	run.Cells = []*Cell{dispatch, publish, mixed}
	return run
}

func find(t *testing.T, a *Analysis, scenario, metric string) *Comparison {
	t.Helper()
	for _, c := range a.Comparisons {
		if c.Cell.Scenario == scenario && c.Metric.Name == metric {
			return c
		}
	}
	t.Fatalf("no comparison %s %s", scenario, metric)
	return nil
}

func TestAnalyzeVerdicts(t *testing.T) {
	t.Parallel()
	a := Analyze(fixedRun(), DefaultSettings())
	d := find(t, a, "dispatch", MetricDeliveriesPerS)
	if d.Verdict != VerdictBetter || d.Base.N != 5 || d.Candidate.N != 5 {
		t.Fatalf("deliveries/s: %+v", d)
	}
	if d.Candidate.Median != 3420 || d.Base.Median != 2150 || math.Abs(d.Ratio-3420.0/2150) > 1e-12 {
		t.Fatalf("medians: %+v (the invalid sample must not count)", d)
	}
	if math.Abs(d.P-2.0/252) > 1e-12 || !(d.RatioLow > 1 && d.RatioLow <= d.Ratio && d.Ratio <= d.RatioHigh) {
		t.Fatalf("p %v, CI [%v, %v] ratio %v", d.P, d.RatioLow, d.RatioHigh, d.Ratio)
	}
	// Lower is better for WAL bytes: a 4x drop is better.
	if w := find(t, a, "dispatch", MetricWALBytesPerDelivery); w.Verdict != VerdictBetter {
		t.Fatalf("wal: %+v", w)
	}
	// Identical values: no difference.
	if s := find(t, a, "dispatch", MetricStmtsPerDelivery); s.Verdict != VerdictSame || s.Ratio != 1 || s.P != 1 {
		t.Fatalf("stmts: %+v", s)
	}
	// 4 v 4 separated regression: p = 0.0286 < 0.05, worse.
	if p := find(t, a, "publish", MetricEventsPerS); p.Verdict != VerdictWorse || math.Abs(p.P-2.0/70) > 1e-12 {
		t.Fatalf("publish: %+v", p)
	}
	// 2 v 2: the smallest possible p is 0.333: too few samples.
	if m := find(t, a, "mixed", MetricE2EP50Ms); m.Verdict != VerdictTooFew || !strings.Contains(m.Note, "0.333") {
		t.Fatalf("mixed: %+v", m)
	}
	if len(a.Invalid) != 1 || a.Invalid[0].Sample.Round != 5 || !strings.Contains(a.Invalid[0].Reason, "INVALID: lost 3") {
		t.Fatalf("invalid: %+v", a.Invalid)
	}
}

func TestAnalyzeNoValidSide(t *testing.T) {
	t.Parallel()
	run := fixedRun()
	for _, s := range run.Cells[1].Samples {
		if s.Side == SideCandidate {
			s.Error = "worker crashed"
		}
	}
	a := Analyze(run, DefaultSettings())
	if c := find(t, a, "publish", MetricEventsPerS); c.Verdict != VerdictNoValues {
		t.Fatalf("%+v", c)
	}
	if len(a.Invalid) != 5 {
		t.Fatalf("%d invalid, want 5", len(a.Invalid))
	}
}

func TestAnalyzeZeroBase(t *testing.T) {
	t.Parallel()
	c := &Cell{Scenario: "dispatch", Store: "postgres", Name: "x"}
	for i := range 5 {
		c.Samples = append(c.Samples,
			&Sample{Side: SideBase, Validation: validResult, Metrics: map[string]float64{MetricHOTPctDeliveries: 0}},
			&Sample{Side: SideCandidate, Validation: validResult, Metrics: map[string]float64{MetricHOTPctDeliveries: 90 + float64(i)}})
	}
	a := Analyze(&Run{Schema: 1, Cells: []*Cell{c}}, DefaultSettings())
	cmp := a.Comparisons[0]
	// The ratio is undefined (base 0) but the shift is significant.
	if !math.IsNaN(cmp.Ratio) || cmp.Verdict != VerdictBetter {
		t.Fatalf("%+v", cmp)
	}
}

func TestGate(t *testing.T) {
	t.Parallel()
	a := Analyze(fixedRun(), DefaultSettings())
	rules, err := ParseGateRules("events_per_s:5, deliveries_per_s:5")
	if err != nil {
		t.Fatal(err)
	}
	v := Gate(a, rules)
	// The invalid dispatch window, and publish events/s at 0.35x.
	if len(v) != 2 || v[0].Metric != "validity" || v[1].Metric != MetricEventsPerS {
		t.Fatalf("violations %+v", v)
	}
	if !strings.Contains(v[1].Message, "regressed 64.4% (limit 5%)") {
		t.Fatalf("message %q", v[1].Message)
	}
	// A generous limit passes the regression.
	rules, _ = ParseGateRules("events_per_s:70")
	if v := Gate(a, rules); len(v) != 1 || v[0].Metric != "validity" {
		t.Fatalf("violations %+v", v)
	}
	// An improvement never fails; a metric not measured does.
	rules, _ = ParseGateRules("wal_bytes_per_delivery:0,oplog_bytes_per_delivery:5")
	v = Gate(a, rules)
	if len(v) != 2 || v[1].Metric != MetricOplogBytesPerDelivery || !strings.Contains(v[1].Message, "not measured") {
		t.Fatalf("violations %+v", v)
	}
}

func TestParseGateRules(t *testing.T) {
	t.Parallel()
	rules, err := ParseGateRules("deliveries_per_s:5,wal_bytes_per_delivery:10.5")
	if err != nil || len(rules) != 2 || rules[1] != (GateRule{MetricWALBytesPerDelivery, 10.5}) {
		t.Fatalf("%v %v", rules, err)
	}
	for _, bad := range []string{"", "deliveries_per_s", "nope:5", "deliveries_per_s:x", "deliveries_per_s:-1",
		"deliveries_per_s:NaN", "deliveries_per_s:5,deliveries_per_s:6", "deliveries_per_s:5,"} {
		if _, err := ParseGateRules(bad); err == nil || !strings.HasPrefix(err.Error(), "report: ") {
			t.Errorf("ParseGateRules(%q) = %v, want a report: error", bad, err)
		}
	}
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		actual := filepath.Join("testdata", name+".actual")
		_ = os.WriteFile(actual, got, 0o644)
		t.Fatalf("%s differs from %s (wrote %s; go test -update rewrites goldens)", name, path, actual)
	}
}

func TestGolden(t *testing.T) {
	a := Analyze(fixedRun(), DefaultSettings())
	for _, tc := range []struct {
		name  string
		write func(*bytes.Buffer, *Analysis) error
	}{
		{"terminal", func(b *bytes.Buffer, a *Analysis) error { return WriteTerminal(b, a) }},
		{"markdown", func(b *bytes.Buffer, a *Analysis) error { return WriteMarkdown(b, a) }},
		{"bench", func(b *bytes.Buffer, a *Analysis) error { return WriteBench(b, a) }},
	} {
		var b bytes.Buffer
		if err := tc.write(&b, a); err != nil {
			t.Fatal(err)
		}
		golden(t, tc.name, b.Bytes())
	}
}

func TestWriteResultsAndLoadRun(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	run := fixedRun()
	a := Analyze(run, DefaultSettings())
	if err := WriteResults(dir, a); err != nil {
		t.Fatal(err)
	}
	out := ResultsDir(dir, run)
	if filepath.Base(out) != "2026-11-30-100000-v0.1.0-vs-HEAD" {
		t.Fatalf("dir %s", out)
	}
	for _, f := range []string{"run.json", "report.md", "bench.txt", "00-postgres-dispatch-1-inst-defaults-conc-10-batch-10-pool-10-poll-1s-throughput.svg", "02-postgres-mixed-1000-s-defaults-dispatchers-latency.svg"} {
		st, err := os.Stat(filepath.Join(out, f))
		if err != nil || st.Size() == 0 {
			t.Fatalf("%s: %v", f, err)
		}
	}
	loaded, err := LoadRun(filepath.Join(out, "run.json"))
	if err != nil {
		t.Fatal(err)
	}
	// Re-rendering a saved run gives the same report.
	var x, y bytes.Buffer
	if err := WriteMarkdown(&x, a); err != nil {
		t.Fatal(err)
	}
	if err := WriteMarkdown(&y, Analyze(loaded, DefaultSettings())); err != nil {
		t.Fatal(err)
	}
	if x.String() != y.String() {
		t.Fatalf("re-rendered report differs:\n%s\n---\n%s", x.String(), y.String())
	}
}

func TestLoadRunRejects(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for name, content := range map[string]string{
		"future":   `{"Schema": 99}`,
		"garbage":  `{`,
		"nullcell": `{"Schema": 1, "Cells": [null]}`,
		"badside":  `{"Schema": 1, "Cells": [{"Samples": [{"Side": "left"}]}]}`,
	} {
		p := filepath.Join(dir, name+".json")
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadRun(p); err == nil || !strings.HasPrefix(err.Error(), "report: ") {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestWrapWords(t *testing.T) {
	got := wrapWords("1 inst, 4 hot keys, tuned (conc 200, batch 200, pool 40, poll 50ms)", 28)
	want := []string{"1 inst, 4 hot keys, tuned", "(conc 200, batch 200, pool", "40, poll 50ms)"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("wrapWords = %q, want %q", got, want)
	}
	// A word longer than the width stays whole on its own line.
	if got := wrapWords("a verylongword b", 4); strings.Join(got, "|") != "a|verylongword|b" {
		t.Fatalf("wrapWords long word = %q", got)
	}
}

// A cell with fewer metric rows than label lines keeps the whole name and
// its validity: the leftover lines go into its last row.
func TestTermRowsLabelOverflow(t *testing.T) {
	c := &Cell{Name: "SIGKILL 1 of 2 dispatchers, poison 1/50, lease 2s", Samples: []*Sample{{}}}
	m, _ := MetricByName(MetricDeliveriesPerS)
	g := &group{scenario: "faults", cells: []*Cell{c}, metrics: []MetricInfo{m},
		byCell: map[*Cell]map[string]*Comparison{c: {}}}
	rows := g.termRows()
	if len(rows) != 1 {
		t.Fatalf("rows = %d, want 1", len(rows))
	}
	want := "SIGKILL 1 of 2 dispatchers,\npoison 1/50, lease 2s\n" + validity(c)
	if rows[0][0] != want || rows[0][1] != m.Title || rows[0][5] != "not measured in this cell" {
		t.Fatalf("row = %q", rows[0])
	}
}
