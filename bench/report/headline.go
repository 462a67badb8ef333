package report

import (
	"fmt"
	"math"
	"strings"

	"github.com/berkcansavur/relaybus/bench/compare"
	"github.com/berkcansavur/relaybus/bench/result"
)

// HeadlineFile is the run's headline picture, the first picture of
// report.md: per cell, is the candidate faster, leaner, still exact?
const HeadlineFile = "headline.svg"

// Geometry of the headline picture (SVG user units), with fpCharW as the
// width of a character (forest.go).
const (
	hlLineH    = 14  // a line of text
	hlRowPad   = 8   // above and below a row's text
	hlMarkerH  = 16  // the strip of a row's interval
	hlGap      = 20  // between columns
	hlCellW    = 270 // the cell column's text
	hlMinCol   = 230 // a metric column, at least
	hlMinValid = 170 // the validity column, at least
	// hlMaxValidW: a validity line wider than this wraps.
	hlMaxValidW  = 270
	hlVerdictSep = 6 // between a change and its verdict
	hlPad        = 8 // inside a column
)

// A headline column: the question it answers and the metrics that stand
// for it, the first a cell has (a publish cell dispatches nothing: its
// throughput is events/s and its WAL per event).
type headlineColumn struct {
	key, short    string // the row's data-metric, the answer line's name
	title         string
	metrics       []string
	better, worse string // what the verdicts say in this column's words
}

var headlineColumns = []headlineColumn{
	{key: "throughput", short: "throughput", title: "faster? throughput",
		metrics: []string{result.MetricDeliveriesPerS, result.MetricEventsPerS, result.MetricAchievedPerS},
		better:  "faster", worse: "slower"},
	{key: "wal", short: "WAL", title: "leaner? WAL bytes per delivery (per event in a publish cell)",
		metrics: []string{result.MetricWALBytesPerDelivery, result.MetricWALBytesPerEvent},
		better:  "less WAL", worse: "more WAL"},
	{key: "latency", short: "end-to-end p99", title: "end-to-end p99: commit to handler",
		metrics: []string{result.MetricE2EP99Ms},
		better:  "lower", worse: "higher"},
}

// headlineEntry is one (cell, column): a comparison to draw, or a gap
// that says why there is none ("not measured", never a zero).
type headlineEntry struct {
	cmp        *compare.Comparison
	change     string   // "1.04x [0.95, 1.12]"
	verdict    string   // in the column's words
	medians    string   // "2,150 -> 3,420 deliveries/s"
	gap        string   // "not measured", "no VALID window to compare"
	gapWhy     []string // the reason, wrapped
	gapWhyText string
}

// headlineRow is one cell (or scenario 6, which has no comparison).
type headlineRow struct {
	heading  []string // "scenario: name", wrapped
	entries  []headlineEntry
	span     []string // scenario 6: one text across the metric columns
	validity []string // first line coloured by validColor
	valid    string   // "VALID", "INVALID", "base INVALID", "skipped"
}

var validColors = map[string]string{"VALID": "#1a9850", "INVALID": "#d73027", "base INVALID": "#b35806", "skipped": "#777777"}

// verdictWord says a comparison's verdict in col's words.
func (col headlineColumn) verdictWord(v string) string {
	switch v {
	case compare.VerdictBetter:
		return col.better
	case compare.VerdictWorse:
		return col.worse
	case compare.VerdictSame:
		return "no significant change"
	}
	return v
}

// metricOf is the metric of col that cell c has, "" when none.
func (col headlineColumn) metricOf(c *result.Cell) string {
	for _, m := range col.metrics {
		for _, s := range c.Samples {
			if _, ok := s.Metrics[m]; ok {
				return m
			}
		}
	}
	return ""
}

// notMeasuredWhy says why cell c has no metric of col.
func notMeasuredWhy(col headlineColumn, c *result.Cell) string {
	_, publishes := c.Config["publisher_procs"]
	_, dispatches := c.Config["instances"]
	switch {
	case col.key == "latency" && !publishes && dispatches:
		return "no event is committed in the window (a preloaded backlog)"
	case col.key == "latency" && !dispatches:
		return "nothing is handled in the window (publish only)"
	case col.key == "wal" && c.Store != "postgres":
		return "no WAL in a " + c.Store + " store"
	}
	return "neither side recorded it in this cell"
}

