package report

import (
	"fmt"
	"io"
	"strings"

	"github.com/berkcansavur/relaybus/bench/compare"
	"github.com/olekukonko/tablewriter"
	"github.com/olekukonko/tablewriter/tw"
)

// The terminal tables are long rather than wide: one row per (cell,
// metric), so a scenario with a dozen metrics still fits an 80-160 column
// terminal (one column per metric made dispatch tables 600+ characters
// wide). report.md keeps the wide layout: a browser scrolls it.
const (
	// termCellWidth is where cell names wrap in the first column; the
	// longest cell names (keyed, tuned) are about 70 characters.
	termCellWidth = 28
	// termProseWidth is where the legend wraps.
	termProseWidth = 100
)

// wrapWords breaks s at spaces into lines of at most width characters; a
// single word longer than width gets a line of its own, unbroken.
func wrapWords(s string, width int) []string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(s) {
		switch {
		case line == "":
			line = w
		case len(line)+1+len(w) <= width:
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

// termRows are the rows of one group's terminal table. The cell column
// carries the wrapped cell name and then its validity, one line per
// metric row, so the name reads down the column instead of inflating the
// first row; lines left over when a cell has few metrics go into its last
// row.
func (g *group) termRows() [][]string {
	var rows [][]string
	for _, c := range g.cells {
		label := append(wrapWords(c.Name, termCellWidth), validity(c))
		if len(g.metrics) == 0 {
			rows = append(rows, []string{strings.Join(label, "\n"), "-", "-", "-", "-", "no metrics"})
			continue
		}
		for i, m := range g.metrics {
			var first string
			switch {
			case i == len(g.metrics)-1 && i < len(label):
				first = strings.Join(label[i:], "\n")
			case i < len(label):
				first = label[i]
			}
			rows = append(rows, append([]string{first, m.Title}, termComparison(g.byCell[c][m.Name])...))
		}
	}
	return rows
}

// termComparison: base median, candidate median, change [CI], verdict (p).
func termComparison(c *compare.Comparison) []string {
	switch {
	case c == nil:
		return []string{"-", "-", "-", "not measured in this cell"}
	case c.Verdict == compare.VerdictNoValues && compare.OneSide(c) != "":
		return []string{compare.FormatNumber(c.Base.Median), compare.FormatNumber(c.Candidate.Median), "-", compare.OneSide(c) + " only"}
	case c.Verdict == compare.VerdictNoValues:
		return []string{"-", "-", "-", "no valid samples"}
	}
	return []string{compare.FormatNumber(c.Base.Median), compare.FormatNumber(c.Candidate.Median), compare.FormatChange(c), compare.FormatVerdict(c)}
}

var termAlign = tw.CellAlignment{Global: tw.AlignLeft,
	PerColumn: []tw.Align{tw.AlignLeft, tw.AlignLeft, tw.AlignRight, tw.AlignRight, tw.AlignLeft, tw.AlignLeft}}

func writeTerminalTable(w io.Writer, g *group, confidence float64) error {
	t := tablewriter.NewTable(w,
		tablewriter.WithHeaderAutoFormat(tw.Off),
		tablewriter.WithRowAutoWrap(tw.WrapNone),
		tablewriter.WithHeaderAutoWrap(tw.WrapNone),
		// Medians right-aligned so their magnitudes line up.
		tablewriter.WithHeaderAlignmentConfig(termAlign),
		tablewriter.WithRowAlignmentConfig(termAlign),
	)
	t.Header([]string{g.scenario, "metric", "base", "candidate", fmt.Sprintf("change [%.0f%% CI]", 100*confidence), "verdict (p)"})
	for _, row := range g.termRows() {
		if err := t.Append(row); err != nil {
			return fmt.Errorf("report: table: %w", err)
		}
	}
	if err := t.Render(); err != nil {
		return fmt.Errorf("report: table: %w", err)
	}
	return nil
}

// termLegend explains the terminal table columns.
func termLegend(a *compare.Analysis) string {
	s := fmt.Sprintf("Rows: cell (with VALID/INVALID window count) and metric; median base and median candidate; "+
		"the change with its %.0f%% confidence interval (Hodges-Lehmann): a candidate/base ratio (0.73x), or for "+
		"metrics that can be 0 the difference candidate - base (+12); verdict (better / worse when the two-sided "+
		"Mann-Whitney U p < %.2g, exact for small samples, and the interval excludes no change; ~ otherwise) and p. "+
		"Only VALID windows are in the statistics.", 100*a.Settings.Confidence, a.Settings.Alpha)
	return strings.Join(wrapWords(s, termProseWidth), "\n")
}

// termProse wraps a note or warning line for the terminal; continuation
// lines are indented under the two-space note indent so one note stays
// visibly one item.
func termProse(s string) string {
	return strings.Join(wrapWords(s, termProseWidth-2), "\n    ")
}
