// Package scenarios defines the benchmark scenarios (numbered as in the
// 0.2 write-amplification document) and the cell matrices of --smoke,
// --quick and --full.
package scenarios

import (
	"fmt"
	"slices"
	"time"

	"github.com/berkcansavur/relaybus/bench/protocol"
)

// Scenario numbers and names.
const (
	Publish  = 1 // publish only
	Dispatch = 2 // dispatch of preloaded events
	Keyed    = 3 // keyed dispatch
	Faults   = 4 // SIGKILL, poison, database restart and crash
	Mixed    = 5 // steady state: offered rate against dispatchers
	// UpgradeScenario is the in-place upgrade of a live database from the
	// base's version to the candidate's: one run, not a cell of windows
	// (Matrix.Upgrade).
	UpgradeScenario = 6
	Work            = 7 // handlers that take time: leases renewed beside completions
	// Batch compares two handler modes of one ref: a handler of one
	// delivery (base side) and a batch handler (candidate side), each
	// call costing one round trip. Its cells are opt-in (Matrix.OptIn):
	// run with --scenarios 10 and the same ref on both sides. (8 and 9
	// are the bloat scenarios, bloat.go.)
	Batch = 10
)

// Names maps scenario numbers to the names used in results.
var Names = map[int]string{Publish: "publish", Dispatch: "dispatch", Keyed: "keyed", Faults: "faults", Mixed: "mixed",
	UpgradeScenario: "upgrade", Work: "work", Batch: "batch"}

// Limits checked by Validate.
const (
	MaxProcs   = 64
	MaxPreload = 10_000_000
	MaxRounds  = 100
	MaxWindow  = time.Hour
	MinWindow  = time.Second
	MaxCells   = 1000
	// MaxCrashes bounds the database crashes of one window.
	MaxCrashes = 10
	// DefaultLeaseMs is the library's lease (relaybus.DefaultLeaseDuration) for
	// cells that leave LeaseMs 0: it bounds how long after a fault a
	// delivery in flight may run again.
	DefaultLeaseMs = 30_000
)

// Cell is one configuration of one scenario: one table row.
type Cell struct {
	Scenario int
	Name     string
	// Workload is shared by both sides (IDPrefix is set per window).
	Workload protocol.Workload
	// PreloadRate, when above 0, sizes Preload (FitPreloads): the fastest
	// rate, in deliveries per second, the preload must feed over warm-up
	// and window, so that the window never runs dry (a window that does is
	// INVALID) whatever the window length.
	PreloadRate float64
	// Preload events are published before the window starts (scenarios
	// 2-4), by PreloadPublishers goroutines in batches of PreloadBatch.
	Preload           int
	PreloadPublishers int
	PreloadBatch      int
	// PublisherProcs processes each run Publisher during the window.
	PublisherProcs int
	Publisher      protocol.Publisher
	PublisherPool  int
	// DispatcherProcs processes each run Dispatcher during the window;
	// publish-only cells have none in the window and drain afterwards
	// with DrainDispatcher so the run can be validated.
	DispatcherProcs int
	Dispatcher      protocol.Dispatcher
	DispatcherPool  int
	// Fault plan (scenario 4), as fractions of the window.
	KillDispatcherAt float64 // > 0: SIGKILL dispatcher 0 at this point
	RestartDBAt      float64 // > 0: restart the database server then
	// CrashDBAt: crash the database server (immediate shutdown, then a
	// start through crash recovery) once at each of these points, in
	// increasing order: at the first claim a window dispatcher's counters
	// show after the point (runner: crashAfterClaim bounds the wait).
	CrashDBAt []float64
	// RoundsMax, when above 0, caps the cell's rounds below the
	// matrix's (an even number): a cell that is there for its validity
	// more than for its figures may run fewer windows than the rest.
	RoundsMax int
	// AllowRedelivery: the validator counts extra handles as
	// redeliveries (at-least-once), not duplicates.
	AllowRedelivery bool
	// Tuned: the dispatcher settings are tuned for throughput, so a
	// peer side runs its own throughput tuning here (peer.Descriptor.Tune).
	Tuned bool
	// Sides, when set, says per side (result.SideBase, SideCandidate) how
	// it runs the cell: in a comparison with a peer, what each side's
	// library makes of the settings, and where the sides run settings of
	// their own (peer.Fit), the dispatcher settings each side runs.
	Sides map[string]SideRun
	// Bloat cells (bloat.go): Window, when above 0, is this cell's
	// measured window in place of the matrix's; Hold is the snapshot the
	// runner holds open through the window (HoldNone, HoldRepeatableRead,
	// HoldLongQuery); SampleEvery, when above 0, samples the side's table
	// sizes and dead tuples during the window at this interval.
	Window      time.Duration
	Hold        string
	SampleEvery time.Duration
}

// SideRun is how one side runs a cell.
type SideRun struct {
	// Dispatcher is the side's window dispatchers' settings.
	Dispatcher protocol.Dispatcher
	// Settings says what they are in the side's library and why, for the
	// report ("River with MaxWorkers 200, ...").
	Settings string
}

