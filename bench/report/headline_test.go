package report

import (
	"html"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/berkcansavur/relaybus/bench/compare"
	"github.com/berkcansavur/relaybus/bench/result"
	"github.com/berkcansavur/relaybus/bench/result/resulttest"
	"github.com/berkcansavur/relaybus/bench/validate"
)

// headlineRun is resulttest's run with what the headline must draw
// honestly: cell configurations (who publishes and who dispatches in the
// window), a peer-like cell whose base records no WAL, a cell whose
// candidate windows are all INVALID, a long cell name and scenario 6.
func headlineRun() *result.Run {
	run := resulttest.Run()
	dispatch, publish, mixed := run.Cells[0], run.Cells[1], run.Cells[2]
	dispatch.Config = map[string]any{"instances": 1, "preload": 20000}
	publish.Config = map[string]any{"publisher_procs": 1}
	mixed.Config = map[string]any{"instances": 1, "publisher_procs": 1}
	for _, s := range mixed.Samples {
		s.Metrics[result.MetricE2EP99Ms] = 40
		if s.Side == result.SideCandidate {
			s.Metrics[result.MetricE2EP99Ms] = 20
		}
	}
	// A peer without WAL on the base side.
	peer := &result.Cell{Scenario: "dispatch", Store: "postgres", Config: dispatch.Config,
		Name: "2 inst, tuned (conc 200, batch 200, pool 20, completion window 2ms, poll 50ms), each as its own benchmark runs it"}
	// A cell whose candidate is INVALID in every window.
	keyed := &result.Cell{Scenario: "keyed", Store: "postgres", Name: "1 inst, 4 hot keys, tuned (conc 200, batch 200, pool 40, poll 50ms)",
		Config: dispatch.Config}
	for i, s := range dispatch.Samples {
		if !s.IsValid() {
			continue
		}
		p := *s
		p.Metrics = map[string]float64{}
		for k, v := range s.Metrics {
			if k != result.MetricWALBytesPerDelivery || s.Side == result.SideCandidate {
				p.Metrics[k] = v
			}
		}
		peer.Samples = append(peer.Samples, &p)
		q := *s
		if s.Side == result.SideCandidate {
			q.Validation = &validate.Result{Lost: 1, Published: 1000, Expected: 1000, HandledOK: 999, Examples: []string{"lost"}}
		}
		q.Order = i
		keyed.Samples = append(keyed.Samples, &q)
	}
	run.Cells = append(run.Cells, peer, keyed)
	run.Upgrade = &result.Upgrade{Skipped: "nothing to upgrade: base and candidate are the same code (78b783715c89ce6681f99639d3ae5a0000000000)"}
	return run
}

// textBox is one <text> of an SVG and where it is, by the widths the
// plot sizes its columns with (textWidth).
type textBox struct {
	text           string
	x0, x1, y0, y1 int
}

var textPattern = regexp.MustCompile(`<text x="(\d+)" y="(\d+)"([^>]*)>([^<]*)</text>`)

func textBoxes(t *testing.T, svg []byte) []textBox {
	t.Helper()
	var out []textBox
	for _, m := range textPattern.FindAllSubmatch(svg, -1) {
		x, _ := strconv.Atoi(string(m[1]))
		y, _ := strconv.Atoi(string(m[2]))
		attrs, text := string(m[3]), html.UnescapeString(string(m[4]))
		w, h := textWidth(text, strings.Contains(attrs, `font-weight="bold"`)), 11
		switch {
		case strings.Contains(attrs, `font-size="13"`):
			w, h = w*13/11, 13
		case strings.Contains(attrs, `font-size="10"`):
			w, h = w*10/11, 10
		}
		x0 := x
		if strings.Contains(attrs, `text-anchor="middle"`) {
			x0 = x - w/2
		}
		out = append(out, textBox{text: text, x0: x0, x1: x0 + w, y0: y - h + 2, y1: y + 2})
	}
	return out
}

