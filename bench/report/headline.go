package report

import (
	"bytes"
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

// HeadlinePlot draws the headline picture of a: a row per cell, its name
// whole (wrapped), and a column per headline question: throughput, WAL
// per delivery and end-to-end p99, each the candidate/base ratio with its
// 95% interval on a log axis of its own column, coloured and worded by
// its verdict, and the cell's validity. A metric a cell (or one side of
// it) does not have is a hatched gap that says "not measured" and why,
// never a zero. Scenario 6, when it ran, is the last row. ok is false
// when there is nothing to draw.
func HeadlinePlot(a *compare.Analysis) ([]byte, bool, error) {
	if a == nil || a.Run == nil || len(a.Run.Cells) == 0 {
		return nil, false, nil
	}
	// Each column is as wide as its longest text (a validity line wraps
	// past hlMaxValidW).
	colW := make([]int, len(headlineColumns))
	for i := range colW {
		colW[i] = hlMinCol
	}
	validW := hlMinValid
	for _, c := range a.Run.Cells {
		for i, col := range headlineColumns {
			e := headlineEntryOf(a, c, col)
			if e.gap != "" {
				colW[i] = max(colW[i], textWidth(e.gap, true)+2*hlPad)
				continue
			}
			colW[i] = max(colW[i], textWidth(e.change, false)+hlVerdictSep+textWidth(e.verdict, true)+2*hlPad,
				textWidth(e.medians, false)+2*hlPad)
		}
		_, lines := headlineValidity(c)
		for k, l := range lines {
			validW = max(validW, min(textWidth(l, k == 0), hlMaxValidW)+2*hlPad)
		}
	}
	rows := headlineRows(a, colW, validW)

	cellW := hlCellW + 2*hlPad
	width := 2*fpMargin + cellW + validW + hlGap*len(headlineColumns)
	for _, w := range colW {
		width += w
	}
	full := width - 2*fpMargin // a full-width line
	title := wrapWidth(fmt.Sprintf("%s vs %s: is the candidate faster, leaner, still exact?", a.Run.Base.Ref, a.Run.Candidate.Ref),
		full*11/13, true) // 13 px
	intro := wrapWidth(fmt.Sprintf("Per cell, the candidate against the base: a ratio candidate / base of medians (a dot) with its %.0f%% interval "+
		"(a line) on a log axis per column, 1x = no change, coloured and worded by its verdict (two-sided Mann-Whitney U, p < %.2g, "+
		"and the interval excludes 1x). Only VALID windows are compared. Every metric of every cell is in the next picture, "+
		"summary.svg, and in report.md's tables.", 100*a.Settings.Confidence, a.Settings.Alpha), full, false)
	var answerLines []string
	for _, s := range headlineAnswers(a) {
		answerLines = append(answerLines, wrapWidth(s, full, true)...)
	}
	footer := wrapWidth("A hatched box: nothing to compare there, and it says why: the metric is not measured in that cell or on one side of it "+
		"(a publish-only cell, a preloaded backlog, a peer's tables), or no window of a side is VALID; a gap is never drawn as a zero. "+
		"An interval the samples cannot close runs to the edge of its column; with too few samples no verdict is possible.", full*11/10, false) // 10 px
	heads := make([][]string, len(headlineColumns))
	headLines := 1
	for i, col := range headlineColumns {
		heads[i] = wrapWidth(col.title, colW[i]-2*hlPad, true)
		headLines = max(headLines, len(heads[i]))
	}

	// Vertical layout.
	y := fpMargin
	titleY := y + 13
	y += len(title)*17 + 4
	introY := y + 11
	y += len(intro)*hlLineH + 6
	answersY := y + 11
	y += len(answerLines)*hlLineH + 6
	legendY := y + 11
	y += hlLineH + 10
	headY := y + 11
	y += headLines*hlLineH + 2
	tickY := y + 10
	y += hlLineH + 2
	top := y
	for _, r := range rows {
		y += r.height()
	}
	bottom := y
	footerY := bottom + 16
	height := footerY + len(footer)*13 + fpMargin

	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="DejaVu Sans, Helvetica, Arial, sans-serif" font-size="11">`+"\n",
		width, height, width, height)
	b.WriteString(`<defs><pattern id="notmeasured" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)">` +
		`<rect width="6" height="6" fill="#f4f4f4"/><line x1="0" y1="0" x2="0" y2="6" stroke="#d0d0d0" stroke-width="2"/></pattern></defs>` + "\n")
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	for i, l := range title {
		svgText(&b, fpMargin, titleY+i*17, "bold", "13", "start", l)
	}
	for i, l := range intro {
		svgText(&b, fpMargin, introY+i*hlLineH, "", "", "start", l)
	}
	for i, l := range answerLines {
		svgText(&b, fpMargin, answersY+i*hlLineH, "bold", "", "start", l)
	}
	// The legend.
	x := fpMargin
	for _, v := range []string{compare.VerdictBetter, compare.VerdictWorse, compare.VerdictSame, compare.VerdictTooFew} {
		label := v
		if v == compare.VerdictSame {
			label = "no significant change"
		}
		fmt.Fprintf(&b, `<circle cx="%d" cy="%d" r="4" fill="%s"/>`+"\n", x+4, legendY-4, verdictColors[v])
		svgText(&b, x+12, legendY, "", "", "start", label)
		x += 28 + textWidth(label, false)
	}
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="18" height="11" fill="url(#notmeasured)" stroke="#bbbbbb"/>`+"\n", x, legendY-10)
	svgText(&b, x+24, legendY, "", "", "start", "not measured")

	// Columns: x of each, their headings, ticks and grid lines.
	colX := make([]int, len(headlineColumns))
	x = fpMargin + cellW + hlGap
	for i := range headlineColumns {
		colX[i] = x
		x += colW[i] + hlGap
	}
	validX := x
	svgText(&b, fpMargin+hlPad/2, headY, "bold", "", "start", "cell")
	svgText(&b, validX, headY, "bold", "", "start", "still exact? validity")
	scales := make([]func(float64) float64, len(headlineColumns))
	ticks := make([][]float64, len(headlineColumns))
	for i := range headlineColumns {
		for k, l := range heads[i] {
			svgText(&b, colX[i]+hlPad, headY+k*hlLineH, "bold", "", "start", l)
		}
		lo, hi := headlineRange(rows, i)
		left, right := float64(colX[i]+hlPad), float64(colX[i]+colW[i]-hlPad)
		scales[i] = func(v float64) float64 {
			v = math.Min(math.Max(v, lo), hi)
			return left + (math.Log(v)-math.Log(lo))/(math.Log(hi)-math.Log(lo))*(right-left)
		}
		lastLabelEnd := -1.0
		for _, t := range []float64{0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20} {
			if t < lo || t > hi {
				continue
			}
			ticks[i] = append(ticks[i], t)
			tx := scales[i](t)
			label := fmt.Sprintf("%gx", t)
			edgeL, edgeR := float64(colX[i]-hlGap/5), float64(colX[i]+colW[i]+hlGap/5)
			if half := float64(textWidth(label, false)*10/11) / 2; tx-half > lastLabelEnd+4 && tx-half >= edgeL && tx+half <= edgeR {
				svgText(&b, int(math.Round(tx)), tickY, "", "10", "middle", label)
				lastLabelEnd = tx + half
			}
		}
	}

	// The rows.
	y = top
	for ri, r := range rows {
		h := r.height()
		fmt.Fprintf(&b, `<g class="row" data-row="%d">`+"\n", ri)
		if ri%2 == 0 {
			fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="#f3f6fa"/>`+"\n", fpMargin, y, width-2*fpMargin, h)
		}
		for k, l := range r.heading {
			svgText(&b, fpMargin+hlPad/2, y+hlRowPad+11+k*hlLineH, "bold", "", "start", l)
		}
		if len(r.span) > 0 {
			for k, l := range r.span {
				svgText(&b, colX[0]+hlPad, y+hlRowPad+11+k*hlLineH, "", "", "start", l)
			}
		}
		for i, e := range r.entries {
			fmt.Fprintf(&b, `<g class="metric" data-metric="%s">`+"\n", headlineColumns[i].key)
			drawHeadlineEntry(&b, e, colX[i], colW[i], y, h, scales[i], ticks[i])
			b.WriteString("</g>\n")
		}
		for k, l := range r.validity {
			weight, fill := "", ""
			if k == 0 {
				weight = "bold"
				fill = validColors[r.valid]
			}
			svgTextFill(&b, validX, y+hlRowPad+11+k*hlLineH, weight, fill, l)
		}
		b.WriteString("</g>\n")
		y += h
	}
	for k, l := range footer {
		svgText(&b, fpMargin, footerY+k*13, "", "10", "start", l)
	}
	b.WriteString("</svg>\n")
	return b.Bytes(), true, nil
}

