package compare

import (
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/berkcansavur/relaybus/bench/result"
	"github.com/berkcansavur/relaybus/bench/result/resulttest"
	"github.com/berkcansavur/relaybus/bench/validate"
)

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
	a := Analyze(resulttest.Run(), DefaultSettings())
	d := find(t, a, "dispatch", result.MetricDeliveriesPerS)
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
	if w := find(t, a, "dispatch", result.MetricWALBytesPerDelivery); w.Verdict != VerdictBetter {
		t.Fatalf("wal: %+v", w)
	}
	// Identical values: no difference.
	if s := find(t, a, "dispatch", result.MetricStmtsPerDelivery); s.Verdict != VerdictSame || s.Ratio != 1 || s.P != 1 {
		t.Fatalf("stmts: %+v", s)
	}
	// 4 v 4 separated regression: p = 0.0286 < 0.05, worse.
	if p := find(t, a, "publish", result.MetricEventsPerS); p.Verdict != VerdictWorse || math.Abs(p.P-2.0/70) > 1e-12 {
		t.Fatalf("publish: %+v", p)
	}
	// 2 v 2: the smallest possible p is 0.333: too few samples.
	if m := find(t, a, "mixed", result.MetricE2EP50Ms); m.Verdict != VerdictTooFew || !strings.Contains(m.Note, "0.333") {
		t.Fatalf("mixed: %+v", m)
	}
	if len(a.Invalid) != 1 || a.Invalid[0].Sample.Round != 5 || !strings.Contains(a.Invalid[0].Reason, "INVALID: lost 3") {
		t.Fatalf("invalid: %+v", a.Invalid)
	}
}

func TestAnalyzeNoValidSide(t *testing.T) {
	t.Parallel()
	run := resulttest.Run()
	for _, s := range run.Cells[1].Samples {
		if s.Side == result.SideCandidate {
			s.Error = "worker crashed"
		}
	}
	a := Analyze(run, DefaultSettings())
	if c := find(t, a, "publish", result.MetricEventsPerS); c.Verdict != VerdictNoValues {
		t.Fatalf("%+v", c)
	}
	if len(a.Invalid) != 5 {
		t.Fatalf("%d invalid, want 5", len(a.Invalid))
	}
}

// TestAnalyzeDifference: a metric that can be 0 is compared as a
// difference, whose interval stays meaningful around 0 (issue 11, point
// 13: a dead-tuples ratio's interval went to [-0.01, 1.26]).
func TestAnalyzeDifference(t *testing.T) {
	t.Parallel()
	c := &result.Cell{Scenario: "dispatch", Store: "postgres", Name: "x"}
	for i := range 5 {
		c.Samples = append(c.Samples,
			&result.Sample{Side: result.SideBase, Validation: resulttest.ValidResult, Metrics: map[string]float64{
				result.MetricHOTPctDeliveries: 0, result.MetricDeadTuplesPerDelivery: 0.5 + float64(i)/100, result.MetricStmtsPerDelivery: float64(i) - 1}},
			&result.Sample{Side: result.SideCandidate, Validation: resulttest.ValidResult, Metrics: map[string]float64{
				result.MetricHOTPctDeliveries: 90 + float64(i), result.MetricDeadTuplesPerDelivery: float64(i) / 100, result.MetricStmtsPerDelivery: float64(i)}})
	}
	a := Analyze(&result.Run{Schema: 1, Cells: []*result.Cell{c}}, DefaultSettings())
	hot, dead, stmts := a.Comparisons[0], a.Comparisons[1], a.Comparisons[2]
	// Base 0: no ratio, a difference of +92 points, significant.
	if !hot.Difference || !math.IsNaN(hot.Ratio) || hot.Diff != 92 || hot.Verdict != VerdictBetter || !(hot.DiffLow > 0) {
		t.Fatalf("hot: %+v", hot)
	}
	if got := FormatChange(hot); got != "+92.0 [+90.0, +94.0]" {
		t.Fatalf("FormatChange = %q", got)
	}
	// Additive by the registry even where both sides are positive here.
	if !dead.Difference || math.Abs(dead.Diff+0.5) > 1e-9 || dead.Verdict != VerdictBetter || dead.RegressionPct() > -90 {
		t.Fatalf("dead: %+v (regression %v)", dead, dead.RegressionPct())
	}
	// A metric that is a ratio by the registry, but a side has values
	// <= 0: a difference too.
	if !stmts.Difference || stmts.Diff != 1 {
		t.Fatalf("stmts: %+v", stmts)
	}
}

