package report

import (
	"bytes"
	"encoding/xml"
	"html"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/berkcansavur/relaybus/bench/compare"
	"github.com/berkcansavur/relaybus/bench/protocol"
	"github.com/berkcansavur/relaybus/bench/result"
	"github.com/berkcansavur/relaybus/bench/result/resulttest"
	"github.com/berkcansavur/relaybus/bench/validate"
)

func wellFormed(t *testing.T, data []byte) {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(data))
	for {
		if _, err := dec.Token(); err != nil {
			if err.Error() == "EOF" {
				return
			}
			t.Fatalf("not well-formed XML: %v", err)
		}
	}
}

func TestSummaryPlot(t *testing.T) {
	t.Parallel()
	run := resulttest.Run()
	// An INVALID base window in the last cell: its rows come first.
	mixed := run.Cells[2]
	mixed.Samples = append(mixed.Samples, &result.Sample{Side: result.SideBase, Round: 9, Error: "boom"})
	a := compare.Analyze(run, compare.DefaultSettings())
	svg, ok, err := SummaryPlot(a)
	if err != nil || !ok {
		t.Fatalf("summary plot: %v %v", ok, err)
	}
	wellFormed(t, svg)
	s := string(svg)
	first := strings.Index(s, "! mixed")
	dispatch := strings.Index(s, "dispatch: 1 inst")
	if first < 0 || dispatch < 0 || first > dispatch {
		t.Errorf("INVALID base rows not first and marked (at %d, dispatch at %d)", first, dispatch)
	}
	// One row per comparison, coloured by verdict.
	if n := strings.Count(s, `<circle cx=`) + strings.Count(s, `width="7" height="7"`); n < len(a.Comparisons) {
		t.Errorf("%d markers for %d comparisons", n, len(a.Comparisons))
	}
	for _, v := range []string{verdictColors[compare.VerdictBetter], verdictColors[compare.VerdictWorse]} {
		if !strings.Contains(s, `fill="`+v+`"`) {
			t.Errorf("no marker in %s", v)
		}
	}
	if _, ok, _ := SummaryPlot(&compare.Analysis{}); ok {
		t.Error("a plot of no run")
	}
	// report.md shows it first.
	var md bytes.Buffer
	if err := writeMarkdown(&md, a, "", SummaryFile); err != nil {
		t.Fatal(err)
	}
	if img, table := strings.Index(md.String(), "](summary.svg)"), strings.Index(md.String(), "### "); img < 0 || img > table {
		t.Errorf("summary is not the first picture:\n%s", md.String())
	}
}

