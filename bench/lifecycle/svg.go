package lifecycle

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"slices"
	"strings"
)

// Geometry of the drawing, in SVG user units (pixels).
const (
	svgMargin     = 16
	svgPanelGap   = 24
	svgLabelWidth = 190 // index names
	svgBoxWidth   = 134
	svgBoxHeight  = 58
	svgBoxGap     = 46 // room for an arrow between versions
	svgRow        = 18 // one index row, one text line
	svgFont       = "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\""
)

// stepColors fill a row version by the step of the transaction that made it.
var stepColors = map[string]string{
	StepSetup: "#d9d9d9", StepPublish: "#9ecae1", StepClaim: "#fdae6b", StepComplete: "#a1d99b", StepStop: "#bcbddc",
}

// SVG draws each report as a panel, side by side: the row versions of the
// deliveries table (one box each, coloured by the step that made it, solid
// when live and dashed when dead, arrows along t_ctid: "HOT" where the
// update was heap-only), under them one row per index with a dot for each
// entry, in the column of the version it points at (hollow: marked dead by
// a scan), then the versions of each lane row written, and the tuple
// counters.
func SVG(rs []*Report) ([]byte, error) {
	if len(rs) == 0 {
		return nil, fmt.Errorf("lifecycle: nothing to draw")
	}
	panels := make([]*bytes.Buffer, len(rs))
	widths, heights := make([]int, len(rs)), make([]int, len(rs))
	for i, r := range rs {
		panels[i] = &bytes.Buffer{}
		widths[i], heights[i] = drawPanel(panels[i], r)
	}
	legendH := 2 * svgRow
	total := svgMargin*2 + svgPanelGap*(len(rs)-1)
	for _, w := range widths {
		total += w
	}
	height := svgMargin*2 + legendH + slices.Max(heights)
	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" %s font-size="12">`+"\n",
		total, height, total, height, svgFont)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", total, height)
	b.WriteString(`<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse">` +
		`<path d="M 0 0 L 10 5 L 0 10 z" fill="#333"/></marker></defs>` + "\n")
	drawLegend(&b, svgMargin, svgMargin+12)
	x := svgMargin
	for i := range rs {
		fmt.Fprintf(&b, `<g transform="translate(%d,%d)">`+"\n", x, svgMargin+legendH)
		b.Write(panels[i].Bytes())
		b.WriteString("</g>\n")
		x += widths[i] + svgPanelGap
	}
	b.WriteString("</svg>\n")
	return b.Bytes(), nil
}

func drawLegend(b *bytes.Buffer, x, y int) {
	text(b, x, y, "bold", "", "row version made by the step:")
	x += 235
	for _, st := range Steps {
		fmt.Fprintf(b, `<rect x="%d" y="%d" width="14" height="12" fill="%s" stroke="#333"/>`+"\n", x, y-10, stepColors[st])
		text(b, x+18, y, "", "", st)
		x += 30 + 7*len(st)
	}
	fmt.Fprintf(b, `<rect x="%d" y="%d" width="22" height="12" fill="white" stroke="#333"/>`+"\n", x, y-10)
	text(b, x+26, y, "", "", "live")
	x += 60
	fmt.Fprintf(b, `<rect x="%d" y="%d" width="22" height="12" fill="white" stroke="#333" stroke-dasharray="4 3"/>`+"\n", x, y-10)
	text(b, x+26, y, "", "", "dead")
	x += 60
	fmt.Fprintf(b, `<circle cx="%d" cy="%d" r="5" fill="#333"/>`+"\n", x+5, y-4)
	text(b, x+14, y, "", "", "index entry")
	x += 90
	fmt.Fprintf(b, `<circle cx="%d" cy="%d" r="5" fill="white" stroke="#333"/>`+"\n", x+5, y-4)
	text(b, x+14, y, "", "", "entry marked dead by a scan")
}