// drawHeadlineEntry draws one (cell, column) in the column at x, width w,
// of the row at y, height h: the interval, the change and the verdict, the
// medians; or the hatched gap with its reason.
func drawHeadlineEntry(b *bytes.Buffer, e headlineEntry, x, w, y, h int, scale func(float64) float64, ticks []float64) {
	if e.gap != "" {
		fmt.Fprintf(b, `<rect x="%d" y="%d" width="%d" height="%d" fill="url(#notmeasured)" stroke="#cccccc"/>`+"\n",
			x+2, y+3, w-4, h-6)
		svgTextFill(b, x+hlPad, y+hlRowPad+11, "bold", "#666666", e.gap)
		for k, l := range e.gapWhy {
			svgTextFill(b, x+hlPad, y+hlRowPad+11+(k+1)*hlLineH, "", "#666666", l)
		}
		return
	}
	c := e.cmp
	color := verdictColors[c.Verdict]
	if color == "" {
		color = "#bbbbbb"
	}
	cy := y + hlRowPad + hlMarkerH/2
	// The column's ticks, over the interval's strip only (lines through
	// the text below would cross it).
	for _, t := range ticks {
		stroke := "#dddddd"
		if t == 1 {
			stroke = "#888888"
		}
		fmt.Fprintf(b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s"/>`+"\n", scale(t), y+hlRowPad-3, scale(t), y+hlRowPad+hlMarkerH+3, stroke)
	}
	left, right := float64(x+hlPad), float64(x+w-hlPad)
	switch {
	case !c.Difference && !math.IsNaN(c.Ratio):
		if !math.IsNaN(c.RatioLow) && !math.IsNaN(c.RatioHigh) {
			fmt.Fprintf(b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s" stroke-width="3"/>`+"\n",
				scale(c.RatioLow), cy, scale(c.RatioHigh), cy, color)
		}
		fmt.Fprintf(b, `<circle cx="%.1f" cy="%d" r="5" fill="%s" stroke="white"/>`+"\n", scale(c.Ratio), cy, color)
	case c.Difference && !math.IsNaN(c.Diff):
		// A difference (a side at 0) has the metric's unit: a scale of
		// its own around the column's 1x line, wide enough for the
		// interval.
		mid := scale(1)
		room := math.Min(mid-left, right-mid)
		span := math.Max(math.Abs(c.Diff), 1e-12)
		for _, v := range []float64{c.DiffLow, c.DiffHigh} {
			if !math.IsNaN(v) && !math.IsInf(v, 0) {
				span = math.Max(span, math.Abs(v))
			}
		}
		dx := func(v float64) float64 {
			if math.IsInf(v, 0) || math.IsNaN(v) {
				v = math.Copysign(span, v)
			}
			return mid + v/span*room*0.9
		}
		if !math.IsNaN(c.DiffLow) && !math.IsNaN(c.DiffHigh) {
			fmt.Fprintf(b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s" stroke-width="3"/>`+"\n", dx(c.DiffLow), cy, dx(c.DiffHigh), cy, color)
		}
		fmt.Fprintf(b, `<rect x="%.1f" y="%d" width="9" height="9" fill="%s"/>`+"\n", dx(c.Diff)-4.5, cy-4, color)
	}
	ty := y + hlRowPad + hlMarkerH + 11
	svgText(b, x+hlPad, ty, "", "", "start", e.change)
	svgTextFill(b, x+hlPad+textWidth(e.change, false)+hlVerdictSep, ty, "bold", verdictTextColor(c.Verdict, color), e.verdict)
	svgTextFill(b, x+hlPad, ty+hlLineH, "", "#444444", e.medians)
}

// svgTextFill is svgText with a fill colour ("" for black).
func svgTextFill(b *bytes.Buffer, x, y int, weight, fill, s string) {
	attrs := ""
	if weight != "" {
		attrs += ` font-weight="` + weight + `"`
	}
	if fill != "" {
		attrs += ` fill="` + fill + `"`
	}
	fmt.Fprintf(b, `<text x="%d" y="%d"%s>%s</text>`+"\n", x, y, attrs, xmlEscape(s))
}

// verdictTextColor: a verdict's colour as text; the light grey of too few
// samples is too faint to read as text.
func verdictTextColor(v, color string) string {
	if v == compare.VerdictTooFew || v == compare.VerdictNoValues {
		return "#8c8c8c"
	}
	return color
}

// textWidth is the width of s at 11 px in DejaVu Sans, the font the
// pictures name first, from per-character advances rounded up (measured
// with rsvg-convert: lower-case letters about 6 px, digits 7, capitals 7
// to 10, bold about 12% wider), so that a column sized by it holds its
// text. (The summary plot's textW, a flat 6.6 px a character, is a bound
// for its mostly lower-case labels; the headline has capitals ("VALID",
// "INVALID", "WAL") and commits' SHAs.)
func textWidth(s string, bold bool) int {
	w := 0.0
	for _, r := range s {
		switch {
		case r == ' ':
			w += 3.6
		case r == 'm' || r == 'w':
			w += 9.8
		case r >= 'a' && r <= 'z':
			w += 6.2
		case r == 'M' || r == 'W':
			w += 10.5
		case r >= 'A' && r <= 'Z':
			w += 7.8
		case r >= '0' && r <= '9':
			w += 7.1
		case strings.ContainsRune(".,:;'()[]/|-!", r):
			w += 4.4
		case strings.ContainsRune("%@&#", r):
			w += 10.5
		default:
			w += 8
		}
	}
	if bold {
		w *= 1.13
	}
	return int(math.Ceil(w))
}

// wrapWidth breaks s into lines at most px wide (textWidth) at spaces; a
// word wider than a line (a commit's SHA) is broken over lines. Nothing
// is cut.
func wrapWidth(s string, px int, bold bool) []string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(s) {
		switch {
		case line == "":
		case textWidth(line+" "+w, bold) <= px:
			line += " " + w
			continue
		default:
			lines = append(lines, line)
		}
		line = ""
		r := []rune(w)
		for len(r) > 1 && textWidth(string(r), bold) > px {
			n := len(r) - 1
			for n > 1 && textWidth(string(r[:n]), bold) > px {
				n--
			}
			lines = append(lines, string(r[:n]))
			r = r[n:]
		}
		line = string(r)
	}
	if line != "" {
		lines = append(lines, line)
	}
	return lines
}
