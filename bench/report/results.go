package report

import (
	"bytes"
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// ResultsDir is where WriteResults writes a run:
// <dir>/<date>-<base>-vs-<candidate>, the date with the start time
// (UTC, to the second) so that two runs of one day do not collide.
func ResultsDir(dir string, run *Run) string {
	return filepath.Join(dir, run.Started.UTC().Format("2006-01-02-150405")+"-"+
		benchName(run.Base.Ref)+"-vs-"+benchName(run.Candidate.Ref))
}

// WriteResults writes ResultsDir(dir, a.Run): run.json (every sample),
// report.md, bench.txt and SVG plots (throughput per window and side for
// every cell; the latency distribution where samples carry latencies).
func WriteResults(dir string, a *Analysis) error {
	if a == nil || a.Run == nil {
		return fmt.Errorf("report: write results: no run")
	}
	out := ResultsDir(dir, a.Run)
	if err := os.MkdirAll(out, 0o755); err != nil {
		return fmt.Errorf("report: write results: %w", err)
	}
	runJSON, err := a.Run.Encode()
	if err != nil {
		return err
	}
	var md, bench bytes.Buffer
	if err := WriteMarkdown(&md, a); err != nil {
		return err
	}
	if err := WriteBench(&bench, a); err != nil {
		return err
	}
	files := []struct {
		name string
		data []byte
	}{{"run.json", runJSON}, {"bench.txt", bench.Bytes()}}
	var plots []string
	for i, c := range a.Run.Cells {
		base := fmt.Sprintf("%02d-%s-%s-%s", i, benchName(c.Store), benchName(c.Scenario), benchName(c.Name))
		if data, ok, err := throughputPlot(c); err != nil {
			return err
		} else if ok {
			files = append(files, struct {
				name string
				data []byte
			}{base + "-throughput.svg", data})
			plots = append(plots, base+"-throughput.svg")
		}
		if data, ok, err := latencyPlot(c); err != nil {
			return err
		} else if ok {
			files = append(files, struct {
				name string
				data []byte
			}{base + "-latency.svg", data})
			plots = append(plots, base+"-latency.svg")
		}
	}
	if len(plots) > 0 {
		md.WriteString("### Plots\n\n")
		for _, p := range plots {
			fmt.Fprintf(&md, "![%s](%s)\n", p, p)
		}
	}
	files = append(files, struct {
		name string
		data []byte
	}{"report.md", md.Bytes()})
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(out, f.name), f.data, 0o644); err != nil {
			return fmt.Errorf("report: write results: %w", err)
		}
	}
	return nil
}

var sideColors = map[string]color.Color{
	SideBase:      color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	SideCandidate: color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
}

// throughputPlot draws every window's per-second series, one colour per
// side, so drift across the ABBA sequence is visible.
func throughputPlot(c *Cell) ([]byte, bool, error) {
	p := plot.New()
	p.Title.Text = c.Store + " " + c.Scenario + ": " + c.Name
	p.X.Label.Text = "second in window"
	p.Y.Label.Text = "per second"
	drawn := map[string]bool{}
	for _, s := range c.Samples {
		if len(s.Series) == 0 {
			continue
		}
		xys := make(plotter.XYs, len(s.Series))
		for i, v := range s.Series {
			xys[i] = plotter.XY{X: float64(i + 1), Y: v}
		}
		l, err := plotter.NewLine(xys)
		if err != nil {
			return nil, false, fmt.Errorf("report: plot: %w", err)
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
	}
	if len(drawn) == 0 {
		return nil, false, nil
	}
	return render(p)
}

// latencyPlot draws the empirical CDF of the end-to-end latencies of
// each side's valid windows, pooled.
func latencyPlot(c *Cell) ([]byte, bool, error) {
	p := plot.New()
	p.Title.Text = c.Store + " " + c.Scenario + ": " + c.Name + " (commit to handler)"
	p.X.Label.Text = "latency ms"
	p.Y.Label.Text = "fraction of deliveries"
	drawn := false
	for _, side := range []string{SideBase, SideCandidate} {
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
			xys[i] = plotter.XY{X: v, Y: float64(i+1) / float64(len(lat))}
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

func render(p *plot.Plot) ([]byte, bool, error) {
	wt, err := p.WriterTo(8*vg.Inch, 4*vg.Inch, "svg")
	if err != nil {
		return nil, false, fmt.Errorf("report: plot: %w", err)
	}
	var b bytes.Buffer
	if _, err := wt.WriteTo(&b); err != nil {
		return nil, false, fmt.Errorf("report: plot: %w", err)
	}
	return b.Bytes(), true, nil
}
