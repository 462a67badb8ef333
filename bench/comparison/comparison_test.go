package comparison

import (
	"strings"
	"testing"

	"github.com/berkcansavur/relaybus/bench/scenarios"
	"github.com/berkcansavur/relaybus/internal/dbenv"
)

// With a server the harness did not start, the cells that restart or
// crash it are skipped with a note, and a run of nothing else is an
// error.
func TestSkipDatabaseFaults(t *testing.T) {
	t.Parallel()
	faults := func() scenarios.Matrix {
		m := scenarios.Quick()
		if err := m.Filter([]int{scenarios.Faults}); err != nil {
			t.Fatal(err)
		}
		return m
	}
	m := faults()
	if notes, err := skipDatabaseFaults(&m, dbenv.ProviderLocal); err != nil || len(notes) != 0 || len(m.Cells) != 2 {
		t.Fatalf("local: %v, notes %q, %d cells", err, notes, len(m.Cells))
	}
	notes, err := skipDatabaseFaults(&m, dbenv.ProviderDSN)
	if err != nil || len(notes) != 1 || !strings.Contains(notes[0], "database crash") || !strings.Contains(notes[0], "provider dsn") || len(m.Cells) != 1 {
		t.Fatalf("dsn: %v, notes %q, %d cells", err, notes, len(m.Cells))
	}
	m = scenarios.Full()
	if err := m.Filter([]int{scenarios.Faults}); err != nil {
		t.Fatal(err)
	}
	m.Cells = m.Cells[1:] // the restart and crash cells only
	if notes, err := skipDatabaseFaults(&m, dbenv.ProviderDSN); err == nil || len(notes) != 2 {
		t.Fatalf("nothing left to run: %v, notes %q", err, notes)
	}
}
