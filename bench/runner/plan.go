package runner

import (
	"fmt"
	"path/filepath"
	"regexp"

	"github.com/berkcansavur/relaybus/bench/result"
	"github.com/berkcansavur/relaybus/bench/scenarios"
)

// Window is one measured run of one side of one cell: the unit the
// planner orders and the measurement step runs.
type Window struct {
	Cell  int    // index into the matrix's cells
	Round int    // 1..Rounds
	Side  string // result.SideBase or result.SideCandidate
	// Order is the 1-based position of the window in its cell's ABBA
	// sequence.
	Order int
	// Name is the window's database name and the prefix of its event ids.
	// Both sides of a round get names of the same length: the name is
	// stored in every event, delivery and index entry, so a longer name
	// writes more WAL ("candidate" against "base" made an A/A run 1-2%
	// "worse").
	Name string
	// Dir is the window's folder under the run folder: its record files,
	// worker logs and manifest.
	Dir string
	// Template names the database of the preload template of the
	// window's cell and side (template.go): as long as the names of the
	// first rounds, so the preload's ids are as long as before.
	Template string
}

// runIDPattern: the run id goes into database names, which PostgreSQL
// limits to 63 bytes and which must not need quoting.
var runIDPattern = regexp.MustCompile(`^[a-z0-9]{1,12}$`)

// Plan orders every window of m: cell after cell, and in each cell
// its rounds (the matrix's, or fewer: scenarios.Cell.RoundsMax) in ABBA order (base, candidate; candidate, base; ...), so
// that a drift of the machine over a cell's windows weighs on both sides
// alike. m must be valid (scenarios.Matrix.Validate).
func Plan(m *scenarios.Matrix, runID string) ([]Window, error) {
	if !runIDPattern.MatchString(runID) {
		return nil, fmt.Errorf("runner: run id %q: want 1 to 12 lower-case letters or digits", runID)
	}
	var out []Window
	for ci := range m.Cells {
		order := 0
		for round := 1; round <= m.Cells[ci].Rounds(m.Rounds); round++ {
			sides := []string{result.SideBase, result.SideCandidate}
			if round%2 == 0 {
				sides[0], sides[1] = sides[1], sides[0]
			}
			for _, side := range sides {
				order++
				out = append(out, Window{
					Cell: ci, Round: round, Side: side, Order: order,
					Name:     fmt.Sprintf("rb_%s_c%02d_r%d_%s", runID, ci+1, round, side[:1]),
					Dir:      filepath.Join(fmt.Sprintf("cell%02d", ci+1), fmt.Sprintf("r%d-%s", round, side)),
					Template: fmt.Sprintf("rb_%s_c%02d_tp_%s", runID, ci+1, side[:1]),
				})
			}
		}
	}
	return out, nil
}