// DispatcherFor is the dispatcher settings side runs the cell's window
// dispatchers with.
func (c *Cell) DispatcherFor(side string) protocol.Dispatcher {
	if r, ok := c.Sides[side]; ok {
		return r.Dispatcher
	}
	return c.Dispatcher
}

// SideSettings is what each side runs the cell with (Sides' Settings),
// nil when the sides run it alike.
func (c *Cell) SideSettings() map[string]string {
	var m map[string]string
	for side, r := range c.Sides {
		if r.Settings != "" {
			if m == nil {
				m = map[string]string{}
			}
			m[side] = r.Settings
		}
	}
	return m
}

// DrainDispatcher drains every cell after its window (not measured).
// Its handlers run without the workload's handler cost: the drain only
// lets the run validate, and a busy wait there would only make it slow.
// Its 10 ms poll matters where a store runs one delivery per key and
// poll (v0.1.0 with hot keys): a 50 ms poll drained 700 deliveries of 4
// keys in about 9 s.
var DrainDispatcher = protocol.Dispatcher{Concurrency: 200, Batch: 200, PollMs: 10}

// Config is the cell's configuration as recorded in the results.
func (c *Cell) Config() map[string]any {
	m := map[string]any{
		"scenario": c.Scenario, "handlers": len(c.Workload.Handlers), "keys": c.Workload.Keys,
		"key_count": c.Workload.KeyCount, "payload_bytes": c.Workload.PayloadBytes,
	}
	if c.Preload > 0 {
		m["preload"] = c.Preload
	}
	if c.PublisherProcs > 0 {
		m["publisher_procs"] = c.PublisherProcs
		m["publishers"] = c.Publisher.Publishers
		m["batch"] = c.Publisher.Batch
		m["publisher_pool"] = c.PublisherPool
		if c.Publisher.RatePerSec > 0 {
			m["offered_per_s"] = c.Publisher.RatePerSec * float64(c.PublisherProcs)
		}
	}
	if c.DispatcherProcs > 0 {
		m["instances"] = c.DispatcherProcs
		m["concurrency"] = c.Dispatcher.Concurrency
		m["dispatch_batch"] = c.Dispatcher.Batch
		m["dispatcher_pool"] = c.DispatcherPool
		m["poll_ms"] = c.Dispatcher.PollMs
		if c.Dispatcher.LeaseMs > 0 {
			m["lease_ms"] = c.Dispatcher.LeaseMs
		}
		if c.Dispatcher.CompletionWindowDisabled {
			m["completion_window"] = "disabled"
		}
	}
	if c.Workload.PoisonEvery > 0 {
		m["poison_every"] = c.Workload.PoisonEvery
	}
	if c.Workload.HandlerCostUs > 0 {
		m["handler_cost_us"] = c.Workload.HandlerCostUs
	}
	if c.KillDispatcherAt > 0 {
		m["kill_dispatcher_at"] = c.KillDispatcherAt
	}
	if c.RestartDBAt > 0 {
		m["restart_db_at"] = c.RestartDBAt
	}
	if len(c.CrashDBAt) > 0 {
		m["crash_db_at"] = c.CrashDBAt
	}
	if c.RoundsMax > 0 {
		m["rounds_max"] = c.RoundsMax
	}
	c.bloatConfig(m)
	return m
}

// Rounds is how many rounds the cell runs in a matrix of rounds.
func (c *Cell) Rounds(rounds int) int {
	if c.RoundsMax > 0 && c.RoundsMax < rounds {
		return c.RoundsMax
	}
	return rounds
}

// DatabaseFaults reports whether the cell's fault plan restarts or
// crashes the database server (a server the harness did not start
// cannot take either).
func (c *Cell) DatabaseFaults() bool { return c.RestartDBAt > 0 || len(c.CrashDBAt) > 0 }

