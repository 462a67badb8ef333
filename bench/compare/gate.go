package compare

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/berkcansavur/relaybus/bench/result"
	"github.com/berkcansavur/relaybus/bench/stats"
)

// GateRule fails the gate when Metric is worse (verdict "worse", i.e.
// significant after Holm's correction) by more than MaxRegressionPct
// percent of the base median, in every cell of the run or, with
// Scenario, in that scenario's cells only.
type GateRule struct {
	Metric           string
	Scenario         string // "" = every scenario
	MaxRegressionPct float64
}

// Limits of a rule list.
const (
	MaxGateRules = 100
	// maxRegressionPct bounds a rule's limit.
	maxRegressionPct = 1000
)

// ParseGateRules parses "deliveries_per_s:5,wal_bytes_per_delivery@dispatch:10":
// metric names from the registry, optionally scoped to one scenario,
// each with the largest regression in percent that still passes
// (0 to 1000).
func ParseGateRules(s string) ([]GateRule, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, fmt.Errorf("compare: gate rules: empty (want metric[@scenario]:percent,...)")
	}
	parts := strings.Split(s, ",")
	if len(parts) > MaxGateRules {
		return nil, fmt.Errorf("compare: gate rules: %d rules, at most %d", len(parts), MaxGateRules)
	}
	seen := map[[2]string]bool{}
	var rules []GateRule
	for _, part := range parts {
		target, pct, ok := strings.Cut(strings.TrimSpace(part), ":")
		if !ok {
			return nil, fmt.Errorf("compare: gate rule %q: want metric[@scenario]:percent", part)
		}
		name, scenario, scoped := strings.Cut(strings.TrimSpace(target), "@")
		if scoped && (scenario == "" || result.Slug(scenario) != scenario) {
			return nil, fmt.Errorf("compare: gate rule %q: scenario %q is not a scenario name", part, scenario)
		}
		m, known := LookupMetric(name)
		if !known {
			return nil, fmt.Errorf("compare: gate rule %q: unknown metric %q; the metrics are %s", part, name, metricNames())
		}
		name = m.Name
		if seen[[2]string{name, scenario}] {
			return nil, fmt.Errorf("compare: gate rule %q: metric %q given twice", part, target)
		}
		seen[[2]string{name, scenario}] = true
		v, err := strconv.ParseFloat(strings.TrimSpace(pct), 64)
		if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || v < 0 || v > maxRegressionPct {
			return nil, fmt.Errorf("compare: gate rule %q: percent %q must be a number in [0, %d]", part, pct, maxRegressionPct)
		}
		rules = append(rules, GateRule{Metric: name, Scenario: scenario, MaxRegressionPct: v})
	}
	return rules, nil
}

// LookupMetric finds a metric of the registry by its name
// ("deliveries_per_s"), its unit ("deliveries/s") or its column title
// ("WAL B/delivery"), as the report prints them, ignoring case.
func LookupMetric(s string) (result.MetricInfo, bool) {
	s = strings.TrimSpace(s)
	for _, m := range result.Metrics {
		if strings.EqualFold(s, m.Name) || strings.EqualFold(s, m.Unit) || strings.EqualFold(s, m.Title) {
			return m, true
		}
	}
	return result.MetricInfo{}, false
}

// metricNames lists the registry's metrics for an error: each name with
// the title the report prints.
func metricNames() string {
	names := make([]string, len(result.Metrics))
	for i, m := range result.Metrics {
		names[i] = m.Name + " (" + m.Title + ")"
	}
	return strings.Join(names, ", ")
}

func (r GateRule) String() string {
	s := r.Metric
	if r.Scenario != "" {
		s += "@" + r.Scenario
	}
	return s + ":" + strconv.FormatFloat(r.MaxRegressionPct, 'g', -1, 64)
}

func (r GateRule) covers(c *Comparison) bool {
	return c.Metric.Name == r.Metric && (r.Scenario == "" || c.Cell.Scenario == r.Scenario)
}

// Violation is one reason the gate fails: a rule broken in a cell, a
// rule the run cannot judge, or an INVALID candidate window.
type Violation struct {
	Cell       *result.Cell // nil for the run as a whole
	Metric     string       // "validity" for an INVALID window
	Comparison *Comparison  // nil when there is none
	Message    string
}

// GateResult is the gate's decision: it fails when Violations is not
// empty. Notes say what it did not hold against the candidate and why.
type GateResult struct {
	Violations []Violation
	Notes      []string
	// Family is the number of comparisons the rules cover whose sample
	// sizes allow a verdict: Holm's correction runs over them, so the
	// chance that an A/A run fails the gate anywhere stays at most alpha.
	Family int
}

// Failed reports whether the gate fails.
func (g *GateResult) Failed() bool { return len(g.Violations) > 0 }

// Gate checks a against rules. It fails on:
//   - an INVALID candidate window (a run that lost or duplicated
//     deliveries must not pass as fast); an INVALID base window only
//     makes a note, since the gate judges the candidate;
//   - a rule whose metric the run never measured, or that has no valid
//     candidate data in a cell, or no base data where base windows were
//     VALID (a misconfigured gate must not pass silently);
//   - a metric that is "worse" by more than the rule's limit, with its
//     p-value still significant after Holm's step-down correction over
//     every comparison the rules cover.
//
// A "too few samples" or "~" verdict passes.
func Gate(a *Analysis, rules []GateRule) *GateResult {
	return gate(a, rules, true)
}

