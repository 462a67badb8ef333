// Package compare analyses a run: for every cell and metric it compares
// the valid samples of the two sides (medians, the candidate/base ratio
// with its confidence interval, the Mann-Whitney U p-value, a verdict),
// and the gate decides from that analysis whether a CI run passes. It
// decides; bench/report renders.
package compare

import "github.com/berkcansavur/relaybus/bench/result"

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
	// Ratio is candidate median / base median; RatioLow and RatioHigh
	// bound its confidence interval (the Hodges-Lehmann interval of the
	// log ratio; for metrics with zero or negative values, the interval
	// of the difference divided by the base median). NaN when undefined
	// (a zero base median); -Inf/+Inf when the samples are too few for a
	// finite interval.
	Ratio, RatioLow, RatioHigh float64
	// P is the two-sided Mann-Whitney U p-value (NaN when not computed).
	// Verdict is one of the Verdict* constants; Note says why when the
	// comparison is incomplete (e.g. "CI unbounded at n=3").
	P       float64
	Verdict string
	Note    string
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