func TestRegressionPct(t *testing.T) {
	t.Parallel()
	rate, _ := result.MetricByName(result.MetricDeliveriesPerS)
	wal, _ := result.MetricByName(result.MetricWALBytesPerDelivery)
	dead, _ := result.MetricByName(result.MetricDeadTuplesPerDelivery)
	for _, tc := range []struct {
		c    Comparison
		want float64
	}{
		{Comparison{Metric: rate, Ratio: 0.8}, 20},
		{Comparison{Metric: wal, Ratio: 1.1}, 10},
		{Comparison{Metric: dead, Difference: true, Diff: 0.5, Base: Summary{Median: 2}}, 25},
		{Comparison{Metric: dead, Difference: true, Diff: 0.5, Base: Summary{Median: 0}}, math.Inf(1)},
		{Comparison{Metric: dead, Difference: true, Diff: -0.5, Base: Summary{Median: 0}}, 0},
	} {
		if got := tc.c.RegressionPct(); math.Abs(got-tc.want) > 1e-9 && got != tc.want {
			t.Errorf("%+v: %v, want %v", tc.c, got, tc.want)
		}
	}
}

// gateRun is a run of n cells of one scenario, each with rounds windows
// a side: events/s 1000 + round on the base, cand(cell, round) on the
// candidate.
func gateRun(n, rounds int, cand func(cell, round int) float64) *result.Run {
	run := &result.Run{Schema: 1}
	for i := range n {
		c := &result.Cell{Scenario: "publish", Store: "postgres", Name: "cell " + strconv.Itoa(i)}
		for r := range rounds {
			jitter := float64(r)
			c.Samples = append(c.Samples,
				&result.Sample{Side: result.SideBase, Round: r + 1, Validation: resulttest.ValidResult, Metrics: map[string]float64{result.MetricEventsPerS: 1000 + jitter}},
				&result.Sample{Side: result.SideCandidate, Round: r + 1, Validation: resulttest.ValidResult, Metrics: map[string]float64{result.MetricEventsPerS: cand(i, r)}})
		}
		run.Cells = append(run.Cells, c)
	}
	return run
}

func TestGate(t *testing.T) {
	t.Parallel()
	a := Analyze(resulttest.Run(), DefaultSettings())
	rules, err := ParseGateRules("events_per_s:5, deliveries_per_s:5")
	if err != nil {
		t.Fatal(err)
	}
	g := Gate(a, rules)
	// The invalid candidate dispatch window, and publish events/s at
	// 0.35x. Holm over a family of 2 (dispatch deliveries/s, p = 2/252;
	// publish events/s, p = 2/70): 0.0079 <= 0.05/2, then 0.0286 <= 0.05.
	if len(g.Violations) != 2 || g.Violations[0].Metric != "validity" || g.Violations[1].Metric != result.MetricEventsPerS || g.Family != 2 {
		t.Fatalf("violations %+v family %d notes %q", g.Violations, g.Family, g.Notes)
	}
	// Scoped to the publish cell, the family is 1.
	rules, _ = ParseGateRules("events_per_s@publish:5")
	g = Gate(a, rules)
	if len(g.Violations) != 2 || g.Violations[1].Metric != result.MetricEventsPerS || !strings.Contains(g.Violations[1].Message, "regressed 64.4% (limit 5%)") {
		t.Fatalf("violations %+v", g.Violations)
	}
	// A generous limit passes the regression.
	rules, _ = ParseGateRules("events_per_s@publish:70")
	if g := Gate(a, rules); len(g.Violations) != 1 {
		t.Fatalf("violations %+v", g.Violations)
	}
	// An improvement never fails; a metric not measured does, and so
	// does a scope that matches no cell.
	rules, _ = ParseGateRules("wal_bytes_per_delivery:0,oplog_bytes_per_delivery:5,events_per_s@keyed:5")
	g = Gate(a, rules)
	if len(g.Violations) != 3 || !strings.Contains(g.Violations[1].Message, "oplog_bytes_per_delivery:5: not measured") ||
		!strings.Contains(g.Violations[2].Message, "events_per_s@keyed:5: not measured") {
		t.Fatalf("violations %+v", g.Violations)
	}
}

