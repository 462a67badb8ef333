package compare

import (
	"fmt"
	"math"
	"slices"

	"github.com/berkcansavur/relaybus/bench/result"
	"github.com/berkcansavur/relaybus/bench/stats"
)

func analyze(run *result.Run, s Settings) *Analysis {
	a := &Analysis{Run: run, Settings: s}
	if !(s.Alpha > 0 && s.Alpha <= 0.5) {
		a.Warnings = append(a.Warnings, fmt.Sprintf("compare: alpha %v outside (0, 0.5], using 0.05", s.Alpha))
		a.Settings.Alpha = 0.05
	}
	if !(s.Confidence >= 0.5 && s.Confidence < 1) {
		a.Warnings = append(a.Warnings, fmt.Sprintf("compare: confidence %v outside [0.5, 1), using 0.95", s.Confidence))
		a.Settings.Confidence = 0.95
	}
	if run == nil {
		a.Warnings = append(a.Warnings, "compare: no run to analyze")
		return a
	}
	a.Warnings = append(a.Warnings, run.Warnings...)
	a.Warnings = append(a.Warnings, validationNotes(run)...)
	unknown := map[string]bool{}
	for _, c := range run.Cells {
		for _, smp := range c.Samples {
			if reason := invalidReason(smp); reason != "" {
				a.Invalid = append(a.Invalid, InvalidSample{Cell: c, Sample: smp, Reason: reason})
			}
		}
		for _, m := range c.MetricList() {
			if _, ok := result.MetricByName(m.Name); !ok && !unknown[m.Name] {
				unknown[m.Name] = true
				a.Warnings = append(a.Warnings, fmt.Sprintf("compare: metric %q is not in the registry; assuming lower is better", m.Name))
			}
			a.Comparisons = append(a.Comparisons, compare(c, m, a.Settings))
		}
	}
	return a
}

// validationNotes says, once per side, what the validator could not
// check (for example the commit order of a worker that records no call
// starts), with how many windows it concerns.
func validationNotes(run *result.Run) []string {
	var out []string
	for _, side := range []string{result.SideBase, result.SideCandidate} {
		first, n := "", 0
		for _, c := range run.Cells {
			for _, s := range c.Samples {
				if s.Side == side && s.Validation != nil && len(s.Validation.Notes) > 0 {
					if n == 0 {
						first = s.Validation.Notes[0]
					}
					n++
				}
			}
		}
		if n > 0 {
			out = append(out, fmt.Sprintf("%s: %d window(s) not fully checked, e.g. %s", side, n, first))
		}
	}
	return out
}

func invalidReason(s *result.Sample) string {
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

// values returns the metric's values over the valid samples of one side,
// skipping samples without the metric and non-finite values.
func values(c *result.Cell, side, metric string) []float64 {
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

func compare(c *result.Cell, m result.MetricInfo, s Settings) *Comparison {
	b, k := values(c, result.SideBase, m.Name), values(c, result.SideCandidate, m.Name)
	cmp := &Comparison{Cell: c, Metric: m, Base: summarize(b), Candidate: summarize(k),
		Ratio: math.NaN(), RatioLow: math.NaN(), RatioHigh: math.NaN(),
		Diff: math.NaN(), DiffLow: math.NaN(), DiffHigh: math.NaN(), P: math.NaN()}
	if len(b) == 0 || len(k) == 0 {
		cmp.Verdict = VerdictNoValues
		cmp.Note = fmt.Sprintf("no valid samples (base %d, candidate %d)", len(b), len(k))
		return cmp
	}
	cmp.P = stats.MannWhitneyP(k, b)

	// The shift interval: on logs for a ratio (rates and sizes, every
	// value positive), else on raw values for a difference.
	cmp.Difference = m.Additive || slices.Min(b) <= 0 || slices.Min(k) <= 0
	var lo, hi float64
	var finite bool
	if cmp.Difference {
		cmp.Diff = cmp.Candidate.Median - cmp.Base.Median
		lo, hi, finite = stats.ShiftInterval(b, k, s.Confidence)
		cmp.DiffLow, cmp.DiffHigh = lo, hi
	} else {
		cmp.Ratio = cmp.Candidate.Median / cmp.Base.Median
		lo, hi, finite = stats.ShiftInterval(logs(b), logs(k), s.Confidence)
		cmp.RatioLow, cmp.RatioHigh = math.Exp(lo), math.Exp(hi)
	}

	if minP := stats.MinPossibleP(len(b), len(k)); minP >= s.Alpha {
		cmp.Verdict = VerdictTooFew
		cmp.Note = fmt.Sprintf("n=%d+%d: the smallest possible p is %.3g, not below alpha %.3g", len(b), len(k), minP, s.Alpha)
		return cmp
	}
	if !finite {
		cmp.Note = fmt.Sprintf("n=%d+%d too few for a %.0f%% interval", len(b), len(k), 100*s.Confidence)
	}
	// The interval of the shift excludes 0 exactly when the ratio's
	// interval excludes 1.
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

func summarize(xs []float64) Summary {
	if len(xs) == 0 {
		return Summary{Median: math.NaN(), Min: math.NaN(), Max: math.NaN()}
	}
	return Summary{N: len(xs), Median: stats.Median(xs), Min: slices.Min(xs), Max: slices.Max(xs)}
}
