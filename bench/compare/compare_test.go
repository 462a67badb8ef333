package compare

import (
	"math"
	"strings"
	"testing"

	"github.com/berkcansavur/relaybus/bench/result"
	"github.com/berkcansavur/relaybus/bench/result/resulttest"
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

func TestAnalyzeZeroBase(t *testing.T) {
	t.Parallel()
	c := &result.Cell{Scenario: "dispatch", Store: "postgres", Name: "x"}
	for i := range 5 {
		c.Samples = append(c.Samples,
			&result.Sample{Side: result.SideBase, Validation: resulttest.ValidResult, Metrics: map[string]float64{result.MetricHOTPctDeliveries: 0}},
			&result.Sample{Side: result.SideCandidate, Validation: resulttest.ValidResult, Metrics: map[string]float64{result.MetricHOTPctDeliveries: 90 + float64(i)}})
	}
	a := Analyze(&result.Run{Schema: 1, Cells: []*result.Cell{c}}, DefaultSettings())
	cmp := a.Comparisons[0]
	// The ratio is undefined (base 0) but the shift is significant.
	if !math.IsNaN(cmp.Ratio) || cmp.Verdict != VerdictBetter {
		t.Fatalf("%+v", cmp)
	}
}

func TestGate(t *testing.T) {
	t.Parallel()
	a := Analyze(resulttest.Run(), DefaultSettings())
	rules, err := ParseGateRules("events_per_s:5, deliveries_per_s:5")
	if err != nil {
		t.Fatal(err)
	}
	v := Gate(a, rules)
	// The invalid dispatch window, and publish events/s at 0.35x.
	if len(v) != 2 || v[0].Metric != "validity" || v[1].Metric != result.MetricEventsPerS {
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
	if len(v) != 2 || v[1].Metric != result.MetricOplogBytesPerDelivery || !strings.Contains(v[1].Message, "not measured") {
		t.Fatalf("violations %+v", v)
	}
}

func TestParseGateRules(t *testing.T) {
	t.Parallel()
	rules, err := ParseGateRules("deliveries_per_s:5,wal_bytes_per_delivery:10.5")
	if err != nil || len(rules) != 2 || rules[1] != (GateRule{result.MetricWALBytesPerDelivery, 10.5}) {
		t.Fatalf("%v %v", rules, err)
	}
	for _, bad := range []string{"", "deliveries_per_s", "nope:5", "deliveries_per_s:x", "deliveries_per_s:-1",
		"deliveries_per_s:NaN", "deliveries_per_s:5,deliveries_per_s:6", "deliveries_per_s:5,"} {
		if _, err := ParseGateRules(bad); err == nil || !strings.HasPrefix(err.Error(), "compare: ") {
			t.Errorf("ParseGateRules(%q) = %v, want a compare: error", bad, err)
		}
	}
}
