package runner

import (
	"context"
	"fmt"
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

// TestPlanCellRounds: a cell with RoundsMax runs that many rounds, in
// ABBA order, and the cells after it keep the matrix's.
func TestPlanCellRounds(t *testing.T) {
	t.Parallel()
	m := scenarios.Quick()
	m.Cells = m.Cells[:3]
	m.Rounds = 4
	m.Cells[1].RoundsMax = 2
	ws, err := Plan(&m, "abc12")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, w := range ws {
		got = append(got, fmt.Sprintf("%d%s%d", w.Cell, w.Side[:1], w.Round))
	}
	want := "0b1 0c1 0c2 0b2 0b3 0c3 0c4 0b4 1b1 1c1 1c2 1b2 2b1 2c1 2c2 2b2 2b3 2c3 2c4 2b4"
	if strings.Join(got, " ") != want {
		t.Fatalf("plan %s, want %s", strings.Join(got, " "), want)
	}
	m.Cells[1].RoundsMax = 6 // more than the matrix's: the matrix's
	if ws, _ := Plan(&m, "abc12"); len(ws) != 3*8 {
		t.Fatalf("%d windows, want 24", len(ws))
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

func TestProgression(t *testing.T) {
	set := map[int64]bool{}
	for _, i := range []int64{1, 4, 7, 10, 12, 13, 20} {
		set[i] = true
	}
	if s, st, n := progression(set, 10); s != 1 || st != 3 || n != 5 {
		t.Errorf("progression = %d, %d, %d; want 1, 3, 5 (1 4 7 10 13)", s, st, n)
	}
	if s, st, n := progression(set, 2); s != 12 || st != 1 || n != 2 {
		t.Errorf("want 2: %d, %d, %d; want 12, 1, 2 (stride 1 first)", s, st, n)
	}
	if _, _, n := progression(map[int64]bool{}, 5); n != 0 {
		t.Errorf("empty set: n %d", n)
	}
	if s, st, n := progression(map[int64]bool{7: true}, 5); s != 7 || st != 1 || n != 1 {
		t.Errorf("one index: %d, %d, %d", s, st, n)
	}
}

func TestUpgradeNothingToUpgrade(t *testing.T) {
	step := &Step{Server: newFakeCluster()}
	u := scenarios.Quick().Upgrade
	res := step.Upgrade(context.Background(), u, &Side{Name: result.SideBase, Code: "abc"}, &Side{Name: result.SideCandidate, Code: "abc"}, "rb_x_upgrade", t.TempDir())
	if res.Skipped == "" || !strings.Contains(res.Skipped, "nothing to upgrade") || res.Verdict() != "skipped" || res.IsValid() {
		t.Errorf("A/A upgrade: %+v", res)
	}
}