// TestGateHolm: of three cells, one regresses clearly (p = 2/924 with
// 6+6 windows, below 0.05/3) and fails; one regresses with p = 0.026,
// significant alone but not after Holm (0.026 > 0.05/2): a note; one
// does not move.
func TestGateHolm(t *testing.T) {
	t.Parallel()
	a := Analyze(gateRun(3, 6, func(i, r int) float64 {
		switch i {
		case 0:
			return 500 + float64(r)
		case 1:
			// Five windows below every base window, one above four of
			// them: U = 4 of 36, p = 24/924.
			return []float64{990, 991, 992, 993, 994, 1003.5}[r]
		}
		return 1000 + float64(r)
	}), DefaultSettings())
	rules, _ := ParseGateRules("events_per_s:0")
	g := Gate(a, rules)
	if g.Family != 3 || len(g.Violations) != 1 || g.Violations[0].Cell.Name != "cell 0" ||
		!slices.ContainsFunc(g.Notes, func(n string) bool {
			return strings.Contains(n, "cell 1") && strings.Contains(n, "not significant after Holm")
		}) {
		t.Fatalf("family %d violations %+v notes %q", g.Family, g.Violations, g.Notes)
	}
	// With 4+4 windows, a family of 3 can never reject: the gate says so.
	a = Analyze(gateRun(3, 4, func(_, r int) float64 { return 500 + float64(r) }), DefaultSettings())
	g = Gate(a, rules)
	if g.Failed() || !slices.ContainsFunc(g.Notes, func(n string) bool { return strings.Contains(n, "no regression can fail this gate") }) {
		t.Fatalf("violations %+v notes %q", g.Violations, g.Notes)
	}
}

// TestGateMissingData: a metric with no data on one side fails the gate
// and is named, unless every base window of the cell is INVALID (the
// gate judges the candidate; the base's invalidity is a note).
func TestGateMissingData(t *testing.T) {
	t.Parallel()
	run := gateRun(2, 4, func(_, r int) float64 { return 1000 + float64(r) })
	for _, s := range run.Cells[0].Samples {
		if s.Side == result.SideBase {
			delete(s.Metrics, result.MetricEventsPerS) // an old worker that does not measure it
		}
	}
	for _, s := range run.Cells[1].Samples {
		if s.Side == result.SideBase {
			s.Validation = &validate.Result{Duplicates: 3}
		}
	}
	rules, _ := ParseGateRules("events_per_s:5")
	g := Gate(Analyze(run, DefaultSettings()), rules)
	if len(g.Violations) != 1 || !strings.Contains(g.Violations[0].Message, "cell 0: events_per_s has no base data") {
		t.Fatalf("violations %+v", g.Violations)
	}
	if !slices.ContainsFunc(g.Notes, func(n string) bool {
		return strings.Contains(n, "cell 1: events_per_s not compared: every base window is INVALID")
	}) ||
		!slices.ContainsFunc(g.Notes, func(n string) bool { return strings.Contains(n, "(base: not held against the candidate)") }) {
		t.Fatalf("notes %q", g.Notes)
	}
	// No candidate data fails, whatever the base.
	for _, s := range run.Cells[1].Samples {
		if s.Side == result.SideCandidate {
			delete(s.Metrics, result.MetricEventsPerS)
		}
	}
	g = Gate(Analyze(run, DefaultSettings()), rules)
	if !slices.ContainsFunc(g.Violations, func(v Violation) bool {
		return strings.Contains(v.Message, "cell 1: events_per_s has no valid candidate data")
	}) {
		t.Fatalf("violations %+v", g.Violations)
	}
}

