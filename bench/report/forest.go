package report

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"math"
	"strings"

	"github.com/berkcansavur/relaybus/bench/compare"
	"github.com/berkcansavur/relaybus/bench/result"
)

// SummaryFile is the run's summary plot: every (cell, metric), the
// picture report.md shows after the headline (HeadlineFile).
const SummaryFile = "summary.svg"

// Geometry of the summary plot (SVG user units). Text is measured with
// fpCharW, a bound on the mean advance of DejaVu Sans at 11 px (about 6.1
// for this text), so that a column sized for n characters holds them.
const (
	fpCharW    = 6.6
	fpAxisW    = 360 // the ratio axis, or a difference's own scale
	fpRowH     = 17  // a metric's row
	fpHeadH    = 15  // a line of a cell's heading
	fpMargin   = 12
	fpHeaderH  = 78
	fpMinLabel = 170 // the metric column, at least
	fpMinValue = 300 // the change and verdict column, at least
	fpMinLog   = 0.05
	fpMaxLog   = 20.0
)

// verdictColors colour a row by its verdict.
var verdictColors = map[string]string{
	compare.VerdictBetter: "#1a9850", compare.VerdictWorse: "#d73027", compare.VerdictSame: "#555555",
	compare.VerdictTooFew: "#bbbbbb", compare.VerdictNoValues: "#bbbbbb",
}

// forestRow is one (cell, metric) of the summary plot: cell is the
// cell's heading (scenario and name, whole), label the metric's title.
type forestRow struct {
	cell, label, value string
	cmp                *compare.Comparison
	invalidBase        string // "INVALID base: 2 of 4 windows" or ""
}

// textW is the width fpCharW gives s.
func textW(s string) int { return int(math.Ceil(float64(len([]rune(s))) * fpCharW)) }

// wrap breaks s into lines of at most n characters at spaces (a word
// longer than n stands alone on its line): nothing is cut.
func wrap(s string, n int) []string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(s) {
		switch {
		case line == "":
			line = w
		case len([]rune(line))+1+len([]rune(w)) <= n:
			line += " " + w
		default:
			lines = append(lines, line)
			line = w
		}
	}
	if line != "" {
		lines = append(lines, line)
	}
	return lines
}

