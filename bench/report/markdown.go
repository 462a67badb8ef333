package report

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/berkcansavur/relaybus/bench/compare"
	"github.com/berkcansavur/relaybus/bench/result"
	"github.com/olekukonko/tablewriter"
	"github.com/olekukonko/tablewriter/renderer"
	"github.com/olekukonko/tablewriter/tw"
)

// group is one table: the cells of one (store, scenario), in run order.
type group struct {
	store, scenario string
	cells           []*result.Cell
	metrics         []result.MetricInfo
	byCell          map[*result.Cell]map[string]*compare.Comparison
}

func groups(a *compare.Analysis) []*group {
	var out []*group
	index := map[[2]string]*group{}
	if a.Run == nil {
		return nil
	}
	for _, c := range a.Run.Cells {
		k := [2]string{c.Store, c.Scenario}
		g := index[k]
		if g == nil {
			g = &group{store: c.Store, scenario: c.Scenario, byCell: map[*result.Cell]map[string]*compare.Comparison{}}
			index[k] = g
			out = append(out, g)
		}
		g.cells = append(g.cells, c)
		g.byCell[c] = map[string]*compare.Comparison{}
	}
	for _, cmp := range a.Comparisons {
		g := index[[2]string{cmp.Cell.Store, cmp.Cell.Scenario}]
		if g == nil {
			continue
		}
		if notMeasured(cmp.Cell, cmp.Metric.Name) {
			continue
		}
		if g.byCell[cmp.Cell] == nil {
			g.byCell[cmp.Cell] = map[string]*compare.Comparison{}
		}
		if !hasMetric(g.metrics, cmp.Metric.Name) {
			g.metrics = append(g.metrics, cmp.Metric)
		}
		g.byCell[cmp.Cell][cmp.Metric.Name] = cmp
	}
	for _, g := range out {
		order := map[string]int{}
		for i, m := range result.Metrics {
			order[m.Name] = i
		}
		sort.SliceStable(g.metrics, func(i, j int) bool {
			oi, iok := order[g.metrics[i].Name]
			oj, jok := order[g.metrics[j].Name]
			if iok != jok {
				return iok
			}
			if !iok {
				return g.metrics[i].Name < g.metrics[j].Name
			}
			return oi < oj
		})
	}
	return out
}

func hasMetric(ms []result.MetricInfo, name string) bool {
	for _, m := range ms {
		if m.Name == name {
			return true
		}
	}
	return false
}

// validity is "VALID 8/8" or "INVALID 2/8", followed by "(no key order:
// base)" where a side's key order was not checked (keyOrderNote).
func validity(c *result.Cell) string {
	valid := 0
	for _, s := range c.Samples {
		if s.IsValid() {
			valid++
		}
	}
	if valid == len(c.Samples) {
		return fmt.Sprintf("VALID %d/%d", valid, len(c.Samples)) + keyOrderNote(c)
	}
	return fmt.Sprintf("INVALID %d/%d", len(c.Samples)-valid, len(c.Samples)) + keyOrderNote(c)
}

func (g *group) title() string {
	return g.store + ": " + g.scenario
}

// notes are the lines under a table: the settings each side ran a cell
// with where they are its own, the tables per-table metrics came from
// where the sides' differ, the metrics a cell that crashes the
// server does not measure, ignored options per side and the invalid
// samples.
func (g *group) notes(a *compare.Analysis) []string {
	out := append(g.settingsNotes(), g.tableNotes()...)
	out = append(out, g.crashNotes()...)
	for _, side := range []string{result.SideBase, result.SideCandidate} {
		set := map[string]bool{}
		for _, c := range g.cells {
			for _, s := range c.Samples {
				if s.Side == side {
					for _, o := range s.Ignored {
						set[o] = true
					}
				}
			}
		}
		if len(set) > 0 {
			names := make([]string, 0, len(set))
			for o := range set {
				names = append(names, o)
			}
			sort.Strings(names)
			out = append(out, fmt.Sprintf("options ignored by %s: %s", side, strings.Join(names, ", ")))
		}
	}
	for _, inv := range a.Invalid {
		if inv.Cell.Store == g.store && inv.Cell.Scenario == g.scenario {
			out = append(out, fmt.Sprintf("INVALID sample (not in the statistics): %s, %s round %d (window %d): %s",
				inv.Cell.Name, inv.Sample.Side, inv.Sample.Round, inv.Sample.Order, inv.Reason))
		}
	}
	return out
}

