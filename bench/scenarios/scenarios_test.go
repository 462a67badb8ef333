package scenarios

import (
	"reflect"
	"strings"
	"testing"

	"github.com/berkcansavur/relaybus/bench/result"
)

func TestMatricesValidate(t *testing.T) {
	for _, mode := range []string{"smoke", "quick", "full"} {
		m, err := ByMode(mode)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Validate(); err != nil {
			t.Errorf("%s: %v", mode, err)
		}
		seen := map[string]bool{}
		for _, c := range m.Cells {
			key := Names[c.Scenario] + "/" + c.Name
			if seen[key] {
				t.Errorf("%s: duplicate cell %s", mode, key)
			}
			seen[key] = true
		}
	}
	for _, m := range []Matrix{Quick(), Full()} {
		for _, n := range []int{Publish, Dispatch, Keyed, Faults, Mixed, Work} {
			if !hasScenario(m, n) {
				t.Errorf("%s lacks scenario %d", m.Mode, n)
			}
		}
	}
}

// Handler-work cells inject no fault: every repeat is a duplicate there.
func TestWorkCells(t *testing.T) {
	for _, m := range []Matrix{Quick(), Full()} {
		n := 0
		for _, c := range m.Cells {
			if c.Scenario != Work {
				continue
			}
			n++
			if c.AllowRedelivery || c.KillDispatcherAt != 0 || c.RestartDBAt != 0 || c.Workload.HandlerCostUs == 0 ||
				c.DispatcherProcs != 3 || c.Dispatcher.LeaseMs != 2000 {
				t.Errorf("%s: work cell %+v", m.Mode, c)
			}
		}
		if n != 2 {
			t.Errorf("%s: %d work cells, want 2 (5 ms and 20 ms handlers)", m.Mode, n)
		}
	}
}

func TestRoundsAreEven(t *testing.T) {
	m := Quick()
	for _, r := range []int{0, 1, 3, 5, MaxRounds + 2} {
		m.Rounds = r
		if err := m.Validate(); err == nil || !strings.Contains(err.Error(), "even") {
			t.Errorf("rounds %d: %v", r, err)
		}
	}
}

func hasScenario(m Matrix, n int) bool {
	for _, c := range m.Cells {
		if c.Scenario == n {
			return true
		}
	}
	return false
}

func TestFilterAndErrors(t *testing.T) {
	m := Quick()
	if err := m.Filter([]int{2, 3}); err != nil {
		t.Fatal(err)
	}
	for _, c := range m.Cells {
		if c.Scenario != 2 && c.Scenario != 3 {
			t.Fatalf("filter kept %d", c.Scenario)
		}
	}
	if err := m.Filter([]int{99}); err == nil || !strings.Contains(err.Error(), "unknown scenario 99") {
		t.Fatalf("filter 99: %v", err)
	}
	m = Quick()
	m.Rounds = 0
	if err := m.Validate(); err == nil {
		t.Fatal("rounds 0 accepted")
	}
	c := faultCell(false)
	c.DispatcherProcs = 1
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "at least 2") {
		t.Fatalf("kill with one dispatcher: %v", err)
	}
}

