package scenarios

import (
	"math"
	"strings"
	"testing"
	"time"
)

// TestBloatMatrix: the bloat matrix validates, its held cells run 60 s
// windows and their preloads feed that window, not the matrix's; --full
// carries the same cells; the cells of one group differ by their hold.
func TestBloatMatrix(t *testing.T) {
	m, err := ByMode(ModeBloat)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	groups := map[string][]string{}
	for _, c := range m.Cells {
		if c.Scenario != HeldSnapshot && c.Scenario != Soak {
			t.Errorf("cell %q of scenario %d in the bloat matrix", c.Name, c.Scenario)
		}
		if c.Scenario == HeldSnapshot {
			if c.WindowIn(time.Second) != HeldWindow || c.SampleEvery != HeldSampleEvery {
				t.Errorf("held cell %q: window %s, sampling %s", c.Name, c.WindowIn(time.Second), c.SampleEvery)
			}
			g := c.Config()["hold_group"].(string)
			groups[g] = append(groups[g], c.Hold)
		}
		if c.Preload > 0 {
			want := int(math.Ceil(c.PreloadRate * (m.Warmup + c.Window).Seconds()))
			if c.Preload != want {
				t.Errorf("cell %q: preload %d, want %d (its own window)", c.Name, c.Preload, want)
			}
		}
	}
	if len(groups) != 2 || len(groups["1000/s, tuned dispatchers"]) != 3 {
		t.Errorf("hold groups %v, want the rate cell's three holds and the drain's two", groups)
	}
	for g, holds := range groups {
		if holds[0] != HoldNone {
			t.Errorf("group %q: first hold %q, want none (the cell to compare with)", g, holds[0])
		}
	}
	soak := SoakCell()
	if soak.Window < 10*time.Minute || soak.SampleEvery != 10*time.Second || soak.Hold != HoldNone {
		t.Errorf("soak %+v: want 10+ minutes sampled every 10 s, nothing held", soak)
	}
	full := Full()
	n := 0
	for _, c := range full.Cells {
		if c.Scenario == HeldSnapshot || c.Scenario == Soak {
			n++
		}
	}
	if n != len(m.Cells) {
		t.Errorf("--full has %d bloat cells, want %d", n, len(m.Cells))
	}
	for _, c := range Quick().Cells {
		if c.Window != 0 {
			t.Errorf("--quick cell %q has a window of its own", c.Name)
		}
	}
	// --window gives every cell that window.
	m.SetWindow(3 * time.Second)
	for _, c := range m.Cells {
		if c.WindowIn(m.Window) != 3*time.Second {
			t.Errorf("after SetWindow, cell %q keeps %s", c.Name, c.WindowIn(m.Window))
		}
	}
	if err := m.Filter([]int{HeldSnapshot}); err != nil || len(m.Cells) != 5 {
		t.Errorf("filter 8: %v, %d cells", err, len(m.Cells))
	}
}

// TestBloatValidate: an unknown hold, a window out of bounds, a
// sampling too fine and a hold beside a database fault are refused.
func TestBloatValidate(t *testing.T) {
	for _, tc := range []struct {
		change func(*Cell)
		want   string
	}{
		{func(c *Cell) { c.Hold = "serializable" }, "unknown hold"},
		{func(c *Cell) { c.Window = 2 * MaxWindow }, "window"},
		{func(c *Cell) { c.SampleEvery = time.Millisecond }, "sampling"},
		{func(c *Cell) { c.RestartDBAt = 0.5 }, "fault"},
	} {
		c := HeldCells()[1]
		tc.change(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v", tc.want, err)
		}
	}
	if err := (&Matrix{}).Filter([]int{42}); err == nil || !strings.Contains(err.Error(), "8 held-snapshot, 9 soak") {
		t.Errorf("unknown scenario: %v, want the list of scenarios", err)
	}
}
