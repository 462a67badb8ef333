package compare

import (
	"math"
	"strconv"
	"strings"
)

// FormatNumber prints a value the way the seed's tables do: thousands
// separators for large values, fewer decimals as values grow.
func FormatNumber(v float64) string {
	switch {
	case math.IsNaN(v):
		return "-"
	case math.IsInf(v, 1):
		return "+inf"
	case math.IsInf(v, -1):
		return "-inf"
	}
	a := math.Abs(v)
	switch {
	case a >= 1000:
		s := strconv.FormatFloat(math.Round(a), 'f', 0, 64)
		var b strings.Builder
		if v < 0 {
			b.WriteByte('-')
		}
		for i, r := range s {
			if i > 0 && (len(s)-i)%3 == 0 {
				b.WriteByte(',')
			}
			b.WriteRune(r)
		}
		return b.String()
	case a >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

// FormatRatio prints a ratio with two decimals (one from 10 up).
func FormatRatio(v float64) string {
	switch {
	case math.IsNaN(v):
		return "-"
	case math.IsInf(v, 0):
		return FormatNumber(v)
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

// FormatChange: "0.73x [0.61, 0.88]" for a ratio, "+12 [-3, +30]" for
// a difference; the interval is left out when it is unbounded (too few
// samples), because then it says nothing.
func FormatChange(c *Comparison) string {
	if c.Difference {
		if math.IsNaN(c.Diff) {
			return "-"
		}
		s := formatSigned(c.Diff)
		if !math.IsNaN(c.DiffLow) && !math.IsInf(c.DiffLow, 0) && !math.IsInf(c.DiffHigh, 0) {
			s += " [" + formatSigned(c.DiffLow) + ", " + formatSigned(c.DiffHigh) + "]"
		}
		return s
	}
	if math.IsNaN(c.Ratio) {
		return "-"
	}
	s := FormatRatio(c.Ratio) + "x"
	if !math.IsNaN(c.RatioLow) && !math.IsInf(c.RatioLow, 0) && !math.IsInf(c.RatioHigh, 0) {
		s += " [" + FormatRatio(c.RatioLow) + ", " + FormatRatio(c.RatioHigh) + "]"
	}
	return s
}

// formatSigned is FormatNumber with a sign: "+12", "-0.50", "0".
func formatSigned(v float64) string {
	if v > 0 {
		return "+" + FormatNumber(v)
	}
	if v == 0 {
		return "0"
	}
	return FormatNumber(v)
}

// FormatVerdict: "worse (p=0.029)".
func FormatVerdict(c *Comparison) string {
	s := c.Verdict
	if !math.IsNaN(c.P) {
		s += " (p=" + strconv.FormatFloat(c.P, 'g', 2, 64) + ")"
	}
	return s
}

// FormatComparison: "2,165 -> 1,586 0.73x [0.61, 0.88] worse (p=0.029)".
func FormatComparison(c *Comparison) string {
	if c == nil {
		return ""
	}
	if c.Verdict == VerdictNoValues {
		if side := OneSide(c); side != "" {
			return FormatNumber(c.Base.Median) + " -> " + FormatNumber(c.Candidate.Median) + " (" + side + " only)"
		}
		return "no valid samples"
	}
	s := FormatNumber(c.Base.Median) + " -> " + FormatNumber(c.Candidate.Median)
	if ch := FormatChange(c); ch != "-" {
		s += " " + ch
	}
	return s + " " + FormatVerdict(c)
}

// OneSide names the side ("base" or "candidate") that alone has valid
// values of a metric nothing compares (a peer's table has no lanes, a
// store that deletes on completion updates no delivery row), "" when both
// or neither have some. Its median is worth showing: it says what that
// side did.
func OneSide(c *Comparison) string {
	switch {
	case c.Base.N > 0 && c.Candidate.N == 0:
		return "base"
	case c.Base.N == 0 && c.Candidate.N > 0:
		return "candidate"
	}
	return ""
}