func newTable(w io.Writer, markdown bool) *tablewriter.Table {
	opts := []tablewriter.Option{
		// Titles and metric names are written as given: no upper-casing,
		// no wrapping of the long comparison cells.
		tablewriter.WithHeaderAutoFormat(tw.Off),
		tablewriter.WithRowAutoWrap(tw.WrapNone),
		tablewriter.WithHeaderAutoWrap(tw.WrapNone),
		tablewriter.WithHeaderAlignment(tw.AlignLeft),
		tablewriter.WithRowAlignment(tw.AlignLeft),
	}
	if markdown {
		opts = append(opts, tablewriter.WithRenderer(renderer.NewMarkdown()))
	}
	return tablewriter.NewTable(w, opts...)
}

// writeMarkdownTable writes one group as a table per cell, titled with
// the cell and its validity: a row per metric, with base, candidate,
// change and verdict as columns, so that a line stays as short as a
// terminal or a pull request shows (a table of every metric as a column
// ran past 1,000 characters).
func writeMarkdownTable(w io.Writer, g *group) error {
	for i, c := range g.cells {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "#### %s (%s)\n\n", c.Name, validity(c))
		t := newTable(w, true)
		t.Header([]string{"metric", "base", "candidate", "change [CI]", "verdict"})
		if len(g.metrics) == 0 {
			if err := t.Append([]string{"-", "-", "-", "-", "no metrics"}); err != nil {
				return fmt.Errorf("report: table: %w", err)
			}
		}
		for _, m := range g.metrics {
			if err := t.Append(append([]string{m.Title}, termComparison(g.byCell[c][m.Name])...)); err != nil {
				return fmt.Errorf("report: table: %w", err)
			}
		}
		if err := t.Render(); err != nil {
			return fmt.Errorf("report: table: %w", err)
		}
	}
	return nil
}

func writeTables(w io.Writer, a *compare.Analysis, markdown bool) error {
	writeSection(w, "Validity", validityLines(a), markdown)
	if a.Run != nil {
		writeSection(w, "Notes", a.Run.Notes, markdown)
	}
	for _, g := range groups(a) {
		if markdown {
			fmt.Fprintf(w, "### %s\n\n", g.title())
			if err := writeMarkdownTable(w, g); err != nil {
				return err
			}
		} else {
			fmt.Fprintf(w, "%s\n", g.title())
			if err := writeTerminalTable(w, g, a.Settings.Confidence); err != nil {
				return err
			}
		}
		notes := g.notes(a)
		if len(notes) > 0 {
			fmt.Fprintln(w)
		}
		writeItems(w, notes, markdown)
		fmt.Fprintln(w)
	}
	if a.Run != nil {
		writeSection(w, "Upgrade (scenario 6)", upgradeLines(a.Run), markdown)
	}
	if markdown {
		if err := writeStatements(w, a); err != nil {
			return err
		}
	}
	writeSection(w, "Warnings", a.Warnings, markdown)
	return nil
}

// writeSection writes a titled list, nothing when it is empty.
func writeSection(w io.Writer, title string, items []string, markdown bool) {
	if len(items) == 0 {
		return
	}
	if markdown {
		fmt.Fprintf(w, "### %s\n\n", title)
	} else {
		fmt.Fprintf(w, "%s:\n", strings.ToLower(title))
	}
	writeItems(w, items, markdown)
	fmt.Fprintln(w)
}

// writeItems writes list items: markdown bullets, or indented and
// wrapped prose in the terminal.
func writeItems(w io.Writer, items []string, markdown bool) {
	for _, it := range items {
		if markdown {
			fmt.Fprintf(w, "- %s\n", it)
		} else {
			fmt.Fprintf(w, "  %s\n", termProse(it))
		}
	}
}

