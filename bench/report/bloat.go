package report

import (
	"fmt"
	"image/color"
	"io"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/berkcansavur/relaybus/bench/result"
	"github.com/berkcansavur/relaybus/bench/stats"
)

// The bloat cells' section (scenarios 8 and 9, bench/scenarios/bloat.go):
// for each group of held-snapshot cells, each side's cell with a hold
// against the same side's cell without it; for each bloat cell, the
// side's tables at the window's start and end; and plots over the
// window of the rate, the latency, the tables' size and their dead
// tuples.

// hasBloat reports whether any sample of c carries bloat data.
func hasBloat(c *result.Cell) bool {
	return slices.ContainsFunc(c.Samples, func(s *result.Sample) bool { return s.Bloat != nil })
}

// validBloat are the side's VALID samples of c that carry bloat data.
func validBloat(c *result.Cell, side string) []*result.Sample {
	var out []*result.Sample
	for _, s := range c.Samples {
		if s.Side == side && s.IsValid() && s.Bloat != nil {
			out = append(out, s)
		}
	}
	return out
}

// medianOf is the median of f over samples (ok false with none).
func medianOf(samples []*result.Sample, f func(*result.Sample) (float64, bool)) (float64, bool) {
	var xs []float64
	for _, s := range samples {
		if v, ok := f(s); ok {
			xs = append(xs, v)
		}
	}
	if len(xs) == 0 {
		return 0, false
	}
	return stats.Median(xs), true
}

func metricOf(name string) func(*result.Sample) (float64, bool) {
	return func(s *result.Sample) (float64, bool) {
		v, ok := s.Metrics[name]
		return v, ok
	}
}

// writeBloat writes the section into w, with the plots named (nothing
// when no cell of the run is a bloat cell).
func writeBloat(w io.Writer, r *result.Run, plots []string) {
	sideLabel := func(side string) string {
		if side == result.SideBase {
			return side + " (" + r.Base.Ref + ")"
		}
		return side + " (" + r.Candidate.Ref + ")"
	}
	var cells []*result.Cell
	for _, c := range r.Cells {
		if hasBloat(c) {
			cells = append(cells, c)
		}
	}
	if len(cells) == 0 {
		return
	}
	fmt.Fprintf(w, "## Held snapshot and soak\n\n")
	fmt.Fprintf(w, "Medians over each side's VALID windows. The first and last minute of a window are its first and last 60 s of steps, at most a quarter of them each (a 60 s window compares its first and last 15 s). A held snapshot is a session of the runner's, opened on the window database before the window and held until its end (REPEATABLE READ: a transaction that ran one query and stays open; long query: a `pg_sleep` statement that runs through the window); it held the database's xmin horizon when its backend_xmin was set at the window's start and end. Sizes are heap + indexes + TOAST of every table of the side (`pg_relation_size`, `pg_indexes_size`), dead tuples `n_dead_tup` (about a second behind). Autovacuum runs at the server's settings (see the database line above).\n\n")
	writeHoldRatios(w, cells, sideLabel)
	for _, c := range cells {
		writeBloatCell(w, c, sideLabel)
	}
	if len(plots) > 0 {
		fmt.Fprintf(w, "### Over the window\n\n")
		for _, p := range plots {
			fmt.Fprintf(w, "![%s](%s)\n", p, p)
		}
		fmt.Fprintln(w)
	}
}

