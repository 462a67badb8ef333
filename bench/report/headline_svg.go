package report

import (
	"bytes"
	"fmt"
	"math"
	"strings"

	"github.com/berkcansavur/relaybus/bench/compare"
)

// Drawing the headline picture (headline.go holds what it shows).

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