// drawPanel draws one report at (0, 0) and returns its size.
func drawPanel(b *bytes.Buffer, r *Report) (width, height int) {
	var versions []Tuple
	for _, t := range r.Deliveries {
		if t.State == "normal" {
			versions = append(versions, t)
		}
	}
	laneCols := 0
	for _, l := range r.Lanes {
		laneCols = max(laneCols, len(l.Versions))
	}
	cols := max(len(versions), laneCols, 1)
	width = svgLabelWidth + cols*(svgBoxWidth+svgBoxGap) + 40
	y := 14
	text(b, 0, y, "bold", "14", fmt.Sprintf("%s (%s), relaybus %s", r.Ref, short(r.SHA), r.Version))
	y += svgRow
	text(b, 0, y, "", "", fmt.Sprintf("%d heap tuple(s), %d dead; %d index entries (%s)",
		r.Summary.HeapTuples, r.Summary.Dead, r.Summary.IndexEntries, byStep(r.Summary.EntriesBy)))
	y += svgRow + 8

	text(b, 0, y, "bold", "", "heap of "+TableDeliveries)
	y += 8
	colX := func(i int) int { return svgLabelWidth + i*(svgBoxWidth+svgBoxGap) }
	y = drawChain(b, versions, colX, y)
	y += 10

	text(b, 0, y+4, "bold", "", fmt.Sprintf("indexes: %d, entries: %d", len(r.Indexes), r.Summary.IndexEntries))
	y += svgRow
	col := map[string]int{}
	for i, t := range versions {
		col[t.TID] = i
	}
	for i, ix := range r.Indexes {
		if i%2 == 0 {
			fmt.Fprintf(b, `<rect x="0" y="%d" width="%d" height="%d" fill="#f4f4f4"/>`+"\n", y-13, width-10, svgRow)
		}
		text(b, 4, y, "", "", strings.TrimPrefix(ix.Name, TableDeliveries+"_"))
		counts := map[string]int{}
		for _, t := range ix.TIDs {
			counts[t]++
		}
		deadTIDs := map[string]bool{}
		for _, t := range ix.DeadTIDs {
			deadTIDs[t] = true
		}
		for t, n := range counts {
			c, ok := col[t]
			if !ok {
				continue
			}
			cx := colX(c) + svgBoxWidth/2
			fill := "#333"
			if deadTIDs[t] {
				fill = "white"
			}
			fmt.Fprintf(b, `<circle cx="%d" cy="%d" r="5" fill="%s" stroke="#333"/>`+"\n", cx, y-4, fill)
			if n > 1 {
				text(b, cx+8, y, "", "10", fmt.Sprintf("x%d", n))
			}
		}
		label := fmt.Sprint(len(ix.TIDs))
		if ix.Unread != "" {
			label = "not read"
		}
		text(b, width-30, y, "", "", label)
		y += svgRow
	}
	y += 10

	switch {
	case !r.HasLanes:
		text(b, 0, y, "", "", "no "+TableLanes+" table: the lease lives on the delivery row")
		y += svgRow
	case len(r.Lanes) == 0:
		text(b, 0, y, "", "", "no lane row written after the setup")
		y += svgRow
	}
	for _, l := range r.Lanes {
		text(b, 0, y, "bold", "", fmt.Sprintf("lane %d (%s): versions of that row", l.Lane, TableLanes))
		y += 8
		y = drawChain(b, l.Versions, colX, y)
		y += 10
	}

	text(b, 0, y, "bold", "", "tuple counters (pg_stat_user_tables)")
	y += svgRow
	for _, c := range r.Counters {
		text(b, 4, y, "", "", fmt.Sprintf("%s ins %d, upd %d (HOT %d), del %d", c.Table, c.Inserted, c.Updated, c.HotUpdated, c.Deleted))
		y += svgRow
	}
	return width, y
}

// drawChain draws versions as boxes in columns and arrows along t_ctid.
func drawChain(b *bytes.Buffer, versions []Tuple, colX func(int) int, y int) int {
	col := map[string]int{}
	for i, t := range versions {
		col[t.TID] = i
	}
	for i, t := range versions {
		x := colX(i)
		dash := ""
		if !t.Live {
			dash = ` stroke-dasharray="5 3"`
		}
		fill := stepColors[t.Step]
		if fill == "" {
			fill = "white"
		}
		fmt.Fprintf(b, `<rect x="%d" y="%d" width="%d" height="%d" rx="4" fill="%s" stroke="#333" stroke-width="1.5"%s/>`+"\n",
			x, y, svgBoxWidth, svgBoxHeight, fill, dash)
		state := "dead"
		if t.Live {
			state = "live"
		}
		text(b, x+6, y+15, "bold", "", t.TID+" "+state)
		text(b, x+6, y+30, "", "11", fmt.Sprintf("xmin %d %s", t.Xmin, t.Step))
		xmax := "xmax 0"
		if t.Xmax != 0 {
			xmax = fmt.Sprintf("xmax %d %s", t.Xmax, t.XmaxStep)
			if strings.Contains(t.Flags, "XMAX_LOCK_ONLY") {
				xmax += " (lock)"
			}
		}
		text(b, x+6, y+44, "", "11", xmax)
		var chain []string
		if strings.Contains(t.Flags, "HOT_UPDATED") {
			chain = append(chain, "HOT upd")
		}
		if strings.Contains(t.Flags, "HEAP_ONLY") {
			chain = append(chain, "heap-only")
		}
		if len(chain) > 0 {
			text(b, x+6, y+55, "", "10", strings.Join(chain, ", "))
		}
		if next, ok := col[t.Ctid]; ok && t.Ctid != t.TID {
			x1, x2 := x+svgBoxWidth, colX(next)
			label := "update"
			if strings.Contains(t.Flags, "HOT_UPDATED") {
				label = "HOT"
			}
			if next == i+1 {
				fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#333" stroke-width="1.5" marker-end="url(#arrow)"/>`+"\n",
					x1, y+svgBoxHeight/2, x2-1, y+svgBoxHeight/2)
				text(b, x1+4, y+svgBoxHeight/2-6, "", "10", label)
			} else {
				// Not the next column: an arc over the boxes.
				fmt.Fprintf(b, `<path d="M %d %d C %d %d, %d %d, %d %d" fill="none" stroke="#333" stroke-width="1.5" marker-end="url(#arrow)"/>`+"\n",
					x+svgBoxWidth/2, y, x+svgBoxWidth/2, y-20, x2+svgBoxWidth/2, y-20, x2+svgBoxWidth/2, y)
			}
		} else if !t.Live && t.Xmax != 0 && !strings.Contains(t.Flags, "XMAX_LOCK_ONLY") {
			text(b, x+svgBoxWidth+4, y+svgBoxHeight/2+4, "", "10", "deleted")
		}
	}
	return y + svgBoxHeight + 8
}

// text writes one SVG text element; weight and size may be empty.
func text(b *bytes.Buffer, x, y int, weight, size, s string) {
	attrs := ""
	if weight != "" {
		attrs += ` font-weight="` + weight + `"`
	}
	if size != "" {
		attrs += ` font-size="` + size + `"`
	}
	fmt.Fprintf(b, `<text x="%d" y="%d"%s>`, x, y, attrs)
	xml.EscapeText(b, []byte(s))
	b.WriteString("</text>\n")
}