// writeHoldRatios compares, per side, each held cell with the cell of
// its group (Config hold_group) that holds nothing.
func writeHoldRatios(w io.Writer, cells []*result.Cell, sideLabel func(string) string) {
	none := map[string]*result.Cell{}
	for _, c := range cells {
		if g, ok := c.Config["hold_group"].(string); ok && c.Config["hold"] == nil {
			none[g] = c
		}
	}
	var rows [][]string
	for _, c := range cells {
		g, _ := c.Config["hold_group"].(string)
		hold, _ := c.Config["hold"].(string)
		ref := none[g]
		if hold == "" || ref == nil {
			continue
		}
		for _, side := range []string{result.SideBase, result.SideCandidate} {
			with, without := validBloat(c, side), validBloat(ref, side)
			ratio := func(metric string) string {
				a, okA := medianOf(with, metricOf(metric))
				b, okB := medianOf(without, metricOf(metric))
				f := num
				if metric == result.MetricTableBytesGrowth {
					f = mib
				}
				switch {
				case !okA || !okB:
					return "n/a"
				case b == 0:
					return fmt.Sprintf("%s / 0", f(a))
				}
				return fmt.Sprintf("%.2fx (%s / %s)", a/b, f(a), f(b))
			}
			held := 0
			for _, s := range with {
				if s.Bloat.HoldXmin {
					held++
				}
			}
			rows = append(rows, []string{g, hold, sideLabel(side),
				fmt.Sprintf("%d/%d", held, len(with)),
				ratio(result.MetricDeliveriesPerS), ratio(result.MetricE2EP99Ms),
				ratio(result.MetricDeadTuplesMax), ratio(result.MetricTableBytesGrowth)})
		}
	}
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(w, "### With the snapshot held vs without (each side against itself)\n\n")
	fmt.Fprintf(w, "The issue's targets: deliveries/s at least 0.9x, e2e p99 (commit to handler, the claim's wait included) at most 2x, dead tuples bounded.\n\n")
	writeRows(w, []string{"cell", "hold", "side", "held xmin", "deliveries/s with/without", "e2e p99 with/without", "dead tuples max with/without", "table+index growth with/without"}, rows)
}

// writeBloatCell writes one bloat cell's tables at the start and end.
func writeBloatCell(w io.Writer, c *result.Cell, sideLabel func(string) string) {
	fmt.Fprintf(w, "### %s: %s (%s)\n\n", c.Scenario, c.Name, validity(c))
	var rows [][]string
	for _, side := range []string{result.SideBase, result.SideCandidate} {
		samples := validBloat(c, side)
		var names []string
		for _, s := range samples {
			for _, n := range s.Bloat.TableNames() {
				if !slices.Contains(names, n) {
					names = append(names, n)
				}
			}
		}
		slices.Sort(names)
		for _, name := range names {
			at := func(end bool, f func(result.TableSize) int64) func(*result.Sample) (float64, bool) {
				return func(s *result.Sample) (float64, bool) {
					pts := s.Bloat.Tables
					if len(pts) == 0 {
						return 0, false
					}
					p := pts[0]
					if end {
						p = pts[len(pts)-1]
					}
					t, ok := p.Tables[name]
					return float64(f(t)), ok
				}
			}
			cell := func(f func(result.TableSize) int64, bytes bool) string {
				a, okA := medianOf(samples, at(false, f))
				b, okB := medianOf(samples, at(true, f))
				if !okA || !okB {
					return "n/a"
				}
				if bytes {
					return fmt.Sprintf("%s → %s", mib(a), mib(b))
				}
				return fmt.Sprintf("%s → %s", num(a), num(b))
			}
			rows = append(rows, []string{sideLabel(side), name,
				cell(func(t result.TableSize) int64 { return t.HeapBytes }, true),
				cell(func(t result.TableSize) int64 { return t.IndexBytes }, true),
				cell(func(t result.TableSize) int64 { return t.Live }, false),
				cell(func(t result.TableSize) int64 { return t.Dead }, false),
				cell(func(t result.TableSize) int64 { return t.Vacuums }, false)})
		}
		if len(samples) > 0 {
			v, _ := medianOf(samples, metricOf(result.MetricDeliveriesPerS))
			line := fmt.Sprintf("%s: %d VALID window(s), deliveries/s %s", sideLabel(side), len(samples), num(v))
			if lf, ok := medianOf(samples, metricOf(result.MetricDeliveriesLastFirst)); ok {
				line += fmt.Sprintf(", deliveries/s last minute / first minute %.2f", lf)
			}
			if lf, ok := medianOf(samples, metricOf(result.MetricE2EP99LastFirst)); ok {
				line += fmt.Sprintf(", e2e p99 last minute / first minute %.2f", lf)
			}
			if age, ok := medianOf(samples, func(s *result.Sample) (float64, bool) {
				return float64(s.Bloat.HoldXminAgeEnd), s.Bloat.HoldXmin
			}); ok {
				line += fmt.Sprintf(", the held xmin %s transactions old at the end", num(age))
			}
			fmt.Fprintf(w, "- %s\n", line)
		}
	}
	fmt.Fprintln(w)
	if len(rows) > 0 {
		writeRows(w, []string{"side", "table", "heap start → end", "indexes start → end", "live start → end", "dead start → end", "vacuums start → end"}, rows)
	}
}