func TestUpgradeScenario(t *testing.T) {
	q := Quick()
	if q.Upgrade == nil || q.Upgrade.Validate() != nil {
		t.Fatalf("quick has no valid upgrade: %+v", q.Upgrade)
	}
	if err := q.Filter([]int{UpgradeScenario}); err != nil || len(q.Cells) != 0 || q.Upgrade == nil || q.Validate() != nil {
		t.Errorf("--scenarios 6: %v, %d cells, upgrade %v", err, len(q.Cells), q.Upgrade)
	}
	q = Quick()
	if err := q.Filter([]int{Dispatch}); err != nil || q.Upgrade != nil {
		t.Errorf("--scenarios 2 keeps the upgrade: %v", err)
	}
	s := Smoke()
	if err := s.Filter([]int{UpgradeScenario}); err != nil || len(s.Cells) != 0 || s.Upgrade == nil || s.Validate() != nil {
		t.Errorf("smoke --scenarios 6: %v, %d cells, upgrade %v", err, len(s.Cells), s.Upgrade)
	}
	s = Smoke()
	if err := s.Filter([]int{Dispatch}); err != nil || len(s.Cells) != 1 || s.Upgrade != nil {
		t.Errorf("smoke --scenarios 2: %v, %d cells, upgrade %v", err, len(s.Cells), s.Upgrade)
	}
	s = Quick()
	s.Upgrade = nil
	if err := s.Filter([]int{UpgradeScenario}); err == nil || !strings.Contains(err.Error(), "not part of mode quick") {
		t.Errorf("a mode without an upgrade, --scenarios 6: %v", err)
	}
	bad := *Quick().Upgrade
	bad.BaseDispatchers = 1
	if err := bad.Validate(); err == nil {
		t.Error("an upgrade with one base dispatcher (the one killed) validates")
	}
	c := Cell{Scenario: UpgradeScenario, Name: "x", Workload: workload("none", 0), DispatcherProcs: 1}
	if err := c.Validate(); err == nil {
		t.Error("scenario 6 as a cell validates")
	}
	unbatched := false
	for _, c := range Full().Cells {
		if c.Dispatcher.CompletionWindowDisabled {
			unbatched = c.Config()["completion_window"] == "disabled"
		}
	}
	if !unbatched {
		t.Error("the full matrix has no cell of the unbatched completion path")
	}
}

// The server must allow every pool of a window: the full matrix's 8
// processes with pools of 64 hold 512 connections.
func TestConnections(t *testing.T) {
	f := Full()
	if got := f.Connections(0); got != 8*64 {
		t.Errorf("full matrix: %d connections, want %d (8 processes x pool 64)", got, 8*64)
	}
	q := Quick()
	if got, want := q.Connections(10), 2*40+10; got != want {
		t.Errorf("quick matrix: %d connections, want %d (2 processes x pool 40, plus 10)", got, want)
	}
}

func TestFitBaseLease(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		version string
		want    int
	}{
		{"0.1.0", 20_000}, {"0.1.1", 20_000}, {"0.1.2", 5000}, {"0.2.0", 5000}, {"0.2.0-dev", 5000},
		{"1.0.0", 5000}, {"0.10.0", 5000}, {"", 20_000}, {"river 0.14", 20_000}, {"0.2", 20_000},
	} {
		u := upgrade(100, 20_000)
		note := u.FitBaseLease(tc.version)
		if u.BaseDispatcher.LeaseMs != tc.want || (note == "") != (tc.want == 20_000) {
			t.Errorf("FitBaseLease(%q): lease %d, note %q; want %d", tc.version, u.BaseDispatcher.LeaseMs, note, tc.want)
		}
	}
	// --full's 60 s lease is shortened the same way; nil is nothing.
	u := upgrade(100, 60_000)
	if u.FitBaseLease("0.2.0"); u.BaseDispatcher.LeaseMs != 5000 {
		t.Errorf("full: lease %d; want 5000", u.BaseDispatcher.LeaseMs)
	}
	var none *Upgrade
	if n := none.FitBaseLease("0.2.0"); n != "" {
		t.Errorf("nil upgrade: note %q", n)
	}
}