// TestHeadlinePlotNothingCut: every cell's name and every column's title
// is in the headline whole (wrapped over lines, never ending in "..."),
// no text runs past the picture's right edge, and no two texts overlap
// (a long cell name running into the throughput column, a verdict into
// the next column, a commit's SHA past the edge would).
func TestHeadlinePlotNothingCut(t *testing.T) {
	t.Parallel()
	a := compare.Analyze(headlineRun(), compare.DefaultSettings())
	svg, ok, err := HeadlinePlot(a)
	if err != nil || !ok {
		t.Fatalf("headline: %v %v", ok, err)
	}
	wellFormed(t, svg)
	width, _ := strconv.Atoi(string(regexp.MustCompile(`<svg [^>]*width="(\d+)"`).FindSubmatch(svg)[1]))
	boxes := textBoxes(t, svg)
	var all []string
	for i, b := range boxes {
		all = append(all, b.text)
		if strings.HasSuffix(b.text, "...") {
			t.Errorf("a cut text: %q", b.text)
		}
		if b.x1 > width-fpMargin/2 {
			t.Errorf("text %q ends at about x=%d, past the right edge (%d)", b.text, b.x1, width)
		}
		for _, o := range boxes[i+1:] {
			if b.x0 < o.x1 && o.x0 < b.x1 && b.y0 < o.y1 && o.y0 < b.y1 {
				t.Errorf("texts overlap: %q (x %d-%d, y %d-%d) and %q (x %d-%d, y %d-%d)",
					b.text, b.x0, b.x1, b.y0, b.y1, o.text, o.x0, o.x1, o.y0, o.y1)
			}
		}
	}
	joined := strings.Join(all, " ")
	for _, c := range a.Run.Cells {
		if !strings.Contains(joined, c.Scenario+": "+c.Name) {
			t.Errorf("the cell %q is not in the headline whole", c.Name)
		}
	}
	for _, col := range headlineColumns {
		if !strings.Contains(joined, col.title) {
			t.Errorf("the column %q is not in the headline whole", col.title)
		}
	}
	for _, want := range []string{"still exact? validity", "upgrade (scenario 6): v0.1.0 -> HEAD, in place",
		"a gap is never drawn as a zero.", "deliveries/s", "WAL B/delivery", "e2e p99 ms"} {
		if !strings.Contains(joined, want) {
			t.Errorf("the headline lacks %q", want)
		}
	}
}

// headlineGroups splits the headline into its rows, and each row into
// its columns: the text of each, by the groups the plot writes.
func headlineGroups(t *testing.T, svg []byte) []map[string]string {
	t.Helper()
	metric := regexp.MustCompile(`(?s)<g class="metric" data-metric="(\w+)">(.*?)</g>`)
	var rows []map[string]string
	for _, r := range strings.Split(string(svg), `<g class="row"`)[1:] {
		m := map[string]string{"row": r}
		for _, g := range metric.FindAllStringSubmatch(r, -1) {
			m[g[1]] = g[2]
		}
		rows = append(rows, m)
	}
	return rows
}

