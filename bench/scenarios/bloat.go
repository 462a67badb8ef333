package scenarios

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// The bloat scenarios (issue 31): what a snapshot held open beside the
// queue, and a long run with autovacuum at its defaults, do to it. Every
// completion that deletes or updates a delivery row leaves a dead tuple;
// while a transaction holds a snapshot older than that tuple, vacuum
// cannot remove it, and the queue's scans wade through it.
const (
	// HeldSnapshot: cells with a snapshot held through a 60 s window, at
	// a fixed offered rate and as a drain, beside the same cell without
	// it (the ratio of the two, on one side, is the figure).
	HeldSnapshot = 8
	// Soak: 10 minutes of mixed load with autovacuum at its defaults,
	// sampled every 10 s.
	Soak = 9
)

// ModeBloat is the mode of the bloat matrix (--bloat).
const ModeBloat = "bloat"

func init() {
	Names[HeldSnapshot] = "held-snapshot"
	Names[Soak] = "soak"
}

// The snapshots a cell can hold through its window (Cell.Hold).
const (
	// HoldNone: nothing is held (the cell to compare with).
	HoldNone = ""
	// HoldRepeatableRead: BEGIN ISOLATION LEVEL REPEATABLE READ and one
	// query, which takes the transaction's snapshot; the transaction then
	// stays open, idle, until the window ends. Its backend_xmin holds the
	// database's xmin horizon where it was.
	HoldRepeatableRead = "repeatable-read"
	// HoldLongQuery: one statement that runs through the window (SELECT
	// pg_sleep, in its own read-committed transaction), cancelled when
	// the window ends: a running statement keeps its snapshot, so it
	// holds the horizon as an analytics query would.
	HoldLongQuery = "long-query"
)

// holdNames says what each hold is, for cell names and errors.
var holdNames = map[string]string{
	HoldNone:           "no snapshot held",
	HoldRepeatableRead: "REPEATABLE READ snapshot held",
	HoldLongQuery:      "long query held",
}

// The bloat cells' window and sampling.
const (
	// HeldWindow is the held-snapshot cells' window: long enough for the
	// dead tuples a held snapshot keeps to matter (at 1,000 deliveries/s
	// 60,000 of them).
	HeldWindow = time.Minute
	// HeldSampleEvery: the held-snapshot cells sample every 5 s.
	HeldSampleEvery = 5 * time.Second
	// SoakWindow and SoakSampleEvery: the soak's window and sampling.
	SoakWindow      = 10 * time.Minute
	SoakSampleEvery = 10 * time.Second
	// heldRate is the offered rate of the held-snapshot rate cells, in
	// events per second (PlanetScale's published test ran 800 jobs/s).
	heldRate = 1000
	// heldDrainRate is the rate the held-snapshot drain cells' preload
	// feeds over warm-up and window (FitPreloads): one dispatcher with
	// concurrency and batch 50 ran 1,060 (HEAD) to 1,160 (v0.1.0)
	// deliveries/s in 15 s windows on this 2-core machine while it was
	// shared; a store that runs it dry gets its cell run again with twice
	// the preload (runner.MaxPreloadRaises). What a window leaves is
	// drained after it (2,000 to 3,000/s here), so a larger margin costs
	// every window minutes.
	heldDrainRate = 5_000
	// soakRate is the soak's offered rate.
	soakRate = 1000
	// bloatRounds: the held-snapshot cells run at most this many rounds
	// (the --full matrix's six would make them 70 minutes); the soak 2.
	bloatRounds = 4
)

// WindowIn is the cell's measured window in a matrix whose window is m:
// the cell's own when it has one.
func (c *Cell) WindowIn(m time.Duration) time.Duration {
	if c.Window > 0 {
		return c.Window
	}
	return m
}

// SetWindow makes d the window of the matrix and of every cell in it
// (--window: a cell's own window gives way too).
func (m *Matrix) SetWindow(d time.Duration) {
	m.Window = d
	for i := range m.Cells {
		m.Cells[i].Window = 0
	}
}

func (c *Cell) bloatConfig(m map[string]any) {
	if c.Window > 0 {
		m["window_s"] = c.Window.Seconds()
	}
	if c.Hold != HoldNone {
		m["hold"] = c.Hold
	}
	if c.SampleEvery > 0 {
		m["sample_every_s"] = c.SampleEvery.Seconds()
	}
	if c.Scenario == HeldSnapshot {
		// The cells that differ only by their hold share a group: the
		// report's ratio of each hold to none is taken within it.
		m["hold_group"] = heldGroup(c.Name)
	}
}

