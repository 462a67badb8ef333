package main

import (
	"io"
	"strings"
	"testing"

	"github.com/berkcansavur/relaybus/bench/result"
	"github.com/berkcansavur/relaybus/internal/dbenv"
)

func TestSkipCells(t *testing.T) {
	o, err := parseCompare([]string{"--base", "a", "--candidate", "b", "--full", "--skip-cells", "^8 inst"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range o.matrix.Cells {
		if strings.HasPrefix(c.Name, "8 inst") {
			t.Errorf("cell %q not skipped", c.Name)
		}
	}
	if len(o.skipped) != 6 || o.matrix.Mode != result.ModeCustom {
		t.Errorf("skipped %d cells (want the 6 of 8 instances), mode %q", len(o.skipped), o.matrix.Mode)
	}
	if _, err := parseCompare([]string{"--base", "a", "--candidate", "b", "--skip-cells", "^no such cell"}, io.Discard); err == nil {
		t.Error("--skip-cells matching nothing is accepted")
	}
	if _, err := parseCompare([]string{"--base", "a", "--candidate", "b", "--skip-cells", "("}, io.Discard); err == nil {
		t.Error("an invalid --skip-cells expression is accepted")
	}
}

// With a server the harness did not start, the cells that restart or
// crash it are skipped with a note, and a run of nothing else is an
// error.
func TestSkipDatabaseFaults(t *testing.T) {
	o, err := parseCompare([]string{"--base", "a", "--candidate", "b", "--quick", "--scenarios", "4"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if notes, err := skipDatabaseFaults(&o.matrix, dbenv.ProviderLocal); err != nil || len(notes) != 0 || len(o.matrix.Cells) != 2 {
		t.Fatalf("local: %v, notes %q, %d cells", err, notes, len(o.matrix.Cells))
	}
	notes, err := skipDatabaseFaults(&o.matrix, dbenv.ProviderDSN)
	if err != nil || len(notes) != 1 || !strings.Contains(notes[0], "database crash") || !strings.Contains(notes[0], "provider dsn") || len(o.matrix.Cells) != 1 {
		t.Fatalf("dsn: %v, notes %q, %d cells", err, notes, len(o.matrix.Cells))
	}
	o, err = parseCompare([]string{"--base", "a", "--candidate", "b", "--full", "--scenarios", "4", "--skip-cells", "^SIGKILL 1 of 2 dispatchers, poison"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if notes, err := skipDatabaseFaults(&o.matrix, dbenv.ProviderDSN); err == nil || len(notes) != 2 {
		t.Fatalf("nothing left to run: %v, notes %q", err, notes)
	}
}
