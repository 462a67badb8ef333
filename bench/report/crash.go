package report

import (
	"fmt"
	"strings"

	"github.com/berkcansavur/relaybus/bench/pgmetrics"
	"github.com/berkcansavur/relaybus/bench/result"
)

// A cell that crashes the database server (the fault scenario's
// "database crash x3") runs every window through crash recovery, which
// discards PostgreSQL's cumulative statistics: the differences of the
// metrics read from them (pgmetrics.ResetByCrash) mean nothing there (a
// run read -441 WAL records and -0.16 deletes per delivery). The runner
// no longer records them for such a window; a run recorded before it did
// has them in run.json, and the report leaves them out as well, so the
// cell reads "not measured" in every run, with a note that says why.

var resetByCrash = func() map[string]bool {
	m := map[string]bool{}
	for _, name := range pgmetrics.ResetByCrash {
		m[name] = true
	}
	return m
}()

// crashesServer reports whether the cell's fault plan crashes the
// database server (its configuration's crash_db_at: a list of points,
// []float64 as the runner writes it, []any as run.json reads back).
func crashesServer(c *result.Cell) bool {
	switch v := c.Config["crash_db_at"].(type) {
	case []float64:
		return len(v) > 0
	case []any:
		return len(v) > 0
	}
	return false
}

// notMeasured: the metric is one crash recovery resets and the cell
// crashes the server, so the report does not show it.
func notMeasured(c *result.Cell, metric string) bool {
	return resetByCrash[metric] && crashesServer(c)
}

// crashNotes say, under a table with a cell that crashes the server,
// which metrics it does not measure and why, and what its WAL bytes and
// statements are.
func (g *group) crashNotes() []string {
	var out []string
	for _, c := range g.cells {
		if !crashesServer(c) {
			continue
		}
		titles := make([]string, 0, len(pgmetrics.ResetByCrash))
		for _, name := range pgmetrics.ResetByCrash {
			if m, ok := result.MetricByName(name); ok {
				titles = append(titles, m.Title)
			}
		}
		out = append(out, fmt.Sprintf("%s: %s are not measured in this cell: the server crashes in every window, and crash "+
			"recovery resets PostgreSQL's cumulative statistics (pg_stat_wal, pg_stat_user_tables), so their differences "+
			"across the window mean nothing. WAL B/delivery is a difference of WAL positions (pg_current_wal_lsn()), which "+
			"go on across a crash; it includes each recovery's checkpoint and the full-page images after it. stmts/delivery "+
			"is from pg_stat_statements, whose counts the postmaster writes out at an immediate shutdown (a window where "+
			"they were lost does not have it)", c.Name, strings.Join(titles, ", ")))
	}
	return out
}