func TestStatementsAndUpgradeSections(t *testing.T) {
	t.Parallel()
	run := resulttest.Run()
	for _, s := range run.Cells[0].Samples {
		s.StatementUnits, s.StatementsTotalMs = 1000, 100
		s.Statements = []result.Statement{{Query: "UPDATE relaybus_deliveries SET status = $1", Calls: 2000, TotalMs: 60},
			{Query: "SELECT 1", Calls: 10, TotalMs: 1}}
	}
	run.Upgrade = &result.Upgrade{Metrics: map[string]float64{result.UpgradeSeconds: 0.7, result.UpgradeWALBytes: 8424824,
		result.UpgradeBaseHandled: 3610, result.UpgradeCandidateHandled: 8390, result.UpgradeInFlightAtKill: 10},
		Validation:    &validate.Result{Valid: true, Published: 10, Expected: 20, HandledOK: 20},
		BeforeUpgrade: &protocol.Inspect{Pending: 8380, Processing: 10, Completed: 3610},
		Checks:        []string{"deliveries added by republishing 33 events the base completed: 0"},
		Tables:        []result.UpgradeTable{{Table: "relaybus_lanes", Inserted: 256, Created: true}}}
	var md bytes.Buffer
	if err := WriteMarkdown(&md, compare.Analyze(run, compare.DefaultSettings())); err != nil {
		t.Fatal(err)
	}
	out := md.String()
	for _, want := range []string{
		"### Top statements per delivery",
		"| base      | `UPDATE relaybus_deliveries SET status = $1` | 2.000",
		"60.0%",
		"### Upgrade (scenario 6)",
		"v0.1.0 -> HEAD, upgraded in place, one run (no ABBA): VALID",
		"8,424,824 WAL bytes",
		"relaybus_lanes +256 ~0 (HOT 0) -0 created",
		"pending 8380, processing 10, completed 3610",
		"check ok: deliveries added by republishing 33 events",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	// A/A: nothing to upgrade, not INVALID.
	run.Upgrade = &result.Upgrade{Skipped: "nothing to upgrade: base and candidate are the same code (abc)"}
	md.Reset()
	if err := WriteMarkdown(&md, compare.Analyze(run, compare.DefaultSettings())); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(md.String(), "one run (no ABBA): nothing to upgrade") {
		t.Errorf("A/A upgrade:\n%s", md.String())
	}
	// INVALID: the reason is given.
	run.Upgrade = &result.Upgrade{Error: "the candidate's setup did not upgrade the base's database: boom", Metrics: map[string]float64{}}
	if r := UpgradeReason(run.Upgrade); !strings.Contains(r, "boom") || run.Upgrade.Verdict() != "INVALID" {
		t.Errorf("reason %q, verdict %s", r, run.Upgrade.Verdict())
	}
}

// TestSummaryPlotNothingCut: every cell's name and every metric's title
// is in the summary whole (a heading may wrap over lines, nothing ends in
// "..."), and no text runs past the picture's right edge, by the width
// the plot sizes its columns with; the footer is wrapped too. It fails on
// a plot that cuts a label to fit a fixed column.
func TestSummaryPlotNothingCut(t *testing.T) {
	t.Parallel()
	run := resulttest.Run()
	run.Cells[0].Name = "2 inst, tuned (conc 200, batch 200, pool 20, completion window 2ms, poll 50ms), each as its own benchmark runs it"
	a := compare.Analyze(run, compare.DefaultSettings())
	svg, ok, err := SummaryPlot(a)
	if err != nil || !ok {
		t.Fatalf("summary plot: %v %v", ok, err)
	}
	wellFormed(t, svg)
	width, _ := strconv.Atoi(string(regexp.MustCompile(`<svg [^>]*width="(\d+)"`).FindSubmatch(svg)[1]))
	texts := regexp.MustCompile(`<text x="(\d+)" y="\d+"([^>]*)>([^<]*)</text>`).FindAllSubmatch(svg, -1)
	var all []string
	for _, m := range texts {
		x, _ := strconv.Atoi(string(m[1]))
		attrs, text := string(m[2]), html.UnescapeString(string(m[3]))
		all = append(all, text)
		if strings.HasSuffix(text, "...") {
			t.Errorf("a cut text: %q", text)
		}
		w := textW(text)
		switch {
		case strings.Contains(attrs, `text-anchor="middle"`):
			w /= 2
		case strings.Contains(attrs, `font-size="13"`):
			w = w * 76 / 66
		}
		if x+w > width-fpMargin/2 {
			t.Errorf("text %q at x=%d, about %d wide, runs past the right edge (%d)", text, x, w, width)
		}
	}
	joined := strings.Join(all, " ")
	for _, c := range a.Comparisons {
		if !strings.Contains(joined, c.Cell.Scenario+": "+c.Cell.Name) {
			t.Errorf("the cell %q is not in the plot whole", c.Cell.Name)
		}
		if !slices.Contains(all, c.Metric.Title) {
			t.Errorf("the metric %q of %q has no row of its own", c.Metric.Title, c.Cell.Name)
		}
	}
	if !strings.Contains(joined, "an interval the samples cannot close runs to the edge.") {
		t.Error("the footer is cut")
	}
}