// SummaryPlot draws every (cell, metric) comparison of a as a forest
// plot grouped by cell: each cell's name whole as a heading (wrapped, never
// cut), then a row per metric with the candidate/base ratio and its 95%
// interval on a log axis shared by all rows, or, for metrics that can be
// 0, the difference candidate - base with its interval on a scale of its
// own (a difference has its metric's unit: rows cannot share an axis),
// each coloured by its verdict. Cells with INVALID base windows come first
// and are marked. The columns are as wide as their longest text, and the
// header and footer are wrapped to the picture's width. ok is false when
// there is nothing to draw.
func SummaryPlot(a *compare.Analysis) ([]byte, bool, error) {
	if a == nil || a.Run == nil {
		return nil, false, nil
	}
	rows := forestRows(a)
	if len(rows) == 0 {
		return nil, false, nil
	}
	lo, hi := logRange(rows)
	labelW, valueW := fpMinLabel, fpMinValue
	for _, r := range rows {
		labelW = max(labelW, textW(r.label)+24)
		valueW = max(valueW, textW(r.value)+14)
	}
	width := fpMargin*2 + labelW + fpAxisW + valueW
	chars := int(float64(width-2*fpMargin-16) / fpCharW) // a full-width line
	// The cells' headings, wrapped, and the plot's height.
	headings := map[int][]string{}
	height := fpMargin*2 + fpHeaderH
	for i, r := range rows {
		if i == 0 || r.cell != rows[i-1].cell {
			text := r.cell
			if r.invalidBase != "" {
				text = "! " + text + " (" + r.invalidBase + ": not held against the candidate)"
			}
			headings[i] = wrap(text, chars)
			height += len(headings[i])*fpHeadH + 6
		}
		height += fpRowH
	}
	footer := wrap("! marks a cell with INVALID base windows (listed first: not held against the candidate). "+
		"A line is the interval, a dot the ratio of medians, a square the difference of medians; an interval the samples cannot close runs to the edge.", chars)
	height += 14 + len(footer)*13
	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="DejaVu Sans, Helvetica, Arial, sans-serif" font-size="11">`+"\n",
		width, height, width, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	title := fmt.Sprintf("%s vs %s: every (cell, metric), candidate against base, %.0f%% intervals", a.Run.Base.Ref, a.Run.Candidate.Ref, 100*a.Settings.Confidence)
	for i, line := range wrap(title, int(float64(chars)*fpCharW/7.6)) { // 13 px bold
		svgText(&b, fpMargin, fpMargin+12+i*16, "bold", "13", "start", line)
	}
	// The legend has lines of its own, above the rows.
	x := fpMargin
	for _, v := range []string{compare.VerdictBetter, compare.VerdictWorse, compare.VerdictSame, compare.VerdictTooFew} {
		fmt.Fprintf(&b, `<circle cx="%d" cy="%d" r="4" fill="%s"/>`+"\n", x+4, fpMargin+36, verdictColors[v])
		svgText(&b, x+12, fpMargin+40, "", "", "start", v)
		x += 24 + textW(v)
	}
	svgText(&b, fpMargin, fpMargin+56, "", "", "start", "ratio: log axis, 1 = no change; difference (metrics that can be 0): its own scale, 0 = no change")
	axisX := fpMargin + labelW
	top := fpMargin + fpHeaderH
	bottom := height - fpMargin - 14 - len(footer)*13
	scale := func(v float64) float64 {
		v = math.Min(math.Max(v, lo), hi)
		return float64(axisX) + (math.Log(v)-math.Log(lo))/(math.Log(hi)-math.Log(lo))*float64(fpAxisW)
	}
	// Ticks of the log axis and the line of no change.
	for _, t := range []float64{0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20} {
		if t < lo || t > hi {
			continue
		}
		tx := scale(t)
		stroke := "#e0e0e0"
		if t == 1 {
			stroke = "#888888"
		}
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s"/>`+"\n", tx, top-6, tx, bottom, stroke)
		svgText(&b, int(tx), top-9, "", "10", "middle", fmt.Sprintf("%gx", t))
	}
	y := top
	for i, r := range rows {
		if lines, ok := headings[i]; ok {
			y += 6
			fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="#e8eef6"/>`+"\n", fpMargin, y, width-2*fpMargin, len(lines)*fpHeadH)
			for k, line := range lines {
				svgText(&b, fpMargin+4, y+11+k*fpHeadH, "bold", "", "start", line)
			}
			if r.invalidBase != "" {
				fmt.Fprintf(&b, `<title>%s</title>`, xmlEscape(r.invalidBase))
			}
			y += len(lines) * fpHeadH
		}
		cy := y + fpRowH/2
		svgText(&b, fpMargin+16, cy+4, "", "", "start", r.label)
		color := verdictColors[r.cmp.Verdict]
		if color == "" {
			color = "#bbbbbb"
		}
		c := r.cmp
		switch {
		case !c.Difference && !math.IsNaN(c.Ratio):
			l, h := c.RatioLow, c.RatioHigh
			if !math.IsNaN(l) && !math.IsNaN(h) {
				fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s" stroke-width="2"/>`+"\n", scale(l), cy, scale(h), cy, color)
			}
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%d" r="4" fill="%s"/>`+"\n", scale(c.Ratio), cy, color)
		case c.Difference && !math.IsNaN(c.Diff):
			// A scale of its own, centred on 0, wide enough for the
			// interval; a dashed line marks 0.
			span := math.Max(math.Abs(c.Diff), 1e-12)
			for _, v := range []float64{c.DiffLow, c.DiffHigh} {
				if !math.IsNaN(v) && !math.IsInf(v, 0) {
					span = math.Max(span, math.Abs(v))
				}
			}
			mid := float64(axisX) + float64(fpAxisW)/2
			dx := func(v float64) float64 {
				if math.IsInf(v, 0) || math.IsNaN(v) {
					v = math.Copysign(span, v)
				}
				return mid + v/span*float64(fpAxisW)/2*0.9
			}
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#888888" stroke-dasharray="2 2"/>`+"\n", mid, y+1, mid, y+fpRowH-1)
			if !math.IsNaN(c.DiffLow) && !math.IsNaN(c.DiffHigh) {
				fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s" stroke-width="2"/>`+"\n", dx(c.DiffLow), cy, dx(c.DiffHigh), cy, color)
			}
			fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="7" height="7" fill="%s"/>`+"\n", dx(c.Diff)-3.5, cy-3, color)
		}
		svgText(&b, axisX+fpAxisW+10, cy+4, "", "", "start", r.value)
		y += fpRowH
	}
	y += 14
	for k, line := range footer {
		svgText(&b, fpMargin, y+k*13, "", "10", "start", line)
	}
	b.WriteString("</svg>\n")
	return b.Bytes(), true, nil
}

// forestRows lists the comparisons, cells with INVALID base windows first.
func forestRows(a *compare.Analysis) []forestRow {
	invalidBase := map[*result.Cell][2]int{}
	for _, c := range a.Run.Cells {
		bad, n := 0, 0
		for _, s := range c.Samples {
			if s.Side == result.SideBase {
				n++
				if !s.IsValid() {
					bad++
				}
			}
		}
		if bad > 0 {
			invalidBase[c] = [2]int{bad, n}
		}
	}
	var first, rest []forestRow
	for _, c := range a.Comparisons {
		if notMeasured(c.Cell, c.Metric.Name) {
			continue
		}
		r := forestRow{cell: fmt.Sprintf("%s: %s", c.Cell.Scenario, c.Cell.Name), label: c.Metric.Title, cmp: c,
			value: compare.FormatComparison(c)}
		if ib, ok := invalidBase[c.Cell]; ok {
			r.invalidBase = fmt.Sprintf("INVALID base: %d of %d windows", ib[0], ib[1])
			first = append(first, r)
			continue
		}
		rest = append(rest, r)
	}
	return append(first, rest...)
}

// logRange is the ratio axis: every finite ratio and interval bound, with
// room, within [fpMinLog, fpMaxLog], and at least [0.5, 2].
func logRange(rows []forestRow) (lo, hi float64) {
	lo, hi = 0.5, 2
	for _, r := range rows {
		c := r.cmp
		if c.Difference {
			continue
		}
		for _, v := range []float64{c.Ratio, c.RatioLow, c.RatioHigh} {
			if v > 0 && !math.IsInf(v, 0) && !math.IsNaN(v) {
				lo, hi = math.Min(lo, v/1.2), math.Max(hi, v*1.2)
			}
		}
	}
	return math.Max(lo, fpMinLog), math.Min(hi, fpMaxLog)
}

func svgText(b *bytes.Buffer, x, y int, weight, size, anchor, s string) {
	attrs := ""
	if weight != "" {
		attrs += ` font-weight="` + weight + `"`
	}
	if size != "" {
		attrs += ` font-size="` + size + `"`
	}
	if anchor != "" && anchor != "start" {
		attrs += ` text-anchor="` + anchor + `"`
	}
	fmt.Fprintf(b, `<text x="%d" y="%d"%s>%s</text>`+"\n", x, y, attrs, xmlEscape(s))
}

func xmlEscape(s string) string {
	var b bytes.Buffer
	xml.EscapeText(&b, []byte(s))
	return b.String()
}
