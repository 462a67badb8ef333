package report

import (
	"fmt"
	"math"
	"slices"
	"sort"
)

func analyze(run *Run, s Settings) *Analysis {
	a := &Analysis{Run: run, Settings: s}
	if !(s.Alpha > 0 && s.Alpha <= 0.5) {
		a.Warnings = append(a.Warnings, fmt.Sprintf("report: alpha %v outside (0, 0.5], using 0.05", s.Alpha))
		a.Settings.Alpha = 0.05
	}
	if !(s.Confidence >= 0.5 && s.Confidence < 1) {
		a.Warnings = append(a.Warnings, fmt.Sprintf("report: confidence %v outside [0.5, 1), using 0.95", s.Confidence))
		a.Settings.Confidence = 0.95
	}
	if run == nil {
		a.Warnings = append(a.Warnings, "report: no run to analyze")
		return a
	}
	a.Warnings = append(a.Warnings, run.Warnings...)
	unknown := map[string]bool{}
	for _, c := range run.Cells {
		for _, smp := range c.Samples {
			if reason := invalidReason(smp); reason != "" {
				a.Invalid = append(a.Invalid, InvalidSample{Cell: c, Sample: smp, Reason: reason})
			}
		}
		for _, m := range cellMetrics(c) {
			if _, ok := MetricByName(m.Name); !ok && !unknown[m.Name] {
				unknown[m.Name] = true
				a.Warnings = append(a.Warnings, fmt.Sprintf("report: metric %q is not in the registry; assuming lower is better", m.Name))
			}
			a.Comparisons = append(a.Comparisons, compare(c, m, a.Settings))
		}
	}
	return a
}

func invalidReason(s *Sample) string {
	switch {
	case s.Error != "":
		return "error: " + s.Error
	case s.Validation == nil:
		return "not validated"
	case !s.Validation.Valid:
		return s.Validation.String()
	}
	return ""
}

// cellMetrics lists the metrics any sample of c has, registry order
// first, then unknown names sorted.
func cellMetrics(c *Cell) []MetricInfo {
	have := map[string]bool{}
	for _, s := range c.Samples {
		for name := range s.Metrics {
			have[name] = true
		}
	}
	var out []MetricInfo
	for _, m := range Metrics {
		if have[m.Name] {
			out = append(out, m)
			delete(have, m.Name)
		}
	}
	rest := make([]string, 0, len(have))
	for name := range have {
		rest = append(rest, name)
	}
	sort.Strings(rest)
	for _, name := range rest {
		out = append(out, MetricInfo{Name: name, Unit: name, Title: name})
	}
	return out
}

// values returns the metric's values over the valid samples of one side,
// skipping samples without the metric and non-finite values.
func values(c *Cell, side, metric string) []float64 {
	var xs []float64
	for _, s := range c.Samples {
		if s.Side != side || !s.IsValid() {
			continue
		}
		v, ok := s.Metrics[metric]
		if ok && !math.IsNaN(v) && !math.IsInf(v, 0) {
			xs = append(xs, v)
		}
	}
	return xs
}

func compare(c *Cell, m MetricInfo, s Settings) *Comparison {
	b, k := values(c, SideBase, m.Name), values(c, SideCandidate, m.Name)
	cmp := &Comparison{Cell: c, Metric: m, Base: summarize(b), Candidate: summarize(k),
		Ratio: math.NaN(), RatioLow: math.NaN(), RatioHigh: math.NaN(), P: math.NaN()}
	if len(b) == 0 || len(k) == 0 {
		cmp.Verdict = VerdictNoValues
		cmp.Note = fmt.Sprintf("no valid samples (base %d, candidate %d)", len(b), len(k))
		return cmp
	}
	if cmp.Base.Median != 0 {
		cmp.Ratio = cmp.Candidate.Median / cmp.Base.Median
	}
	cmp.P = mannWhitneyP(k, b)

	// The shift interval: on logs when every value is positive (a ratio
	// model, right for rates and sizes), else on raw values.
	positive := slices.Min(b) > 0 && slices.Min(k) > 0
	var lo, hi float64
	var finite bool
	if positive {
		lb, lk := logs(b), logs(k)
		lo, hi, finite = shiftInterval(lb, lk, s.Confidence)
		cmp.RatioLow, cmp.RatioHigh = math.Exp(lo), math.Exp(hi)
	} else {
		lo, hi, finite = shiftInterval(b, k, s.Confidence)
		if cmp.Base.Median > 0 {
			cmp.RatioLow = (cmp.Base.Median + lo) / cmp.Base.Median
			cmp.RatioHigh = (cmp.Base.Median + hi) / cmp.Base.Median
		}
	}

	if minP := minPossibleP(len(b), len(k)); minP >= s.Alpha {
		cmp.Verdict = VerdictTooFew
		cmp.Note = fmt.Sprintf("n=%d+%d: the smallest possible p is %.3g, not below alpha %.3g", len(b), len(k), minP, s.Alpha)
		return cmp
	}
	if !finite {
		cmp.Note = fmt.Sprintf("n=%d+%d too few for a %.0f%% interval", len(b), len(k), 100*s.Confidence)
	}
	// The interval of the shift excludes 0 exactly when the ratio's
	// interval excludes 1; using the shift also works for a zero base.
	excludes := finite && (lo > 0 || hi < 0)
	if cmp.P < s.Alpha && excludes {
		up := lo > 0
		if up == m.HigherIsBetter {
			cmp.Verdict = VerdictBetter
		} else {
			cmp.Verdict = VerdictWorse
		}
		return cmp
	}
	cmp.Verdict = VerdictSame
	return cmp
}

func logs(xs []float64) []float64 {
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = math.Log(x)
	}
	return out
}