// headlineEntryOf is the entry of (c, col).
func headlineEntryOf(a *compare.Analysis, c *result.Cell, col headlineColumn) headlineEntry {
	m := col.metricOf(c)
	if m == "" {
		return headlineEntry{gap: "not measured", gapWhyText: notMeasuredWhy(col, c)}
	}
	if notMeasured(c, m) {
		return headlineEntry{gap: "not measured", gapWhyText: "crash recovery resets the counters it is read from"}
	}
	var cmp *compare.Comparison
	for _, x := range a.Comparisons {
		if x.Cell == c && x.Metric.Name == m {
			cmp = x
		}
	}
	if cmp == nil {
		return headlineEntry{gap: "not measured", gapWhyText: "no comparison of " + m}
	}
	if cmp.Verdict == compare.VerdictNoValues {
		// A side that never recorded the metric did not measure it (a
		// peer's tables, an older worker); a side that did, in windows
		// that are all INVALID, has nothing VALID to compare.
		recorded, windows, valid := map[string]bool{}, map[string]int{}, map[string]int{}
		for _, s := range c.Samples {
			windows[s.Side]++
			if s.IsValid() {
				valid[s.Side]++
			}
			if _, ok := s.Metrics[m]; ok {
				recorded[s.Side] = true
			}
		}
		for _, side := range []string{result.SideBase, result.SideCandidate} {
			if recorded[side] {
				continue
			}
			other, sum := result.SideCandidate, cmp.Candidate
			if side == result.SideCandidate {
				other, sum = result.SideBase, cmp.Base
			}
			why := fmt.Sprintf("%s only: %s %s", other, compare.FormatNumber(sum.Median), cmp.Metric.Title)
			if sum.N == 0 {
				why = fmt.Sprintf("%s only, in no VALID window", other)
			}
			return headlineEntry{cmp: cmp, gap: "not measured on the " + side + " side", gapWhyText: why}
		}
		var parts []string
		for _, side := range []string{result.SideBase, result.SideCandidate} {
			parts = append(parts, fmt.Sprintf("%s %d of %d windows VALID", side, valid[side], windows[side]))
		}
		return headlineEntry{cmp: cmp, gap: "no VALID window to compare", gapWhyText: strings.Join(parts, ", ")}
	}
	return headlineEntry{cmp: cmp, change: compare.FormatChange(cmp), verdict: col.verdictWord(cmp.Verdict),
		medians: compare.FormatNumber(cmp.Base.Median) + " -> " + compare.FormatNumber(cmp.Candidate.Median) + " " + cmp.Metric.Title}
}

// headlineValidity: the cell's verdict on exactness and its windows per
// side.
func headlineValidity(c *result.Cell) (string, []string) {
	n, bad := map[string]int{}, map[string]int{}
	for _, s := range c.Samples {
		n[s.Side]++
		if !s.IsValid() {
			bad[s.Side]++
		}
	}
	counts := fmt.Sprintf("base %d/%d, candidate %d/%d VALID", n[result.SideBase]-bad[result.SideBase], n[result.SideBase],
		n[result.SideCandidate]-bad[result.SideCandidate], n[result.SideCandidate])
	lines := []string{}
	verdict := "VALID"
	switch {
	case bad[result.SideCandidate] > 0:
		verdict = "INVALID"
		lines = append(lines, fmt.Sprintf("INVALID: %d candidate window(s)", bad[result.SideCandidate]))
	case bad[result.SideBase] > 0:
		verdict = "base INVALID"
		lines = append(lines, fmt.Sprintf("base INVALID in %d window(s)", bad[result.SideBase]))
	default:
		lines = append(lines, fmt.Sprintf("VALID: all %d windows", len(c.Samples)))
	}
	lines = append(lines, counts)
	if note := keyOrderNote(c); note != "" {
		lines = append(lines, strings.TrimSpace(note))
	}
	return verdict, lines
}

