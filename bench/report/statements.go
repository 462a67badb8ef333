package report

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/berkcansavur/relaybus/bench/compare"
	"github.com/berkcansavur/relaybus/bench/result"
)

// topStatementsShown bounds the statements listed per cell and side.
const topStatementsShown = 5

// statementRow is one statement of one side of a cell, over its valid
// windows.
type statementRow struct {
	query                  string
	perUnit, meanMs, share float64
}

// sideStatements merges the windows' statements of one side of a cell by
// text: calls per delivery (or event) over all those windows, mean time
// per call, and the share of all statements' time. ok is false when no
// valid window of the side has statements.
func sideStatements(c *result.Cell, side string) (rows []statementRow, ok bool) {
	type acc struct {
		calls int64
		ms    float64
	}
	by := map[string]*acc{}
	var units, total float64
	for _, s := range c.Samples {
		if s.Side != side || !s.IsValid() || len(s.Statements) == 0 || s.StatementUnits <= 0 {
			continue
		}
		ok = true
		units += s.StatementUnits
		total += s.StatementsTotalMs
		for _, st := range s.Statements {
			a := by[st.Query]
			if a == nil {
				a = &acc{}
				by[st.Query] = a
			}
			a.calls += st.Calls
			a.ms += st.TotalMs
		}
	}
	for q, a := range by {
		r := statementRow{query: q, perUnit: float64(a.calls) / units}
		if a.calls > 0 {
			r.meanMs = a.ms / float64(a.calls)
		}
		if total > 0 {
			r.share = 100 * a.ms / total
		}
		rows = append(rows, r)
	}
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].share != rows[j].share {
			return rows[i].share > rows[j].share
		}
		return rows[i].query < rows[j].query
	})
	if len(rows) > topStatementsShown {
		rows = rows[:topStatementsShown]
	}
	return rows, ok
}

// writeStatements writes, per cell, each side's top statements by their
// share of the window's statement time (bench --profile), as markdown.
func writeStatements(w io.Writer, a *compare.Analysis) error {
	if a.Run == nil {
		return nil
	}
	header := false
	for _, c := range a.Run.Cells {
		var rows [][]string
		for _, side := range []string{result.SideBase, result.SideCandidate} {
			st, ok := sideStatements(c, side)
			if !ok {
				continue
			}
			for _, r := range st {
				rows = append(rows, []string{side, "`" + strings.ReplaceAll(r.query, "|", `\|`) + "`",
					fmt.Sprintf("%.3f", r.perUnit), fmt.Sprintf("%.3f", r.meanMs), fmt.Sprintf("%.1f%%", r.share)})
			}
		}
		if len(rows) == 0 {
			continue
		}
		if !header {
			fmt.Fprintf(w, "### Top statements per delivery (pg_stat_statements)\n\n"+
				"Per cell and side, over its valid windows: the %d statements with the largest share of the window's statement time, "+
				"calls per delivery (per event in publish cells), mean time per call.\n\n", topStatementsShown)
			header = true
		}
		fmt.Fprintf(w, "#### %s %s: %s\n\n", c.Store, c.Scenario, c.Name)
		t := newTable(w, true)
		t.Header([]string{"side", "statement", "calls/delivery", "mean ms", "share of time"})
		for _, r := range rows {
			if err := t.Append(r); err != nil {
				return fmt.Errorf("report: statements: %w", err)
			}
		}
		if err := t.Render(); err != nil {
			return fmt.Errorf("report: statements: %w", err)
		}
		fmt.Fprintln(w)
	}
	return nil
}