// TestHeadlinePlotNotMeasured: a metric a cell, or one side of it, does
// not have is a gap that says "not measured" and why, drawn without a
// marker or a number of its own: never a zero, never a ratio. A side
// whose windows are all INVALID is "no VALID window", not "not measured".
func TestHeadlinePlotNotMeasured(t *testing.T) {
	t.Parallel()
	a := compare.Analyze(headlineRun(), compare.DefaultSettings())
	svg, _, err := HeadlinePlot(a)
	if err != nil {
		t.Fatal(err)
	}
	rows := headlineGroups(t, svg)
	if len(rows) != len(a.Run.Cells)+1 {
		t.Fatalf("%d rows for %d cells and scenario 6", len(rows), len(a.Run.Cells))
	}
	ratio := regexp.MustCompile(`>[-+]?\d[\d,.]*x`)
	// The texts of a group joined, lines wrapped back into one.
	texts := func(g string) string {
		var out []string
		for _, m := range textPattern.FindAllStringSubmatch(g, -1) {
			out = append(out, html.UnescapeString(m[4]))
		}
		return strings.Join(out, " ")
	}
	gap := func(row int, col, want string) {
		t.Helper()
		g := rows[row][col]
		if !strings.Contains(texts(g), want) || !strings.Contains(g, `fill="url(#notmeasured)"`) {
			t.Errorf("row %d (%s), %s: want a hatched gap saying %q:\n%s", row, a.Run.Cells[row].Name, col, want, g)
		}
		if strings.Contains(g, "<circle") || strings.Contains(g, `stroke-width="3"`) || ratio.MatchString(g) {
			t.Errorf("row %d, %s: a gap with a marker or a ratio:\n%s", row, col, g)
		}
	}
	drawn := func(row int, col, want string) {
		t.Helper()
		g := rows[row][col]
		if !strings.Contains(g, "<circle") || !strings.Contains(texts(g), want) || strings.Contains(g, "not measured") {
			t.Errorf("row %d (%s), %s: want a marker and %q:\n%s", row, a.Run.Cells[row].Name, col, want, g)
		}
	}
	// dispatch: a preloaded backlog commits no event in the window.
	drawn(0, "throughput", "deliveries/s")
	drawn(0, "wal", "less WAL")
	gap(0, "latency", "no event is committed in the window")
	// publish: nothing is dispatched; its WAL is per event, where the
	// fixture has none.
	drawn(1, "throughput", "events/s")
	gap(1, "latency", "nothing is handled in the window (publish only)")
	gap(1, "wal", "not measured")
	// mixed: throughput is its achieved rate; end-to-end p99 halved.
	drawn(2, "throughput", "achieved/s")
	drawn(2, "latency", "20.0 e2e p99 ms")
	// The peer-like cell: its base has no WAL.
	gap(3, "wal", "not measured on the base side")
	gap(3, "wal", "candidate only: 625 WAL B/delivery")
	drawn(3, "throughput", "deliveries/s")
	// Every candidate window INVALID: nothing VALID to compare.
	gap(4, "throughput", "no VALID window to compare")
	gap(4, "throughput", "candidate 0 of 5 windows VALID")
	if strings.Contains(rows[4]["throughput"], "not measured") {
		t.Errorf("an INVALID side called not measured:\n%s", rows[4]["throughput"])
	}
	if !strings.Contains(texts(rows[4]["row"]), "INVALID: 5 candidate window(s)") {
		t.Errorf("the INVALID cell's validity:\n%s", rows[4]["row"])
	}
	// Scenario 6 skipped: said, in its own row.
	if !strings.Contains(texts(rows[5]["row"]), "skipped: nothing to upgrade") {
		t.Errorf("scenario 6's row:\n%s", rows[5]["row"])
	}
	// The answers count the gaps as gaps.
	for _, want := range []string{
		"throughput: faster in 2, slower in 1, too few samples in 1, no VALID window in 1 (of 5 cells)",
		"WAL: less WAL in 1, not measured in 3, no VALID window in 1 (of 5 cells)",
		"end-to-end p99: too few samples in 1, not measured in 4 (of 5 cells)",
		"still exact? NO: 6 of 22 candidate windows INVALID (the run fails)",
	} {
		if !strings.Contains(texts(string(svg)), want) {
			t.Errorf("no answer line %q", want)
		}
	}
}

// TestHeadlineIsTheFirstPicture: the result set holds headline.svg and
// report.md shows it first, then the summary, both before the tables.
func TestHeadlineIsTheFirstPicture(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := WriteFiles(dir, compare.Analyze(headlineRun(), compare.DefaultSettings())); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, HeadlineFile)); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(dir, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(md)
	head, summary, table := strings.Index(s, "](headline.svg)"), strings.Index(s, "](summary.svg)"), strings.Index(s, "### ")
	if head < 0 || summary < 0 || head > summary || summary > table || strings.Index(s, "![") != strings.LastIndex(s[:head], "![") {
		t.Errorf("headline at %d, summary at %d, first table at %d:\n%s", head, summary, table, s[:min(len(s), 2000)])
	}
	if _, ok, _ := HeadlinePlot(&compare.Analysis{}); ok {
		t.Error("a headline of no run")
	}
}
