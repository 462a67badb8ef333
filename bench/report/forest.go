package report

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"math"

	"github.com/berkcansavur/relaybus/bench/compare"
	"github.com/berkcansavur/relaybus/bench/result"
)

// SummaryFile is the run's summary plot, the first picture of report.md.
const SummaryFile = "summary.svg"

// Geometry of the summary plot (SVG user units).
const (
	fpLabelW  = 430 // the row's cell and metric
	fpAxisW   = 360 // the ratio axis, or a difference's own scale
	fpValueW  = 300 // the change and the verdict as text
	fpRowH    = 17
	fpMargin  = 12
	fpHeaderH = 64
	fpMinLog  = 0.05
	fpMaxLog  = 20.0
)

// verdictColors colour a row by its verdict.
var verdictColors = map[string]string{
	compare.VerdictBetter: "#1a9850", compare.VerdictWorse: "#d73027", compare.VerdictSame: "#555555",
	compare.VerdictTooFew: "#bbbbbb", compare.VerdictNoValues: "#bbbbbb",
}

// forestRow is one (cell, metric) of the summary plot.
type forestRow struct {
	label, value string
	cmp          *compare.Comparison
	invalidBase  string // "INVALID base: 2 of 4 windows" or ""
}

// SummaryPlot draws every (cell, metric) comparison of a as one row of a
// forest plot: the candidate/base ratio with its 95% interval on a log
// axis shared by all rows, or, for metrics that can be 0, the difference
// candidate - base with its interval on a scale of its own (a difference
// has its metric's unit: rows cannot share an axis), each coloured by its
// verdict. Cells with INVALID base windows come first and are marked.
// ok is false when there is nothing to draw.
func SummaryPlot(a *compare.Analysis) ([]byte, bool, error) {
	if a == nil || a.Run == nil {
		return nil, false, nil
	}
	rows := forestRows(a)
	if len(rows) == 0 {
		return nil, false, nil
	}
	lo, hi := logRange(rows)
	width := fpMargin*2 + fpLabelW + fpAxisW + fpValueW
	height := fpMargin*2 + fpHeaderH + len(rows)*fpRowH + 30
	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="DejaVu Sans, Helvetica, Arial, sans-serif" font-size="11">`+"\n",
		width, height, width, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	svgText(&b, fpMargin, fpMargin+12, "bold", "13", "start", fmt.Sprintf("%s vs %s: every (cell, metric), candidate against base, %.0f%% intervals",
		a.Run.Base.Ref, a.Run.Candidate.Ref, 100*a.Settings.Confidence))
	// The legend has a line of its own, above the rows.
	x := fpMargin
	for _, v := range []string{compare.VerdictBetter, compare.VerdictWorse, compare.VerdictSame, compare.VerdictTooFew} {
		fmt.Fprintf(&b, `<circle cx="%d" cy="%d" r="4" fill="%s"/>`+"\n", x+4, fpMargin+28, verdictColors[v])
		svgText(&b, x+12, fpMargin+32, "", "", "start", v)
		x += 30 + 7*len(v)
	}
	svgText(&b, x+10, fpMargin+32, "", "", "start", "ratio: log axis, 1 = no change; difference (metrics that can be 0): its own scale, 0 = no change")
	axisX := fpMargin + fpLabelW
	top := fpMargin + fpHeaderH
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
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s"/>`+"\n", tx, top-6, tx, top+len(rows)*fpRowH, stroke)
		svgText(&b, int(tx), top-9, "", "10", "middle", fmt.Sprintf("%gx", t))
	}
	for i, r := range rows {
		y := top + i*fpRowH
		if i%2 == 0 {
			fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="#f6f6f6"/>`+"\n", fpMargin, y, width-2*fpMargin, fpRowH)
		}
		cy := y + fpRowH/2
		label := r.label
		if r.invalidBase != "" {
			svgText(&b, fpMargin+2, cy+4, "bold", "", "start", "!")
			fmt.Fprintf(&b, `<title>%s</title>`, xmlEscape(r.invalidBase))
		}
		svgText(&b, fpMargin+12, cy+4, "", "", "start", shorten(label, 70))
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
		svgText(&b, axisX+fpAxisW+10, cy+4, "", "", "start", shorten(r.value, 48))
	}
	y := top + len(rows)*fpRowH + 18
	svgText(&b, fpMargin, y, "", "10", "start", "! marks a cell with INVALID base windows (listed first: not held against the candidate). "+
		"A line is the interval, a dot the ratio of medians, a square the difference of medians; an interval the samples cannot close runs to the edge.")
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
		r := forestRow{label: fmt.Sprintf("%s: %s | %s", c.Cell.Scenario, c.Cell.Name, c.Metric.Title), cmp: c,
			value: compare.FormatComparison(c)}
		if ib, ok := invalidBase[c.Cell]; ok {
			r.invalidBase = fmt.Sprintf("INVALID base: %d of %d windows", ib[0], ib[1])
			r.label = fmt.Sprintf("[INVALID base %d/%d] %s", ib[0], ib[1], r.label)
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

func shorten(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-3]) + "..."
	}
	return s
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
