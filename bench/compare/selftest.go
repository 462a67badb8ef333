package compare

import (
	"slices"

	"github.com/berkcansavur/relaybus/bench/result"
)

// SelfTest is what an A/A run (both sides the same code) says about the
// harness's error rates: every verdict other than "~" is a false
// positive.
type SelfTest struct {
	// Comparisons that reached a verdict (better, worse or ~), and the
	// false ones among them: the rate per comparison, which the test
	// holds at alpha.
	Comparisons, False int
	// Gates: one gate per metric the run measured, over every cell, with
	// a 0% limit: the strictest gate one could write. FailedHolm of them
	// fail as the gate runs (Holm's correction over the gate's cells),
	// FailedRaw would fail without the correction: the family-wise rate
	// per gate, with and without it.
	Gates, FailedHolm, FailedRaw int
	// FailedMetrics names the metrics whose gate fails with Holm.
	FailedMetrics []string
}

// RunSelfTest computes a's A/A error rates. INVALID windows do not
// count: the gate's validity check is not a statistical error.
func RunSelfTest(a *Analysis) SelfTest {
	var st SelfTest
	var metrics []string
	for _, c := range a.Comparisons {
		switch c.Verdict {
		case VerdictBetter, VerdictWorse:
			st.False++
			st.Comparisons++
		case VerdictSame:
			st.Comparisons++
		}
		if !slices.Contains(metrics, c.Metric.Name) {
			metrics = append(metrics, c.Metric.Name)
		}
	}
	valid := &Analysis{Run: a.Run, Settings: a.Settings, Comparisons: a.Comparisons}
	for _, m := range metrics {
		if _, known := result.MetricByName(m); !known {
			continue
		}
		rules := []GateRule{{Metric: m}}
		st.Gates++
		if failedOnStatistics(gate(valid, rules, true)) {
			st.FailedHolm++
			st.FailedMetrics = append(st.FailedMetrics, m)
		}
		if failedOnStatistics(gate(valid, rules, false)) {
			st.FailedRaw++
		}
	}
	return st
}

// failedOnStatistics: the gate failed on a regression (not on missing
// data, which an A/A run may have in cells whose side never measured a
// metric).
func failedOnStatistics(g *GateResult) bool {
	for _, v := range g.Violations {
		if v.Comparison != nil && v.Comparison.Verdict == VerdictWorse {
			return true
		}
	}
	return false
}
