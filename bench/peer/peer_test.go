package peer

import (
	"strings"
	"testing"

	"github.com/berkcansavur/relaybus/bench/protocol"
	"github.com/berkcansavur/relaybus/bench/scenarios"
)

var riverCaps = []string{"peer", "peer:river", "no-key-order", "store:postgres"}

func TestByName(t *testing.T) {
	t.Parallel()
	p, ok := ByName("river")
	if !ok || p.Dir() != "bench/peers/river" || !p.Versioned() || p.Modules[0] != "github.com/riverqueue/river" {
		t.Fatalf("ByName(river) = %+v, %v", p, ok)
	}
	if in := p.Inputs(); in[0] != "bench/peers/river" || in[len(in)-1] != "go.sum" {
		t.Errorf("Inputs() = %q", in)
	}
	if _, ok := ByName("HEAD"); ok {
		t.Fatal("HEAD is a peer")
	}
	if _, ok := ByName("relaybus"); ok {
		t.Fatal("relaybus is a peer")
	}
	for _, d := range Peers {
		if d.Name == "" || d.Title == "" || d.Tables.Deliveries == "" || d.TablePattern == "" || len(d.Runs) == 0 {
			t.Errorf("peer %q lacks a required field: %+v", d.Name, d)
		}
	}
}

func TestOfHello(t *testing.T) {
	t.Parallel()
	if d := OfHello([]string{"store:postgres"}); d != Relaybus || d.IsPeer() {
		t.Errorf("a relaybus hello: %+v", d)
	}
	if d := OfHello(riverCaps); d != River {
		t.Errorf("a river hello: %+v", d)
	}
	d := OfHello([]string{"peer", "peer:other"})
	if !d.IsPeer() || d.Name != "other" || d.Tables.Deliveries != "" || !strings.Contains(d.About, "no description") {
		t.Errorf("an unknown peer: %+v", d)
	}
}

func sides(baseCaps []string) []Side {
	return []Side{{Name: "base", Label: "base (river)", Caps: baseCaps}, {Name: "candidate", Label: "candidate (HEAD)", Caps: []string{"store:postgres"}}}
}

func hasScenario(m scenarios.Matrix, n int) bool {
	for _, c := range m.Cells {
		if c.Scenario == n {
			return true
		}
	}
	return false
}

func TestFitRelaybus(t *testing.T) {
	t.Parallel()
	m := scenarios.Quick()
	notes, err := Fit(&m, []Side{{Name: "base", Caps: nil}, {Name: "candidate"}})
	if err != nil || notes != nil || len(m.Cells) != len(scenarios.Quick().Cells) || m.Upgrade == nil {
		t.Fatalf("two relaybus sides: %q, %v, %d cells", notes, err, len(m.Cells))
	}
	for _, c := range m.Cells {
		if c.Sides != nil {
			t.Errorf("%s: per-side settings between relaybus sides", c.Name)
		}
	}
}

func TestFitRiver(t *testing.T) {
	t.Parallel()
	m := scenarios.Quick()
	notes, err := Fit(&m, sides(riverCaps))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range m.Cells {
		if c.Scenario == scenarios.Keyed || c.Scenario == scenarios.Work {
			t.Errorf("kept %s / %s for River", scenarios.Names[c.Scenario], c.Name)
		}
	}
	for _, n := range []int{scenarios.Publish, scenarios.Dispatch, scenarios.Faults, scenarios.Mixed} {
		if !hasScenario(m, n) {
			t.Errorf("skipped scenario %d for River", n)
		}
	}
	if m.Upgrade != nil {
		t.Error("kept scenario 6 (the upgrade) for River")
	}
	text := strings.Join(notes, "\n")
	for _, want := range []string{
		"skipped for base (river): keyed / 1 inst, 4 hot keys",
		"no-key-order",
		"skipped for base (river): work / ",
		"skipped for base (river): upgrade (scenario 6)",
		"base (river) is River",
		"every 30 s (not configurable)",
		"LISTEN/NOTIFY",
		"River's own benchmark: MaxWorkers 2000",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("notes lack %q:\n%s", want, text)
		}
	}
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}

	// The tuned dispatch cell: River runs its own fetch cooldown there,
	// relaybus the cell's settings; beside it, the cell where River runs
	// as its own benchmark does.
	var tuned, own *scenarios.Cell
	for i := range m.Cells {
		c := &m.Cells[i]
		if c.Scenario == scenarios.Dispatch && c.Tuned {
			if strings.Contains(c.Name, "own benchmark") {
				own = c
			} else {
				tuned = c
			}
		}
	}
	if tuned == nil || own == nil {
		t.Fatalf("tuned %v, own %v", tuned, own)
	}
	if d := tuned.DispatcherFor("base"); d.Concurrency != 200 || d.Options["fetch_cooldown_ms"] != 2 {
		t.Errorf("River in the tuned cell: %+v", d)
	}
	if d := tuned.DispatcherFor("candidate"); d.Options != nil || d.Concurrency != 200 {
		t.Errorf("relaybus in the tuned cell: %+v", d)
	}
	if tuned.Dispatcher.Options != nil {
		t.Errorf("the cell's own settings changed: %+v", tuned.Dispatcher)
	}
	if d := own.DispatcherFor("base"); d.Options["max_workers"] != 2000 || d.Options["fetch_poll_interval_ms"] != 20 || d.Options["fetch_cooldown_ms"] != 2 {
		t.Errorf("River in its own cell: %+v", d)
	}
	if d := own.DispatcherFor("candidate"); d.Concurrency != 200 || d.Batch != 200 || d.PollMs != 50 || d.Options != nil {
		t.Errorf("relaybus in River's own cell: %+v", d)
	}
	settings := own.SideSettings()
	if !strings.Contains(settings["base"], "River with MaxWorkers 2000 (max_workers, as its own benchmark runs it), FetchPollInterval 20 ms") ||
		!strings.HasPrefix(settings["candidate"], "relaybus with concurrency 200, batch 200, poll 50 ms") {
		t.Errorf("own cell's settings: %q", settings)
	}
	for _, c := range m.Cells {
		if c.DispatcherProcs > 0 && len(c.SideSettings()) != 2 {
			t.Errorf("%s: settings %q, want both sides'", c.Name, c.SideSettings())
		}
	}
	// A fault cell is not tuned: River's default cooldown, lowered to
	// the poll.
	for _, c := range m.Cells {
		if c.Scenario == scenarios.Faults {
			if s := c.SideSettings()["base"]; !strings.Contains(s, "FetchCooldown 100 ms (River's default)") || !strings.Contains(s, "at most 20 jobs per cooldown") {
				t.Errorf("fault cell settings %q", s)
			}
		}
	}
}

