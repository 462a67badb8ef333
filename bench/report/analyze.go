package report

// Settings of the analysis.
type Settings struct {
	// Alpha is the significance level of the Mann-Whitney U test.
	Alpha float64
	// Confidence is the level of the ratio's confidence interval.
	Confidence float64
	// BootstrapResamples is the number of bootstrap resamples per
	// interval.
	BootstrapResamples int
	// Seed makes the bootstrap deterministic: the same run always gives
	// the same report.
	Seed uint64
}

// DefaultSettings: alpha 0.05, 95% intervals, 10,000 resamples, seed 1.
func DefaultSettings() Settings {
	return Settings{Alpha: 0.05, Confidence: 0.95, BootstrapResamples: 10000, Seed: 1}
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
	Cell      *Cell
	Metric    MetricInfo
	Base      Summary
	Candidate Summary
	// Ratio is candidate median / base median; RatioLow and RatioHigh
	// bound its confidence interval. NaN when undefined (a zero base).
	Ratio, RatioLow, RatioHigh float64
	// P is the two-sided Mann-Whitney U p-value (NaN when not computed).
	P       float64
	Verdict string
	Note    string
}

// InvalidSample is a sample left out of the statistics, listed.
type InvalidSample struct {
	Cell   *Cell
	Sample *Sample
	Reason string
}

// Analysis of a run.
type Analysis struct {
	Run         *Run
	Settings    Settings
	Comparisons []*Comparison
	Invalid     []InvalidSample
	Warnings    []string
}

// Analyze compares the sides of every cell, metric by metric.
func Analyze(run *Run, s Settings) *Analysis {
	return analyze(run, s)
}
