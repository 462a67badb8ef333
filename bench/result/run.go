// Package result owns run.json: the schema of one harness run (refs,
// machine, databases, cells and their samples), the registry of metric
// names, where a run's results folder is, and the one function that
// writes run.json. The runner fills a Run; the report renders one; both
// read the schema from here.
package result

import (
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/berkcansavur/relaybus/bench/validate"
)

// SchemaVersion is the format version of run.json this package writes.
// Load refuses a newer one rather than misreading it.
const SchemaVersion = 1

// Modes of a run.
const (
	ModeQuick  = "quick"
	ModeFull   = "full"
	ModeSmoke  = "smoke"
	ModeCustom = "custom"
)

// Sides of a comparison.
const (
	SideBase      = "base"
	SideCandidate = "candidate"
)

// RefInfo describes one side's build.
type RefInfo struct {
	Ref     string // as given ("v0.1.0", "HEAD")
	SHA     string
	Version string // relaybus.Version reported by the worker's hello
	Dirty   bool   // built from a working tree with uncommitted changes
	// Protocol and Capabilities as the worker's hello reported them.
	Protocol     int
	Capabilities []string
}

// DatabaseInfo describes one database server the run used.
type DatabaseInfo struct {
	Kind     string // "postgres", "mongo", "memory"
	Provider string // "testcontainers", "local", "dsn"
	Version  string
	Settings map[string]string // e.g. fsync, shared_buffers
	// DataDirFS is the file system type of the server's data directory
	// ("ext4", "tmpfs", ...), or why it is not known: on tmpfs fsync
	// costs nothing, so commit and WAL figures are not a disk's.
	DataDirFS string `json:",omitempty"`
}

// Run is everything one harness run measured; run.json is this, encoded
// with encoding/json, indented.
type Run struct {
	Schema            int    // SchemaVersion
	Mode              string // ModeQuick, ModeFull, ModeSmoke, ModeCustom
	Base, Candidate   RefInfo
	Started, Finished time.Time
	// Machine: os, arch, cpus, memory, go version; never a hostname or a
	// secret.
	Machine   map[string]string
	Databases []DatabaseInfo
	Cells     []*Cell
	// Upgrade is scenario 6 when the run included it (nil otherwise).
	Upgrade  *Upgrade `json:",omitempty"`
	Warnings []string
	// Notes are what a reader must know that is not a problem: for a
	// peer side, how the settings reached it, the cells skipped for it,
	// and which cells do not compare like with like.
	Notes []string `json:",omitempty"`
}

// Cell is one row of a report table: one configuration of one scenario
// on one store, measured in several windows per side.
type Cell struct {
	Scenario string // "publish", "dispatch", "keyed", "faults", "mixed"
	Store    string // "postgres", "mongo", "memory"
	// Name is the row title, e.g. "1 inst, defaults (conc 10, batch 10,
	// pool 10, poll 1s)".
	Name   string
	Config map[string]any
	// Settings says, per side (SideBase, SideCandidate), what the side's
	// library ran the cell's settings as and why, where the sides' differ
	// (a peer side: how the settings map onto it, its own tuning); empty
	// when both ran Config as it is.
	Settings map[string]string `json:",omitempty"`
	Samples  []*Sample
}

// Sample is one window of one side.
type Sample struct {
	Side  string // SideBase or SideCandidate
	Round int
	// Order is the position of the window in the cell's ABBA sequence.
	Order   int
	Metrics map[string]float64
	// Series is the throughput inside the window, as a rate per second
	// in buckets of SeriesStepMs (0: 1000, as runs recorded before the
	// field were), for the plots.
	Series       []float64
	SeriesStepMs int `json:",omitempty"`
	// Latencies are optional raw end-to-end latencies in ms (subsampled,
	// bounded by the runner) for the distribution plot.
	Latencies  []float64 `json:",omitempty"`
	Validation *validate.Result
	// Ignored lists the options this side's workers ignored.
	Ignored []string
	// Tables maps a table role (TableRoleDeliveries, ...) to the table
	// this side's per-table metrics were read from ("relaybus_deliveries",
	// "river_job").
	Tables map[string]string `json:",omitempty"`
	// PhaseSeconds is how long each step of the window took (setup,
	// preload, vacuum, start, warm-up, window, drain, validate): where a
	// mode's wall time goes.
	PhaseSeconds map[string]float64 `json:",omitempty"`
	// Statements are the window's top statements by total time
	// (pg_stat_statements, bench --profile); StatementsTotalMs is the
	// time of all of them and StatementUnits the deliveries (or events)
	// they are divided by.
	Statements        []Statement `json:",omitempty"`
	StatementsTotalMs float64     `json:",omitempty"`
	StatementUnits    float64     `json:",omitempty"`
	// Profiles are the CPU profiles of the window's dispatchers and
	// publishers, relative to the results folder (bench --profile).
	Profiles []string `json:",omitempty"`
	// Bloat is what a bloat cell (scenarios 8 and 9) sampled over its
	// window: its hold, the table sizes and dead tuples, the rate and
	// latency by step (nil in other cells).
	Bloat *Bloat `json:",omitempty"`
	// Error says why a window failed to run; such a sample counts as
	// INVALID.
	Error string
}

// Statement is one statement of a window: its normalized text (one
// line, shortened), its calls and their total execution time.
type Statement struct {
	Query   string
	Calls   int64
	TotalMs float64
}

// IsValid reports whether the sample ran and validated.
func (s *Sample) IsValid() bool {
	return s.Error == "" && s.Validation != nil && s.Validation.Valid
}

// MaxRunFileBytes bounds what Load reads.
const MaxRunFileBytes = 1 << 30

// Load reads a run.json written by Write.
func Load(path string) (*Run, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("result: load run: %w", err)
	}
	if st.Size() > MaxRunFileBytes {
		return nil, fmt.Errorf("result: load run: %s is %d bytes, more than the %d allowed", path, st.Size(), MaxRunFileBytes)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("result: load run: %w", err)
	}
	var run Run
	if err := json.Unmarshal(data, &run); err != nil {
		return nil, fmt.Errorf("result: load run %s: %w", path, err)
	}
	if run.Schema < 1 || run.Schema > SchemaVersion {
		return nil, fmt.Errorf("result: load run %s: schema %d, this build reads 1..%d", path, run.Schema, SchemaVersion)
	}
	for i, c := range run.Cells {
		if c == nil {
			return nil, fmt.Errorf("result: load run %s: cell %d is null", path, i)
		}
		for j, s := range c.Samples {
			if s == nil {
				return nil, fmt.Errorf("result: load run %s: cell %d sample %d is null", path, i, j)
			}
			if s.Side != SideBase && s.Side != SideCandidate {
				return nil, fmt.Errorf("result: load run %s: cell %q sample %d has side %q", path, c.Name, j, s.Side)
			}
		}
	}
	return &run, nil
}

// Encode returns run as indented JSON (the run.json format).
func (run *Run) Encode() ([]byte, error) {
	b, err := json.MarshalIndent(run, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("result: encode run: %w", err)
	}
	return append(b, '\n'), nil
}
