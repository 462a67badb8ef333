package main

import (
	"io"
	"strings"
	"testing"

	"github.com/berkcansavur/relaybus/bench/result"
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