func gate(a *Analysis, rules []GateRule, holm bool) *GateResult {
	g := &GateResult{}
	for _, inv := range a.Invalid {
		msg := fmt.Sprintf("%s %s %s round %d (%s) is INVALID: %s", inv.Cell.Store, inv.Cell.Scenario, inv.Cell.Name, inv.Sample.Round, inv.Sample.Side, inv.Reason)
		if inv.Sample.Side == result.SideCandidate {
			g.Violations = append(g.Violations, Violation{Cell: inv.Cell, Metric: "validity", Message: msg})
		} else {
			g.Notes = append(g.Notes, msg+" (base: not held against the candidate)")
		}
	}
	type candidate struct {
		rule GateRule
		c    *Comparison
	}
	var family []*Comparison
	var worse []candidate
	inFamily := map[*Comparison]bool{}
	for _, rule := range rules {
		measured := false
		for _, c := range a.Comparisons {
			if !rule.covers(c) {
				continue
			}
			measured = true
			switch {
			case c.Candidate.N == 0:
				g.Violations = append(g.Violations, Violation{Cell: c.Cell, Metric: rule.Metric, Comparison: c,
					Message: fmt.Sprintf("%s %s %s: %s has no valid candidate data", c.Cell.Store, c.Cell.Scenario, c.Cell.Name, rule.Metric)})
				continue
			case c.Base.N == 0 && allInvalid(c.Cell, result.SideBase):
				g.Notes = append(g.Notes, fmt.Sprintf("%s %s %s: %s not compared: every base window is INVALID", c.Cell.Store, c.Cell.Scenario, c.Cell.Name, rule.Metric))
				continue
			case c.Base.N == 0:
				g.Violations = append(g.Violations, Violation{Cell: c.Cell, Metric: rule.Metric, Comparison: c,
					Message: fmt.Sprintf("%s %s %s: %s has no base data to compare with", c.Cell.Store, c.Cell.Scenario, c.Cell.Name, rule.Metric)})
				continue
			case c.Verdict == VerdictTooFew || math.IsNaN(c.P):
				continue
			}
			if !inFamily[c] {
				inFamily[c] = true
				family = append(family, c)
			}
			if c.Verdict == VerdictWorse && c.RegressionPct() > rule.MaxRegressionPct {
				worse = append(worse, candidate{rule, c})
			}
		}
		if !measured {
			g.Violations = append(g.Violations, Violation{Metric: rule.Metric,
				Message: fmt.Sprintf("%s: not measured in this run", rule)})
		}
	}
	g.Family = len(family)
	ruleBroken := slices.ContainsFunc(g.Violations, func(v Violation) bool { return v.Metric != "validity" })
	if len(rules) > 0 && g.Family == 0 && !ruleBroken {
		// Nothing was judged: a gate that compared nothing must not pass.
		g.Violations = append(g.Violations, Violation{Metric: "gate",
			Message: "the gate's rules cover no comparison with enough samples for a verdict (every one is \"too few samples\" or has no data): run more rounds (--rounds), or a mode with them"})
	}
	alpha := a.Settings.Alpha
	rejected := map[*Comparison]bool{}
	if holm {
		rejected = holmRejects(family, alpha)
		if g.Family > 1 {
			smallest := math.Inf(1)
			for _, c := range family {
				smallest = math.Min(smallest, stats.MinPossibleP(c.Base.N, c.Candidate.N))
			}
			if smallest > alpha/float64(g.Family) {
				g.Notes = append(g.Notes, fmt.Sprintf("the rules cover %d comparisons: Holm's correction needs p <= %.3g for the first, "+
					"and these sample sizes cannot give less than %.3g, so no regression can fail this gate; "+
					"scope the rules to the cells that matter (METRIC@SCENARIO:PCT) or run more rounds",
					g.Family, alpha/float64(g.Family), smallest))
			}
		}
	} else {
		for _, c := range family {
			rejected[c] = c.P < alpha
		}
	}
	for _, w := range worse {
		c := w.c
		msg := fmt.Sprintf("%s %s %s: %s regressed %.1f%% (limit %g%%): %s -> %s, %s, p=%.2g",
			c.Cell.Store, c.Cell.Scenario, c.Cell.Name, w.rule.Metric, c.RegressionPct(), w.rule.MaxRegressionPct,
			FormatNumber(c.Base.Median), FormatNumber(c.Candidate.Median), FormatChange(c), c.P)
		if !rejected[c] {
			g.Notes = append(g.Notes, msg+fmt.Sprintf(": not significant after Holm's correction over %d comparisons", g.Family))
			continue
		}
		g.Violations = append(g.Violations, Violation{Cell: c.Cell, Metric: w.rule.Metric, Comparison: c, Message: msg})
	}
	return g
}

// holmRejects runs Holm's step-down procedure: with the k p-values in
// ascending order, reject the i-th (from 0) while p <= alpha / (k - i),
// and stop at the first that is not.
func holmRejects(family []*Comparison, alpha float64) map[*Comparison]bool {
	sorted := slices.Clone(family)
	slices.SortStableFunc(sorted, func(a, b *Comparison) int { return cmp.Compare(a.P, b.P) })
	out := map[*Comparison]bool{}
	for i, c := range sorted {
		if c.P > alpha/float64(len(sorted)-i) {
			break
		}
		out[c] = true
	}
	return out
}

// allInvalid reports whether c has windows of side and none is valid.
func allInvalid(c *result.Cell, side string) bool {
	n := 0
	for _, s := range c.Samples {
		if s.Side == side {
			if s.IsValid() {
				return false
			}
			n++
		}
	}
	return n > 0
}