// TestFitTwoPeers: River against River runs its own settings on both
// sides of the added cell.
func TestFitTwoPeers(t *testing.T) {
	t.Parallel()
	m := scenarios.Quick()
	if err := m.Filter([]int{scenarios.Dispatch}); err != nil {
		t.Fatal(err)
	}
	if _, err := Fit(&m, []Side{{Name: "base", Label: "base (river)", Caps: riverCaps}, {Name: "candidate", Label: "candidate (river@v0.51.0)", Caps: riverCaps}}); err != nil {
		t.Fatal(err)
	}
	if len(m.Cells) != 2 || !strings.HasSuffix(m.Cells[1].Name, "poll 50ms), each as its own benchmark runs it") {
		t.Fatalf("cells %d, own cell %q", len(m.Cells), m.Cells[len(m.Cells)-1].Name)
	}
	for _, side := range []string{"base", "candidate"} {
		if d := m.Cells[1].DispatcherFor(side); d.Options["max_workers"] != 2000 {
			t.Errorf("%s in the own cell: %+v", side, d)
		}
	}
}

func TestFitSkips(t *testing.T) {
	t.Parallel()
	// A peer that keeps key order runs scenario 3.
	m := scenarios.Quick()
	if _, err := Fit(&m, sides([]string{"peer", "peer:river"})); err != nil || !hasScenario(m, scenarios.Keyed) || hasScenario(m, scenarios.Work) {
		t.Errorf("an ordered peer: keyed skipped or work kept (%v)", err)
	}
	// Only skipped cells: nothing left, and Fit says so.
	m = scenarios.Quick()
	if err := m.Filter([]int{scenarios.Keyed}); err != nil {
		t.Fatal(err)
	}
	if _, err := Fit(&m, sides(riverCaps)); err == nil || !strings.Contains(err.Error(), "every selected cell is skipped") {
		t.Errorf("all skipped: %v", err)
	}
}

func TestRiverFetchCooldown(t *testing.T) {
	t.Parallel()
	for poll, want := range map[int]int{0: 100, 10: 10, 50: 50, 100: 100, 1000: 100} {
		if got := RiverFetchCooldownMs(poll); got != want {
			t.Errorf("RiverFetchCooldownMs(%d) = %d, want %d", poll, got, want)
		}
	}
	// Options arrive as JSON numbers in a worker.
	s := riverSettings(protocol.Dispatcher{Concurrency: 50, PollMs: 50, Options: map[string]any{"fetch_cooldown_ms": 5.0}})
	if !strings.Contains(s, "FetchCooldown 5 ms (fetch_cooldown_ms, set by the harness)") || !strings.Contains(s, "about 10000/s each") {
		t.Errorf("settings %q", s)
	}
}

func TestFitCeiling(t *testing.T) {
	t.Parallel()
	caps := []string{"peer", "peer:ceiling", "no-faults", "store:postgres"}
	m := scenarios.Quick()
	notes, err := Fit(&m, sides(caps))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{scenarios.Publish, scenarios.Dispatch, scenarios.Keyed, scenarios.Mixed} {
		if !hasScenario(m, n) {
			t.Errorf("skipped scenario %d for the ceiling", n)
		}
	}
	if hasScenario(m, scenarios.Faults) || hasScenario(m, scenarios.Work) || m.Upgrade != nil {
		t.Error("kept the fault, work or upgrade cells for the ceiling")
	}
	text := strings.Join(notes, "\n")
	if !strings.Contains(text, "is the plain-SQL ceiling") || !strings.Contains(text, "no-faults") || strings.Contains(text, "own benchmark") {
		t.Errorf("notes:\n%s", text)
	}
	if !strings.Contains(text, "drains the cell's preload inside the window") {
		t.Errorf("no note of the hot-key cell left out:\n%s", text)
	}
	for _, c := range m.Cells {
		if c.Scenario == scenarios.Keyed && c.Workload.Keys == "hot" {
			t.Errorf("kept the hot-key cell %s for the ceiling", c.Name)
		}
		if c.Scenario == scenarios.Dispatch {
			if s := c.SideSettings()["base"]; !strings.Contains(s, "4 claim streams per process, batch 200") {
				t.Errorf("%s: settings %q", c.Name, s)
			}
		}
	}
}