// Validate checks the cell's bounds.
func (c *Cell) Validate() error {
	switch {
	case Names[c.Scenario] == "":
		return fmt.Errorf("scenarios: cell %q: unknown scenario %d", c.Name, c.Scenario)
	case c.Scenario == UpgradeScenario:
		return fmt.Errorf("scenarios: cell %q: scenario %d (upgrade) is one run, Matrix.Upgrade, not a cell", c.Name, c.Scenario)
	case len(c.Workload.Handlers) == 0:
		return fmt.Errorf("scenarios: cell %q: no handlers", c.Name)
	case c.Preload < 0 || c.Preload > MaxPreload:
		return fmt.Errorf("scenarios: cell %q: preload %d outside 0..%d", c.Name, c.Preload, MaxPreload)
	case c.PublisherProcs < 0 || c.PublisherProcs > MaxProcs || c.DispatcherProcs < 0 || c.DispatcherProcs > MaxProcs:
		return fmt.Errorf("scenarios: cell %q: process counts must be within 0..%d", c.Name, MaxProcs)
	case c.PublisherProcs == 0 && c.DispatcherProcs == 0:
		return fmt.Errorf("scenarios: cell %q: no process runs in the window", c.Name)
	case c.Preload > 0 && (c.PreloadPublishers < 1 || c.PreloadBatch < 1):
		return fmt.Errorf("scenarios: cell %q: preload needs publishers and a batch", c.Name)
	case c.KillDispatcherAt < 0 || c.KillDispatcherAt >= 1 || c.RestartDBAt < 0 || c.RestartDBAt >= 1:
		return fmt.Errorf("scenarios: cell %q: fault points are fractions of the window in [0, 1)", c.Name)
	case c.KillDispatcherAt > 0 && c.DispatcherProcs < 2:
		// The survivor must take the killed one's lanes over.
		return fmt.Errorf("scenarios: cell %q: killing a dispatcher needs at least 2", c.Name)
	case len(c.CrashDBAt) > MaxCrashes:
		return fmt.Errorf("scenarios: cell %q: %d crashes, more than %d", c.Name, len(c.CrashDBAt), MaxCrashes)
	case len(c.CrashDBAt) > 0 && c.DispatcherProcs == 0:
		// A crash waits for a claim.
		return fmt.Errorf("scenarios: cell %q: crashes need dispatchers in the window", c.Name)
	case c.RoundsMax < 0 || c.RoundsMax%2 != 0:
		return fmt.Errorf("scenarios: cell %q: rounds_max %d: want 0 or an even number (ABBA order)", c.Name, c.RoundsMax)
	}
	for i, at := range c.CrashDBAt {
		if at <= 0 || at >= 1 || (i > 0 && at <= c.CrashDBAt[i-1]) {
			return fmt.Errorf("scenarios: cell %q: crash points %v: want increasing fractions of the window in (0, 1)", c.Name, c.CrashDBAt)
		}
	}
	return c.validateBloat()
}

// Matrix is a set of cells and how to run them.
type Matrix struct {
	Mode   string
	Rounds int
	// Warmup runs before each window and is discarded.
	Warmup, Window time.Duration
	Cells          []Cell
	// OptIn are cells run only when --scenarios names their scenario
	// (Filter adds them): cells that compare two configurations of one
	// ref rather than two refs (scenario 10), which a comparison of two
	// refs must not run.
	OptIn []Cell
	// Upgrade is scenario 6, run once after the cells (nil: not run).
	Upgrade *Upgrade
}

// Validate checks the matrix and every cell.
func (m *Matrix) Validate() error {
	switch {
	case m.Rounds < 2 || m.Rounds > MaxRounds || m.Rounds%2 != 0:
		// Odd rounds leave the ABBA order unbalanced: one side runs
		// first once more than the other.
		return fmt.Errorf("scenarios: rounds %d: want an even number in 2..%d (ABBA order is balanced over pairs of rounds)", m.Rounds, MaxRounds)
	case m.Window < MinWindow || m.Window > MaxWindow:
		return fmt.Errorf("scenarios: window %s outside %s..%s", m.Window, MinWindow, MaxWindow)
	case m.Warmup < 0 || m.Warmup > MaxWindow:
		return fmt.Errorf("scenarios: warm-up %s outside 0..%s", m.Warmup, MaxWindow)
	case len(m.Cells) == 0 && m.Upgrade == nil:
		return fmt.Errorf("scenarios: no cells to run (check --scenarios)")
	case len(m.Cells) > MaxCells:
		return fmt.Errorf("scenarios: %d cells, more than %d", len(m.Cells), MaxCells)
	}
	for i := range m.Cells {
		if err := m.Cells[i].Validate(); err != nil {
			return err
		}
	}
	if m.Upgrade != nil {
		return m.Upgrade.Validate()
	}
	return nil
}

// SkipDatabaseFaults removes from m the cells whose fault plan restarts
// or crashes the database server, for a server that cannot take it
// (why says so: a server the harness did not start), and returns one
// note per skipped cell.
func (m *Matrix) SkipDatabaseFaults(why string) []string {
	var notes []string
	m.Cells = slices.DeleteFunc(m.Cells, func(c Cell) bool {
		if c.DatabaseFaults() {
			notes = append(notes, fmt.Sprintf("skipped: %s / %s: %s", Names[c.Scenario], c.Name, why))
			return true
		}
		return false
	})
	return notes
}

// Filter keeps the cells of the given scenario numbers (all when empty).
func (m *Matrix) Filter(numbers []int) error {
	if len(numbers) == 0 {
		return nil
	}
	for _, n := range numbers {
		if Names[n] == "" {
			return fmt.Errorf("scenarios: unknown scenario %d (%s)", n, scenarioList())
		}
	}
	m.Cells = slices.DeleteFunc(m.Cells, func(c Cell) bool { return !slices.Contains(numbers, c.Scenario) })
	for _, c := range m.OptIn {
		if slices.Contains(numbers, c.Scenario) {
			m.Cells = append(m.Cells, c)
		}
	}
	if !slices.Contains(numbers, UpgradeScenario) {
		m.Upgrade = nil
	} else if m.Upgrade == nil {
		return fmt.Errorf("scenarios: scenario 6 (upgrade) is not part of mode %s", m.Mode)
	}
	return nil
}