// writeRows writes a markdown table.
func writeRows(w io.Writer, header []string, rows [][]string) {
	fmt.Fprintf(w, "| %s |\n|%s\n", strings.Join(header, " | "), strings.Repeat(" --- |", len(header)))
	for _, r := range rows {
		fmt.Fprintf(w, "| %s |\n", strings.Join(r, " | "))
	}
	fmt.Fprintln(w)
}

// num prints a count or rate: integers above 100, 3 significant digits
// below.
func num(v float64) string {
	if v >= 100 || v <= -100 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.3g", v)
}

// mib prints bytes in MiB.
func mib(v float64) string { return fmt.Sprintf("%.2f MiB", v/(1<<20)) }

// The over-time plots of a bloat cell, by file suffix.
var bloatPlots = []struct {
	suffix, title, y string
	points           func(s *result.Sample) plotter.XYs
}{
	{"-overtime-rate.svg", "deliveries per second over the window", "deliveries per second", func(smp *result.Sample) plotter.XYs {
		var xys plotter.XYs
		for _, s := range smp.Bloat.Steps {
			xys = append(xys, plotter.XY{X: float64(s.EndMs) / 1000, Y: s.DeliveriesPerS})
		}
		return xys
	}},
	{"-overtime-p99.svg", "commit-to-handler p99 over the window (by commit time)", "e2e p99 ms", func(smp *result.Sample) plotter.XYs {
		var xys plotter.XYs
		for _, s := range smp.Bloat.Steps {
			if s.E2EP99Ms != nil {
				xys = append(xys, plotter.XY{X: float64(s.EndMs) / 1000, Y: *s.E2EP99Ms})
			}
		}
		return xys
	}},
	// The deliveries table alone (relaybus_deliveries, river_job): the
	// events table of relaybus grows with every publish by design (events
	// are kept until purged), and would hide it in a total.
	{"-overtime-size.svg", "heap + indexes + TOAST of the deliveries table", "MiB", func(smp *result.Sample) plotter.XYs {
		name := smp.Tables[result.TableRoleDeliveries]
		var xys plotter.XYs
		for _, p := range smp.Bloat.Tables {
			if t, ok := p.Tables[name]; ok {
				xys = append(xys, plotter.XY{X: float64(p.AtMs) / 1000, Y: float64(t.Bytes()) / (1 << 20)})
			}
		}
		return xys
	}},
	{"-overtime-dead.svg", "dead tuples of the side's tables (n_dead_tup)", "dead tuples", func(smp *result.Sample) plotter.XYs {
		var xys plotter.XYs
		for _, p := range smp.Bloat.Tables {
			xys = append(xys, plotter.XY{X: float64(p.AtMs) / 1000, Y: float64(p.TotalDead())})
		}
		return xys
	}},
}

