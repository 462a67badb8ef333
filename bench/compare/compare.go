// Package compare analyses a run: for every cell and metric it compares
// the valid samples of the two sides (medians, the candidate/base ratio
// with its confidence interval, the Mann-Whitney U p-value, a verdict),
// and the gate decides from that analysis whether a CI run passes. It
// decides; bench/report renders.
package compare

import (
	"math"

	"github.com/berkcansavur/relaybus/bench/result"
)

// Settings of the analysis.
//
// The ratio's confidence interval is the Hodges-Lehmann (Moses)
// interval of the shift of log values, turned back into a ratio, not a
// bootstrap: a harness cell has 4 to 10 windows per side, where a
// percentile bootstrap of medians takes only a handful of distinct
// values and under-covers, while the Moses interval has exact,
// distribution-free coverage from the same U distribution as the test.
// The interval and the p-value therefore agree (the interval excludes 1
// essentially when the test rejects), and the analysis needs no random
// numbers, so one run always renders the same report.
type Settings struct {
	// Alpha is the significance level of the Mann-Whitney U test, in
	// (0, 0.5].
	Alpha float64
	// Confidence is the level of the ratio's confidence interval, in
	// [0.5, 1).
	Confidence float64
}

// DefaultSettings: alpha 0.05, 95% intervals.
func DefaultSettings() Settings {
	return Settings{Alpha: 0.05, Confidence: 0.95}
}

// Verdicts.
const (
	VerdictBetter   = "better"
	VerdictWorse    = "worse"
	VerdictSame     = "~"
	VerdictTooFew   = "too few samples"
	VerdictNoValues = "no data"
)

// Summary of one side's valid samples of one metric.
type Summary struct {
	N                int
	Median, Min, Max float64
}

// Comparison of one metric in one cell.
type Comparison struct {
	Cell      *result.Cell
	Metric    result.MetricInfo
	Base      Summary
	Candidate Summary
	// Difference: the change is reported as candidate - base (Diff, with
	// the Hodges-Lehmann interval of the shift, DiffLow and DiffHigh)
	// instead of a ratio, because the metric can be 0 (Additive) or a
	// side has a value <= 0: a ratio's interval would then cross below
	// 0 or be undefined. Otherwise Ratio is candidate median / base
	// median and RatioLow and RatioHigh bound it (the Hodges-Lehmann
	// interval of the log ratio). Unused fields are NaN; -Inf/+Inf bound
	// an interval the samples are too few to close.
	Difference                 bool
	Ratio, RatioLow, RatioHigh float64
	Diff, DiffLow, DiffHigh    float64
	// P is the two-sided Mann-Whitney U p-value (NaN when not computed).
	// Verdict is one of the Verdict* constants; Note says why when the
	// comparison is incomplete (e.g. "CI unbounded at n=3").
	P       float64
	Verdict string
	Note    string
}

// RegressionPct is how much worse the candidate is, in percent of the
// base median (negative: better): from the ratio, or for a difference
// from Diff over the base median (+Inf when the base median is 0 and the
// candidate is worse). NaN when there is nothing to compare.
func (c *Comparison) RegressionPct() float64 {
	if c.Difference {
		worse := c.Diff
		if c.Metric.HigherIsBetter {
			worse = -worse
		}
		switch {
		case math.IsNaN(worse):
			return math.NaN()
		case c.Base.Median == 0 && worse > 0:
			return math.Inf(1)
		case c.Base.Median == 0:
			return 0
		}
		return 100 * worse / math.Abs(c.Base.Median)
	}
	if c.Metric.HigherIsBetter {
		return (1 - c.Ratio) * 100
	}
	return (c.Ratio - 1) * 100
}

// InvalidSample is a sample left out of the statistics, listed.
type InvalidSample struct {
	Cell   *result.Cell
	Sample *result.Sample
	Reason string
}

// Analysis of a run.
type Analysis struct {
	Run         *result.Run
	Settings    Settings
	Comparisons []*Comparison
	Invalid     []InvalidSample
	Warnings    []string
}

// Analyze compares the sides of every cell, metric by metric.
func Analyze(run *result.Run, s Settings) *Analysis {
	return analyze(run, s)
}