func TestSelfTest(t *testing.T) {
	t.Parallel()
	// Cell 0 differs (a false positive in an A/A run), the rest do not.
	a := Analyze(gateRun(4, 6, func(i, r int) float64 {
		if i == 0 {
			return 900 + float64(r)
		}
		return 1000 + float64(r)
	}), DefaultSettings())
	st := RunSelfTest(a)
	if st.Comparisons != 4 || st.False != 1 || st.Gates != 1 || st.FailedRaw != 1 || st.FailedHolm != 1 ||
		!slices.Equal(st.FailedMetrics, []string{result.MetricEventsPerS}) {
		t.Fatalf("%+v", st)
	}
}

func TestParseGateRules(t *testing.T) {
	t.Parallel()
	rules, err := ParseGateRules("deliveries_per_s:5,wal_bytes_per_delivery@dispatch:10.5,wal_bytes_per_delivery:20")
	if err != nil || len(rules) != 3 || rules[1] != (GateRule{result.MetricWALBytesPerDelivery, "dispatch", 10.5}) || rules[1].String() != "wal_bytes_per_delivery@dispatch:10.5" {
		t.Fatalf("%v %v", rules, err)
	}
	for _, bad := range []string{"", "deliveries_per_s", "nope:5", "deliveries_per_s:x", "deliveries_per_s:-1",
		"deliveries_per_s:NaN", "deliveries_per_s:5,deliveries_per_s:6", "deliveries_per_s:5,", "deliveries_per_s@:5",
		"deliveries_per_s@a b:5", "deliveries_per_s:1001"} {
		if _, err := ParseGateRules(bad); err == nil || !strings.HasPrefix(err.Error(), "compare: ") {
			t.Errorf("ParseGateRules(%q) = %v, want a compare: error", bad, err)
		}
	}
}

// A metric only one side has (River's river_job has HOT updates, a
// relaybus store that deletes on completion updates no delivery row) is
// not compared, but the side that has it shows its median.
func TestOneSideOnly(t *testing.T) {
	c := &Comparison{Verdict: VerdictNoValues, Base: Summary{N: 4, Median: 12.5}, Candidate: Summary{Median: math.NaN()}}
	if got := OneSide(c); got != "base" {
		t.Errorf("OneSide = %q", got)
	}
	if got := FormatComparison(c); got != "12.5 -> - (base only)" {
		t.Errorf("FormatComparison = %q", got)
	}
	c.Base, c.Candidate = c.Candidate, c.Base
	if got := FormatComparison(c); got != "- -> 12.5 (candidate only)" {
		t.Errorf("FormatComparison = %q", got)
	}
	c.Candidate = Summary{Median: math.NaN()}
	if got := FormatComparison(c); OneSide(c) != "" || got != "no valid samples" {
		t.Errorf("neither side: %q", got)
	}
}

// TestGateNames: a rule may name a metric as the report prints it (its
// unit or its column title), and an unknown name lists the metrics.
func TestGateNames(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"deliveries_per_s", "deliveries/s", "Deliveries/s"} {
		rules, err := ParseGateRules(name + "@dispatch:5")
		if err != nil || len(rules) != 1 || rules[0].Metric != result.MetricDeliveriesPerS {
			t.Errorf("%q: %+v, %v", name, rules, err)
		}
	}
	rules, err := ParseGateRules("WAL B/delivery:10")
	if err != nil || rules[0].Metric != result.MetricWALBytesPerDelivery {
		t.Errorf("by title: %+v, %v", rules, err)
	}
	_, err = ParseGateRules("deliveries_per_sec:5")
	if err == nil || !strings.Contains(err.Error(), `unknown metric "deliveries_per_sec"; the metrics are deliveries_per_s (deliveries/s), `) {
		t.Errorf("unknown metric: %v", err)
	}
}

// TestGateComparedNothing: rules whose every comparison has too few
// samples for a verdict fail the gate instead of passing it.
func TestGateComparedNothing(t *testing.T) {
	t.Parallel()
	a := Analyze(gateRun(1, 1, func(_, r int) float64 { return 1000 + float64(r) }), DefaultSettings())
	rules, _ := ParseGateRules("events_per_s:5")
	g := Gate(a, rules)
	if !g.Failed() || g.Family != 0 || !strings.Contains(g.Violations[len(g.Violations)-1].Message, "cover no comparison with enough samples for a verdict") {
		t.Fatalf("family %d violations %+v notes %q", g.Family, g.Violations, g.Notes)
	}
}