// bloatPlot draws one over-time plot of c: a line per window, a colour
// per side, dashed for an INVALID window; false when no window has
// points.
func bloatPlot(c *result.Cell, i int) ([]byte, bool, error) {
	bp := bloatPlots[i]
	p := plot.New()
	p.Title.Text = plotTitle(c.Scenario + ": " + c.Name + ": " + bp.title)
	p.X.Label.Text = "seconds into the window"
	p.Y.Label.Text = bp.y
	p.Y.Min = 0
	drawn := map[string]bool{}
	for _, s := range c.Samples {
		if s.Bloat == nil {
			continue
		}
		xys := bp.points(s)
		if len(xys) == 0 {
			continue
		}
		if err := addWindowLine(p, drawn, s, xys); err != nil {
			return nil, false, err
		}
	}
	if len(drawn) == 0 {
		return nil, false, nil
	}
	return render(p)
}

// bloatFiles adds the over-time plots of every bloat cell of r to files
// (by name), first those of each hold group, and returns their names in
// order.
func bloatFiles(r *result.Run, files map[string][]byte) ([]string, error) {
	var names []string
	order, by := holdGroups(r)
	for gi, g := range order {
		for j := range bloatPlots {
			data, ok, err := holdPlot(g, by[g], j)
			if err != nil {
				return nil, err
			}
			if ok {
				name := fmt.Sprintf("hold%02d-%s%s", gi, result.Slug(g), bloatPlots[j].suffix)
				files[name] = data
				names = append(names, name)
			}
		}
	}
	for i, c := range r.Cells {
		if !hasBloat(c) {
			continue
		}
		base := fmt.Sprintf("%02d-%s-%s-%s", i, result.Slug(c.Store), result.Slug(c.Scenario), result.Slug(c.Name))
		for j := range bloatPlots {
			data, ok, err := bloatPlot(c, j)
			if err != nil {
				return nil, err
			}
			if ok {
				files[base+bloatPlots[j].suffix] = data
				names = append(names, base+bloatPlots[j].suffix)
			}
		}
	}
	return names, nil
}

// holdColors tell the holds apart in the plots of a group.
var holdColors = map[string]color.Color{
	"":                color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
	"repeatable-read": color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	"long-query":      color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
}

// holdPlot draws plot i of bloatPlots for the cells of one hold group:
// every VALID window, a colour per hold, solid for the candidate and
// dashed for the base, so that each side's cell with a hold is seen
// against its cell without.
func holdPlot(group string, cells []*result.Cell, i int) ([]byte, bool, error) {
	bp := bloatPlots[i]
	p := plot.New()
	p.Title.Text = plotTitle("held-snapshot: " + group + ": " + bp.title + ", by hold")
	p.X.Label.Text = "seconds into the window"
	p.Y.Label.Text = bp.y
	p.Y.Min = 0
	drawn := map[string]bool{}
	for _, c := range cells {
		hold, _ := c.Config["hold"].(string)
		for _, s := range c.Samples {
			if s.Bloat == nil || !s.IsValid() {
				continue
			}
			xys := bp.points(s)
			if len(xys) == 0 {
				continue
			}
			l, err := plotter.NewLine(xys)
			if err != nil {
				return nil, false, fmt.Errorf("report: plot: %w", err)
			}
			l.Color = holdColors[hold]
			if s.Side == result.SideBase {
				l.Dashes = []vg.Length{vg.Points(4), vg.Points(2)}
			}
			p.Add(l)
			name := hold
			if name == "" {
				name = "none"
			}
			label := s.Side + ", " + name
			if !drawn[label] {
				drawn[label] = true
				p.Legend.Add(label, l)
			}
		}
	}
	if len(drawn) == 0 {
		return nil, false, nil
	}
	return render(p)
}

// holdGroups are the run's held-snapshot cells by hold group, in order.
func holdGroups(r *result.Run) ([]string, map[string][]*result.Cell) {
	var order []string
	by := map[string][]*result.Cell{}
	for _, c := range r.Cells {
		g, ok := c.Config["hold_group"].(string)
		if !ok || !hasBloat(c) {
			continue
		}
		if by[g] == nil {
			order = append(order, g)
		}
		by[g] = append(by[g], c)
	}
	return order, by
}