// heldGroup is a held-snapshot cell's name without its hold.
func heldGroup(name string) string {
	for _, h := range holdNames {
		if g, ok := strings.CutSuffix(name, ", "+h); ok {
			return g
		}
	}
	return name
}

func (c *Cell) validateBloat() error {
	if _, ok := holdNames[c.Hold]; !ok {
		return fmt.Errorf("scenarios: cell %q: unknown hold %q (want %q or %q)", c.Name, c.Hold, HoldRepeatableRead, HoldLongQuery)
	}
	switch {
	case c.Window != 0 && (c.Window < MinWindow || c.Window > MaxWindow):
		return fmt.Errorf("scenarios: cell %q: window %s outside %s..%s", c.Name, c.Window, MinWindow, MaxWindow)
	case c.SampleEvery < 0 || (c.SampleEvery > 0 && c.SampleEvery < 100*time.Millisecond):
		return fmt.Errorf("scenarios: cell %q: sampling every %s: want 0 (none) or at least 100ms", c.Name, c.SampleEvery)
	case c.Hold != HoldNone && c.DatabaseFaults():
		return fmt.Errorf("scenarios: cell %q: a held snapshot and a database fault do not go together (the fault ends the hold)", c.Name)
	}
	return nil
}

// heldCell is a held-snapshot cell: base with hold.
func heldCell(base Cell, hold string) Cell {
	c := base
	c.Scenario, c.Hold = HeldSnapshot, hold
	c.Name = base.Name + ", " + holdNames[hold]
	c.Window, c.SampleEvery, c.RoundsMax = HeldWindow, HeldSampleEvery, bloatRounds
	return c
}

// HeldCells are scenario 8's cells: a fixed offered rate (heldRate)
// against one tuned dispatcher, without a hold, with a REPEATABLE READ
// snapshot and with a long query; and a drain of a preload by one
// dispatcher, without a hold and with the REPEATABLE READ snapshot.
func HeldCells() []Cell {
	rate := steadyRate(mixedCell(heldRate, 1, tuned, "tuned"))
	drain := dispatchCell(HeldSnapshot, 1, conc50b50, heldDrainRate, workload("many", 1000), "drain, 1000 keys, ")
	var out []Cell
	for _, h := range []string{HoldNone, HoldRepeatableRead, HoldLongQuery} {
		out = append(out, heldCell(rate, h))
	}
	for _, h := range []string{HoldNone, HoldRepeatableRead} {
		out = append(out, heldCell(drain, h))
	}
	return out
}

// SoakCell is scenario 9: soakRate offered against two tuned dispatcher
// processes for SoakWindow, 1,000 keys, nothing held, autovacuum as the
// server runs it (the harness's servers keep its defaults), sampled
// every SoakSampleEvery.
func SoakCell() Cell {
	c := steadyRate(mixedCell(soakRate, 2, tuned, "tuned"))
	c.Scenario, c.Name = Soak, fmt.Sprintf("%d/s offered, 2 tuned dispatchers, %s", soakRate, SoakWindow)
	c.Window, c.SampleEvery, c.RoundsMax = SoakWindow, SoakSampleEvery, 2
	return c
}

// steadyRate gives a rate cell's publisher 16 publishers (and a pool
// of 20) where the mixed cells have 4: with one commit per event, 4
// publishers offer 1,000 events/s only while a commit takes under 4 ms,
// and the bloat cells' offered rate must be the one they name (the rate
// cap, not the publishers, bounds what they offer). On the shared
// 2-core machine (load average above 15) neither offered more than 210
// to 290/s: the machine, not the publishers, was the bound there.
func steadyRate(c Cell) Cell {
	c.Publisher.Publishers, c.PublisherPool = 16, 20
	return c
}

// BloatCells are the cells of scenarios 8 and 9.
func BloatCells() []Cell { return append(HeldCells(), SoakCell()) }

// Bloat is the bloat matrix (--bloat): scenarios 8 and 9 alone, two
// rounds. Scenario 8 is 20 windows of a minute, 8 of them followed by
// the drain of what they left of a preload (30 to 45 minutes); scenario
// 9 is 4 windows of 10 minutes (about 45).
func Bloat() Matrix {
	return Matrix{Mode: ModeBloat, Rounds: 2, Warmup: 2 * time.Second, Window: HeldWindow, Cells: BloatCells()}.fitted()
}

// scenarioList names every scenario, for errors.
func scenarioList() string {
	var parts []string
	for _, n := range slices.Sorted(maps.Keys(Names)) {
		parts = append(parts, fmt.Sprintf("%d %s", n, Names[n]))
	}
	return strings.Join(parts, ", ")
}