// The crash cell: the fault cells' workload and lease, three crashes
// spread over the window and no kill; --quick runs it in 2 rounds, the
// full matrix in all of its.
func TestCrashCell(t *testing.T) {
	for _, tc := range []struct {
		m      Matrix
		rounds int
	}{{Quick(), 2}, {Full(), 6}} {
		var crash []Cell
		for _, c := range tc.m.Cells {
			if len(c.CrashDBAt) > 0 {
				crash = append(crash, c)
			}
		}
		if len(crash) != 1 {
			t.Fatalf("%s: %d crash cells, want 1", tc.m.Mode, len(crash))
		}
		c, f := crash[0], faultCell(false)
		if c.Scenario != Faults || len(c.CrashDBAt) != 3 || c.KillDispatcherAt != 0 || c.RestartDBAt != 0 || !c.AllowRedelivery ||
			c.Dispatcher.LeaseMs != f.Dispatcher.LeaseMs || c.DispatcherProcs != f.DispatcherProcs || c.Workload.PoisonEvery != f.Workload.PoisonEvery || c.Workload.MaxAttempts != f.Workload.MaxAttempts {
			t.Errorf("%s: crash cell %+v", tc.m.Mode, c)
		}
		if got := c.Rounds(tc.m.Rounds); got != tc.rounds {
			t.Errorf("%s: crash cell runs %d rounds, want %d", tc.m.Mode, got, tc.rounds)
		}
		if cfg := c.Config(); cfg["crash_db_at"] == nil {
			t.Errorf("%s: config %v names no crashes", tc.m.Mode, cfg)
		}
	}
	q := Quick()
	if err := q.Filter([]int{Faults}); err != nil || len(q.Cells) != 2 {
		t.Fatalf("--quick --scenarios 4: %v, %d cells, want the kill and the crash cells", err, len(q.Cells))
	}
	bad := map[string]func(*Cell){
		"crash point 0":          func(c *Cell) { c.CrashDBAt = []float64{0, 0.5} },
		"crash point 1":          func(c *Cell) { c.CrashDBAt = []float64{0.5, 1} },
		"crash points unordered": func(c *Cell) { c.CrashDBAt = []float64{0.5, 0.2} },
		"crash points repeated":  func(c *Cell) { c.CrashDBAt = []float64{0.5, 0.5} },
		"too many crashes":       func(c *Cell) { c.CrashDBAt = make([]float64, MaxCrashes+1) },
		"odd rounds":             func(c *Cell) { c.RoundsMax = 3 },
		"negative rounds":        func(c *Cell) { c.RoundsMax = -2 },
		"crashes, no dispatcher": func(c *Cell) { c.DispatcherProcs, c.KillDispatcherAt = 0, 0 },
	}
	for name, mutate := range bad {
		c := crashCell(2)
		mutate(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// A server the harness did not start takes neither a restart nor a
// crash: the cells that need one are skipped with the reason.
func TestSkipDatabaseFaults(t *testing.T) {
	m := Full()
	n := len(m.Cells)
	notes := m.SkipDatabaseFaults("the server is not ours")
	if len(notes) != 2 || len(m.Cells) != n-2 {
		t.Fatalf("notes %q, %d of %d cells left; want the restart and crash cells skipped", notes, len(m.Cells), n)
	}
	for _, c := range m.Cells {
		if c.DatabaseFaults() {
			t.Errorf("kept %s", c.Name)
		}
	}
	if !strings.Contains(notes[1], "faults / database crash") || !strings.HasSuffix(notes[1], ": the server is not ours") {
		t.Errorf("note %q", notes[1])
	}
	if !hasScenario(m, Faults) {
		t.Error("the kill cell was skipped too")
	}
}

// The batch cells (scenario 10) compare two handler modes of one ref: they
// run only when --scenarios names them, and their sides differ in
// handler mode only.
func TestBatchCellsAreOptIn(t *testing.T) {
	for _, m := range []Matrix{Quick(), Full()} {
		for _, c := range m.Cells {
			if c.Scenario == Batch {
				t.Fatalf("%s: cell %q runs without --scenarios 10", m.Mode, c.Name)
			}
		}
		if err := m.Filter([]int{Batch}); err != nil {
			t.Fatal(err)
		}
		if len(m.Cells) != 3 {
			t.Fatalf("%s: --scenarios 10 selects %d cells, want 3", m.Mode, len(m.Cells))
		}
		withCalls := 0
		if err := m.Validate(); err != nil {
			t.Fatal(err)
		}
		for _, c := range m.Cells {
			if c.Preload == 0 {
				t.Errorf("%s: cell %q has no preload", m.Mode, c.Name)
			}
			base, cand := c.DispatcherFor(result.SideBase), c.DispatcherFor(result.SideCandidate)
			if base.HandlerBatchMax != 0 || cand.HandlerBatchMax == 0 {
				t.Errorf("cell %q: base batch max %d, candidate %d", c.Name, base.HandlerBatchMax, cand.HandlerBatchMax)
			}
			if cand.HandlerBatchCalls > 0 {
				withCalls++
			}
			cand.HandlerBatchMax, cand.HandlerBatchCalls = 0, 0
			if base.HandlerCallWaitUs == 0 || !reflect.DeepEqual(base, cand) {
				t.Errorf("cell %q: the sides differ in more than handler mode: %+v vs %+v", c.Name, base, cand)
			}
		}
		if withCalls != 1 {
			t.Errorf("%s: %d cells set the batch side's MaxCalls, want 1 (the third)", m.Mode, withCalls)
		}
	}
}
