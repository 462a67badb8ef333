package compare

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/berkcansavur/relaybus/bench/result"
)

// GateRule fails the gate when Metric is worse (verdict "worse", i.e.
// significant) by more than MaxRegressionPct percent of the base median.
type GateRule struct {
	Metric           string
	MaxRegressionPct float64
}

// Violation is one gate rule broken in one cell (or, with Cell nil, in
// the run as a whole).
type Violation struct {
	Cell    *result.Cell
	Metric  string
	Ratio   float64
	CI      [2]float64
	P       float64
	Message string
}

// MaxGateRules bounds a rule list.
const MaxGateRules = 100

// ParseGateRules parses "deliveries_per_s:5,wal_bytes_per_delivery:10":
// metric names from the registry, each with the largest regression in
// percent that still passes (>= 0).
func ParseGateRules(s string) ([]GateRule, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, fmt.Errorf("compare: gate rules: empty (want metric:percent,...)")
	}
	parts := strings.Split(s, ",")
	if len(parts) > MaxGateRules {
		return nil, fmt.Errorf("compare: gate rules: %d rules, at most %d", len(parts), MaxGateRules)
	}
	seen := map[string]bool{}
	var rules []GateRule
	for _, part := range parts {
		name, pct, ok := strings.Cut(strings.TrimSpace(part), ":")
		if !ok {
			return nil, fmt.Errorf("compare: gate rule %q: want metric:percent", part)
		}
		name = strings.TrimSpace(name)
		if _, known := result.MetricByName(name); !known {
			return nil, fmt.Errorf("compare: gate rule %q: unknown metric %q", part, name)
		}
		if seen[name] {
			return nil, fmt.Errorf("compare: gate rule %q: metric %q given twice", part, name)
		}
		seen[name] = true
		v, err := strconv.ParseFloat(strings.TrimSpace(pct), 64)
		if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || v < 0 || v > 1000 {
			return nil, fmt.Errorf("compare: gate rule %q: percent %q must be a number in [0, 1000]", part, pct)
		}
		rules = append(rules, GateRule{Metric: name, MaxRegressionPct: v})
	}
	return rules, nil
}

// Gate checks a against rules; no violation means the gate passes. Besides
// the rules, an INVALID sample anywhere fails the gate (a run that lost or
// duplicated deliveries must not pass as fast), and so does a rule whose
// metric the run never measured (a misconfigured gate must not pass
// silently). A "too few samples" or "~" verdict passes: the gate fails
// only on significant regressions.
func Gate(a *Analysis, rules []GateRule) []Violation {
	var out []Violation
	for _, inv := range a.Invalid {
		out = append(out, Violation{Cell: inv.Cell, Metric: "validity", Ratio: math.NaN(), CI: [2]float64{math.NaN(), math.NaN()}, P: math.NaN(),
			Message: fmt.Sprintf("%s %s %s round %d is INVALID: %s", inv.Cell.Store, inv.Cell.Scenario, inv.Cell.Name, inv.Sample.Round, inv.Reason)})
	}
	for _, rule := range rules {
		measured := false
		for _, c := range a.Comparisons {
			if c.Metric.Name != rule.Metric {
				continue
			}
			measured = true
			if c.Verdict != VerdictWorse || math.IsNaN(c.Ratio) {
				continue
			}
			regression := (c.Ratio - 1) * 100
			if c.Metric.HigherIsBetter {
				regression = (1 - c.Ratio) * 100
			}
			if regression <= rule.MaxRegressionPct {
				continue
			}
			out = append(out, Violation{Cell: c.Cell, Metric: rule.Metric, Ratio: c.Ratio, CI: [2]float64{c.RatioLow, c.RatioHigh}, P: c.P,
				Message: fmt.Sprintf("%s %s %s: %s regressed %.1f%% (limit %g%%): %s -> %s, ratio %sx [%s, %s], p=%.2g",
					c.Cell.Store, c.Cell.Scenario, c.Cell.Name, rule.Metric, regression, rule.MaxRegressionPct,
					FormatNumber(c.Base.Median), FormatNumber(c.Candidate.Median), FormatRatio(c.Ratio),
					FormatRatio(c.RatioLow), FormatRatio(c.RatioHigh), c.P)})
		}
		if !measured {
			out = append(out, Violation{Metric: rule.Metric, Ratio: math.NaN(), CI: [2]float64{math.NaN(), math.NaN()}, P: math.NaN(),
				Message: fmt.Sprintf("%s: not measured in this run", rule.Metric)})
		}
	}
	return out
}
