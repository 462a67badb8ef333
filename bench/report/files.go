package report

import (
	"bytes"
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/berkcansavur/relaybus/bench/compare"
	"github.com/berkcansavur/relaybus/bench/result"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// WriteFiles writes the rendered report of a into dir, beside the
// run.json that bench/result wrote there: report.md, bench.txt and SVG
// plots (the headline picture and the summary plot, which report.md
// shows first; throughput per window and side for every cell; the
// latency distribution where samples carry latencies).
func WriteFiles(dir string, a *compare.Analysis) error {
	if a == nil || a.Run == nil {
		return fmt.Errorf("report: write files: no run")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("report: write files: %w", err)
	}
	var md, bench bytes.Buffer
	files := map[string][]byte{}
	summary, ok, err := SummaryPlot(a)
	if err != nil {
		return err
	}
	summaryName := ""
	if ok {
		files[SummaryFile], summaryName = summary, SummaryFile
	}
	headline, ok, err := HeadlinePlot(a)
	if err != nil {
		return err
	}
	headlineName := ""
	if ok {
		files[HeadlineFile], headlineName = headline, HeadlineFile
	}
	if err := writeMarkdown(&md, a, headlineName, summaryName); err != nil {
		return err
	}
	if err := WriteBench(&bench, a); err != nil {
		return err
	}
	files["bench.txt"] = bench.Bytes()
	var plots []string
	for i, c := range a.Run.Cells {
		base := fmt.Sprintf("%02d-%s-%s-%s", i, result.Slug(c.Store), result.Slug(c.Scenario), result.Slug(c.Name))
		for _, p := range []struct {
			suffix string
			draw   func(*result.Cell) ([]byte, bool, error)
		}{{"-throughput.svg", throughputPlot}, {"-latency.svg", latencyPlot}} {
			data, ok, err := p.draw(c)
			if err != nil {
				return err
			}
			if ok {
				files[base+p.suffix] = data
				plots = append(plots, base+p.suffix)
			}
		}
	}
	if len(plots) > 0 {
		md.WriteString("### Plots\n\n")
		for _, p := range plots {
			fmt.Fprintf(&md, "![%s](%s)\n", p, p)
		}
	}
	// The bloat cells' section and over-time plots (bloat.go).
	bloatPlotNames, err := bloatFiles(a.Run, files)
	if err != nil {
		return err
	}
	md.WriteString("\n")
	writeBloat(&md, a.Run, bloatPlotNames)
	files["report.md"] = md.Bytes()
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return fmt.Errorf("report: write files: %w", err)
		}
	}
	return nil
}

// minLatencyMs is the smallest latency the log axis shows.
const minLatencyMs = 0.01

var sideColors = map[string]color.Color{
	result.SideBase:      color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	result.SideCandidate: color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
}

// throughputPlot draws every window's per-second series, one colour per
// side, so drift across the ABBA sequence is visible.
func throughputPlot(c *result.Cell) ([]byte, bool, error) {
	p := plot.New()
	p.Title.Text = plotTitle(c.Store + " " + c.Scenario + ": " + c.Name)
	p.X.Label.Text = "seconds into the window"
	p.Y.Label.Text = "deliveries per second"
	if c.Scenario == "publish" {
		p.Y.Label.Text = "events per second"
	}
	drawn := map[string]bool{}
	for _, s := range c.Samples {
		if len(s.Series) == 0 {
			continue
		}
		step := 1.0
		if s.SeriesStepMs > 0 {
			step = float64(s.SeriesStepMs) / 1000
		}
		xys := make(plotter.XYs, len(s.Series))
		for i, v := range s.Series {
			xys[i] = plotter.XY{X: float64(i+1) * step, Y: v} // at the end of its bucket
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

// addWindowLine adds the line of one window (s) to p in its side's
// colour, dashed when the window is not VALID, and names the side in the
// legend the first time (drawn records which were named).
func addWindowLine(p *plot.Plot, drawn map[string]bool, s *result.Sample, xys plotter.XYs) error {
	l, err := plotter.NewLine(xys)
	if err != nil {
		return fmt.Errorf("report: plot: %w", err)
	}
	l.Color = sideColors[s.Side]
	if !s.IsValid() {
		l.Dashes = []vg.Length{vg.Points(2), vg.Points(2)}
	}
	p.Add(l)
	if !drawn[s.Side] {
		drawn[s.Side] = true
		p.Legend.Add(s.Side, l)
	}
	return nil
}

// latencyPlot draws the empirical CDF of the end-to-end latencies of
// each side's valid windows, pooled, on a log axis (latencies span
// orders of magnitude; a latency below minLatencyMs is drawn at it).
func latencyPlot(c *result.Cell) ([]byte, bool, error) {
	p := plot.New()
	p.Title.Text = plotTitle(c.Store + " " + c.Scenario + ": " + c.Name + " (commit to handler)")
	p.X.Label.Text = "latency ms (log scale)"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Y.Label.Text = "fraction of deliveries"
	drawn := false
	for _, side := range []string{result.SideBase, result.SideCandidate} {
		var lat []float64
		for _, s := range c.Samples {
			if s.Side == side && s.IsValid() {
				lat = append(lat, s.Latencies...)
			}
		}
		if len(lat) == 0 {
			continue
		}
		slices.Sort(lat)
		xys := make(plotter.XYs, len(lat))
		for i, v := range lat {
			xys[i] = plotter.XY{X: max(v, minLatencyMs), Y: float64(i+1) / float64(len(lat))}
		}
		l, err := plotter.NewLine(xys)
		if err != nil {
			return nil, false, fmt.Errorf("report: plot: %w", err)
		}
		l.Color = sideColors[side]
		p.Add(l)
		p.Legend.Add(side, l)
		drawn = true
	}
	if !drawn {
		return nil, false, nil
	}
	return render(p)
}

// render draws p as SVG with its legend in a strip of its own above the
// plot, so that the legend never covers a line.
func render(p *plot.Plot) ([]byte, bool, error) {
	const width, height = 8 * vg.Inch, 4 * vg.Inch
	legend := p.Legend
	p.Legend = plot.NewLegend()
	c := vgsvg.New(width, height)
	dc := draw.New(c)
	strip := legend.Rectangle(dc).Size().Y + vg.Points(4)
	// A right margin keeps the last tick's label inside the picture.
	p.Draw(draw.Crop(dc, 0, -vg.Points(12), 0, -strip))
	legend.Top, legend.Left = true, true
	legend.Draw(draw.Crop(dc, vg.Points(50), 0, height-strip, -vg.Points(2)))
	var b bytes.Buffer
	if _, err := c.WriteTo(&b); err != nil {
		return nil, false, fmt.Errorf("report: plot: %w", err)
	}
	return b.Bytes(), true, nil
}

// plotTitleChars is how many characters of a title fit on one line of a
// plot (8 inches at the default 12 pt title font, with room).
const plotTitleChars = 68

// plotTitle wraps a plot's title over lines instead of letting the
// picture cut it.
func plotTitle(s string) string { return strings.Join(wrap(s, plotTitleChars), "\n") }