// validityLines lead the report when a window is INVALID: the base's
// first (an INVALID base is why a cell has no comparison, and v0.1.0 is
// INVALID by design where handlers take time), then the candidate's,
// which fail the run. Each line is one cell and side.
func validityLines(a *compare.Analysis) []string {
	if len(a.Invalid) == 0 {
		return nil
	}
	var out []string
	for _, side := range []string{result.SideBase, result.SideCandidate} {
		type key struct{ cell *result.Cell }
		counts := map[key]int{}
		var order []key
		first := map[key]string{}
		for _, inv := range a.Invalid {
			if inv.Sample.Side != side {
				continue
			}
			k := key{inv.Cell}
			if counts[k] == 0 {
				order = append(order, k)
				first[k] = inv.Reason
			}
			counts[k]++
		}
		for _, k := range order {
			windows := 0
			for _, s := range k.cell.Samples {
				if s.Side == side {
					windows++
				}
			}
			consequence := "the run fails"
			if side == result.SideBase {
				consequence = "not held against the candidate"
			}
			out = append(out, fmt.Sprintf("%s INVALID in %d of %d windows of %s %s (%s; %s), e.g. %s",
				side, counts[k], windows, k.cell.Scenario, k.cell.Name, k.cell.Store, consequence, first[k]))
		}
	}
	return out
}

// legend explains the cells of every table.
func legend(a *compare.Analysis) string {
	return fmt.Sprintf("Cells: median base -> median candidate, the change with its %.0f%% confidence interval "+
		"(Hodges-Lehmann): a candidate/base ratio (0.73x), or for metrics that can be 0 the difference candidate - base (+12), "+
		"and the verdict (better / worse when the two-sided Mann-Whitney U p < %.2g, exact for small samples, and the "+
		"interval excludes no change; ~ otherwise) with p. Only VALID windows are in the statistics.",
		100*a.Settings.Confidence, a.Settings.Alpha)
}

// WriteTerminal writes the report as terminal tables.
func WriteTerminal(w io.Writer, a *compare.Analysis) error {
	if a.Run != nil {
		fmt.Fprintf(w, "%s vs %s, mode %s\n%s\n\n", termRefLabel(a.Run.Base), termRefLabel(a.Run.Candidate), a.Run.Mode, termLegend(a))
	}
	return writeTables(w, a, false)
}

// WriteMarkdown writes report.md.
func WriteMarkdown(w io.Writer, a *compare.Analysis) error {
	return writeMarkdown(w, a, "", "")
}

// writeMarkdown writes report.md; headline and summary, when not empty,
// are the headline picture's file, shown first, and the summary plot's,
// shown after it.
func writeMarkdown(w io.Writer, a *compare.Analysis, headline, summary string) error {
	if a.Run != nil {
		r := a.Run
		fmt.Fprintf(w, "# relaybus benchmark: %s vs %s\n\n", r.Base.Ref, r.Candidate.Ref)
		fmt.Fprintf(w, "- base: %s%s\n", refLabel(r.Base), dirty(r.Base))
		fmt.Fprintf(w, "- candidate: %s%s\n", refLabel(r.Candidate), dirty(r.Candidate))
		fmt.Fprintf(w, "- mode: %s; started %s, finished %s\n", r.Mode, r.Started.UTC().Format("2006-01-02 15:04:05Z"), r.Finished.UTC().Format("2006-01-02 15:04:05Z"))
		if len(r.Machine) > 0 {
			fmt.Fprintf(w, "- machine: %s\n", joinMap(r.Machine))
		}
		for _, d := range r.Databases {
			fmt.Fprintf(w, "- database: %s %s (%s", d.Kind, d.Version, d.Provider)
			if d.DataDirFS != "" {
				fmt.Fprintf(w, ", data directory on %s", d.DataDirFS)
			}
			fmt.Fprintf(w, ")")
			if len(d.Settings) > 0 {
				fmt.Fprintf(w, ": %s", joinMap(d.Settings))
			}
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "\n%s\n\n", legend(a))
	}
	if headline != "" {
		fmt.Fprintf(w, "![per cell: is the candidate faster, leaner, still exact? throughput, WAL per delivery, end-to-end p99 and validity](%s)\n\n", headline)
	}
	if summary != "" {
		fmt.Fprintf(w, "![every (cell, metric): the change with its interval, coloured by verdict](%s)\n\n", summary)
	}
	return writeTables(w, a, true)
}

func dirty(r result.RefInfo) string {
	if r.Dirty {
		return " **dirty working tree**"
	}
	return ""
}

func joinMap(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + m[k]
	}
	return strings.Join(parts, ", ")
}

func short(sha string) string {
	if len(sha) > 12 {
		return sha[:12]
	}
	return sha
}
