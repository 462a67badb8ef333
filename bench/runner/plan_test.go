package runner

import (
	"strings"
	"testing"

	"github.com/berkcansavur/relaybus/bench/result"
	"github.com/berkcansavur/relaybus/bench/scenarios"
)

func TestPlanABBA(t *testing.T) {
	t.Parallel()
	m := scenarios.Quick()
	m.Cells = m.Cells[:2]
	m.Rounds = 4
	ws, err := Plan(&m, "abc12")
	if err != nil {
		t.Fatal(err)
	}
	if len(ws) != 2*4*2 {
		t.Fatalf("%d windows, want 16", len(ws))
	}
	var got []string
	for _, w := range ws[:8] {
		got = append(got, w.Side[:1])
	}
	if strings.Join(got, "") != "bccbbccb" {
		t.Fatalf("first cell's order %q, want ABBA: bccbbccb", strings.Join(got, ""))
	}
	for i, w := range ws {
		cell, pos := i/8, i%8
		if w.Cell != cell || w.Order != pos+1 || w.Round != pos/2+1 {
			t.Errorf("window %d = %+v, want cell %d order %d round %d", i, w, cell, pos+1, pos/2+1)
		}
		if w.Side != result.SideBase && w.Side != result.SideCandidate {
			t.Errorf("window %d side %q", i, w.Side)
		}
	}
	// Names are unique, and both sides of a round have names of the same
	// length (the name is in every event id).
	seen := map[string]bool{}
	for i := 0; i < len(ws); i += 2 {
		a, b := ws[i], ws[i+1]
		if a.Round != b.Round || len(a.Name) != len(b.Name) || a.Name == b.Name {
			t.Errorf("round pair %+v / %+v", a, b)
		}
		for _, w := range []Window{a, b} {
			if seen[w.Name] || seen[w.Dir] {
				t.Errorf("name or dir reused: %+v", w)
			}
			seen[w.Name], seen[w.Dir] = true, true
		}
	}
	if ws[0].Name != "rb_abc12_c01_r1_b" || ws[0].Dir != "cell01/r1-base" {
		t.Errorf("first window %+v", ws[0])
	}
}

func TestPlanRejectsBadRunID(t *testing.T) {
	t.Parallel()
	m := scenarios.Smoke()
	for _, id := range []string{"", "ABC", "a-b", "toolongrunid1"} {
		if _, err := Plan(&m, id); err == nil || !strings.HasPrefix(err.Error(), "runner: ") {
			t.Errorf("Plan(%q): %v", id, err)
		}
	}
}