// headlineRows lays out every cell of a, in run order, then scenario 6.
func headlineRows(a *compare.Analysis, colW []int, validW int) []headlineRow {
	inner := func(w int) int { return w - 2*hlPad }
	var rows []headlineRow
	for _, c := range a.Run.Cells {
		r := headlineRow{heading: wrapWidth(c.Scenario+": "+c.Name, hlCellW, true)}
		for i, col := range headlineColumns {
			e := headlineEntryOf(a, c, col)
			if e.gap != "" {
				e.gapWhy = wrapWidth(e.gapWhyText, inner(colW[i]), false)
			}
			r.entries = append(r.entries, e)
		}
		var lines []string
		r.valid, lines = headlineValidity(c)
		for k, l := range lines {
			r.validity = append(r.validity, wrapWidth(l, inner(validW), k == 0)...)
		}
		rows = append(rows, r)
	}
	if u := a.Run.Upgrade; u != nil {
		r := headlineRow{heading: wrapWidth("upgrade (scenario 6): "+a.Run.Base.Ref+" -> "+a.Run.Candidate.Ref+", in place", hlCellW, true)}
		span := "one run (no ABBA): nothing to compare"
		switch {
		case u.Skipped != "":
			r.valid = "skipped"
			r.validity = wrapWidth("skipped: "+u.Skipped, inner(validW), true)
		case u.IsValid():
			r.valid = "VALID"
			r.validity = []string{"VALID: the upgraded store", "delivered every event"}
			if s, ok := u.Metrics[result.UpgradeSeconds]; ok {
				span += fmt.Sprintf("; the candidate's setup upgraded the database in %.2f s, %s WAL bytes", s, commas(u.Metrics[result.UpgradeWALBytes]))
			}
		default:
			r.valid = "INVALID"
			r.validity = wrapWidth("INVALID: "+UpgradeReason(u), inner(validW), true)
		}
		total := hlGap * (len(colW) - 1)
		for _, w := range colW {
			total += w
		}
		r.span = wrapWidth(span+" (report.md: Upgrade)", inner(total), false)
		rows = append(rows, r)
	}
	return rows
}

// height of a row: its tallest column.
func (r headlineRow) height() int {
	n := len(r.heading)
	n = max(n, len(r.validity))
	h := n * hlLineH
	for _, e := range r.entries {
		if e.gap != "" {
			h = max(h, (1+len(e.gapWhy))*hlLineH)
		} else {
			h = max(h, hlMarkerH+2*hlLineH)
		}
	}
	if len(r.span) > 0 {
		h = max(h, len(r.span)*hlLineH)
	}
	return h + 2*hlRowPad
}

// headlineAnswers are the picture's answer lines: per column, how many
// cells say what, and the candidate's validity over the run.
func headlineAnswers(a *compare.Analysis) []string {
	var out []string
	for _, col := range headlineColumns {
		counts := map[string]int{}
		for _, c := range a.Run.Cells {
			e := headlineEntryOf(a, c, col)
			switch {
			case e.gap == "no VALID window to compare":
				counts["no VALID window"]++
			case e.gap != "":
				counts["not measured"]++
			default:
				counts[e.verdict]++
			}
		}
		var parts []string
		for _, k := range []string{col.better, col.worse, "no significant change", compare.VerdictTooFew, "not measured", "no VALID window"} {
			if counts[k] > 0 {
				parts = append(parts, fmt.Sprintf("%s in %d", k, counts[k]))
			}
		}
		out = append(out, fmt.Sprintf("%s: %s (of %d cells)", col.short, strings.Join(parts, ", "), len(a.Run.Cells)))
	}
	n, bad := 0, 0
	for _, c := range a.Run.Cells {
		for _, s := range c.Samples {
			if s.Side == result.SideCandidate {
				n++
				if !s.IsValid() {
					bad++
				}
			}
		}
	}
	exact := fmt.Sprintf("still exact? every candidate window VALID (%d of %d)", n, n)
	if bad > 0 {
		exact = fmt.Sprintf("still exact? NO: %d of %d candidate windows INVALID (the run fails)", bad, n)
	}
	if u := a.Run.Upgrade; u != nil && u.Skipped == "" {
		if u.IsValid() {
			exact += "; the upgrade VALID"
		} else {
			exact += "; the upgrade INVALID (the run fails)"
		}
	}
	return append(out, exact)
}

// headlineRange is a column's log axis: its finite ratios and interval
// bounds, with room, within [fpMinLog, fpMaxLog], and at least [0.5, 2].
func headlineRange(rows []headlineRow, col int) (lo, hi float64) {
	lo, hi = 0.5, 2
	for _, r := range rows {
		if col >= len(r.entries) || r.entries[col].gap != "" {
			continue
		}
		c := r.entries[col].cmp
		if c.Difference {
			continue
		}
		for _, v := range []float64{c.Ratio, c.RatioLow, c.RatioHigh} {
			if v > 0 && !math.IsInf(v, 0) && !math.IsNaN(v) {
				lo, hi = math.Min(lo, v/1.15), math.Max(hi, v*1.15)
			}
		}
	}
	return math.Max(lo, fpMinLog), math.Min(hi, fpMaxLog)
}
