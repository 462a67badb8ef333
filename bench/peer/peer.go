// Package peer describes, once, each kind of worker a comparison's side
// can be: a relaybus build (Relaybus) or a peer, a worker of another
// library in its own Go module under bench/peers/<Name> of the harness's
// tree, speaking worker protocol 1. The steps of the harness consult the
// descriptor instead of knowing a peer themselves: refs and build (its
// module directory, library modules and build inputs), the comparison
// (Fit: which cells it runs, how the cells' settings map onto it, its
// own tuning, the notes), pgmetrics (the tables its per-table metrics
// come from) and report (its label).
//
// # Adding a peer
//
// Write its worker as a module in bench/peers/<name> whose hello lists
// protocol.CapabilityPeer and "peer:<name>", then add a Descriptor to
// Peers (a file per peer: river.go). Name, Title, Tables, TablePattern
// and Runs are required; the rest is optional.
package peer

import (
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/berkcansavur/relaybus/bench/protocol"
	"github.com/berkcansavur/relaybus/bench/scenarios"
)

// Tables names the tables a side's per-table metrics are read from, by
// their role (result.MetricTableRole).
type Tables struct {
	// Deliveries is the table with one row per delivery (or job).
	Deliveries string
	// Lanes is the lane table ("" for a store without one).
	Lanes string
}

// Descriptor is what the harness knows of one kind of side.
type Descriptor struct {
	// Name is the side's name on the command line ("river") and in its
	// hello ("peer:river"); "relaybus" for relaybus builds.
	Name string
	// Title is how notes and reports name the library ("River").
	Title string
	// Modules are the peer library's Go modules that name@vX.Y.Z
	// selects: the first is the one the version names, the others are
	// released with it at the same version. None: the peer has no
	// version to choose (name@... is refused).
	Modules []string
	// Imports are the main module's paths, besides the peer's own
	// module, that its build reads through its replace directive (see
	// Inputs).
	Imports []string
	// Tables are the tables its per-table metrics are read from, and
	// TablePattern a LIKE pattern that selects its tables in a window
	// database (pgmetrics.ReadSnapshot reads every descriptor's).
	Tables       Tables
	TablePattern string
	// Runs are the scenarios a peer side runs (scenario 3 only when its
	// hello does not list protocol.CapabilityNoKeyOrder); Why says why a
	// scenario it leaves out is left out, where the general reason
	// (skipReason) is not enough. A relaybus side runs every scenario.
	Runs []int
	Why  map[int]string
	// SkipCell, when set, says why a cell of a scenario the peer runs is
	// left out ("" to run it).
	SkipCell func(c *scenarios.Cell) string
	// About is the first note of a run with this peer: what it is and how
	// its records and metrics compare; %s is the side ("base (river)").
	About string
	// Settings describes what the library runs a cell's dispatcher
	// settings d as, and why (how the harness's settings map onto it):
	// the report prints it per cell and side. Nil: d as it is.
	Settings func(d protocol.Dispatcher) string
	// Tune is the library's own throughput tuning in the cells tuned for
	// throughput (scenarios.Cell.Tuned), where it maps onto the cell's
	// settings (River: the fetch cooldown its own benchmark runs). Nil:
	// the cell's settings as they are.
	Tune func(d protocol.Dispatcher) protocol.Dispatcher
	// Own is the library at its best as its own benchmark runs it, where
	// that needs settings the other side has no counterpart for (River's
	// 2,000 workers against relaybus's 200): Fit adds a labelled cell
	// beside each tuned dispatch cell. Nil: Tune is its best.
	Own *Own
	// Notes are further notes about a run of the cells of m with this
	// peer on side ("base (river)"): how its settings compare, which
	// cells do not compare like with like. Nil: none.
	Notes func(side string, m *scenarios.Matrix) []string
}

// Own is a peer's best as its own benchmark runs it.
type Own struct {
	// Label names it in the added cell's name ("River's own benchmark:
	// MaxWorkers 2000, FetchCooldown 2 ms").
	Label string
	// Dispatcher is the dispatcher settings of a side in the added cell,
	// from the tuned cell's settings (after Tune).
	Dispatcher func(d protocol.Dispatcher) protocol.Dispatcher
	// Why says where the settings come from, for the run's notes.
	Why string
}

// Relaybus describes a relaybus build: a git ref's own cmd/bench worker.
var Relaybus = &Descriptor{
	Name: "relaybus", Title: "relaybus",
	Tables:       Tables{Deliveries: "relaybus_deliveries", Lanes: "relaybus_lanes"},
	TablePattern: `relaybus\_%`,
	Settings: func(d protocol.Dispatcher) string {
		return cellSettings(d) + " (the cell's settings, as relaybus.Config takes them)"
	},
}

// Peers are the peers the harness knows, by name.
var Peers = []*Descriptor{River, Ceiling}

// ByName finds a peer by its name.
func ByName(name string) (*Descriptor, bool) {
	i := slices.IndexFunc(Peers, func(d *Descriptor) bool { return d.Name == name })
	if i < 0 {
		return nil, false
	}
	return Peers[i], true
}

// OfHello is the descriptor of a side whose hello listed caps: Relaybus
// without protocol.CapabilityPeer, the peer it names, or for a peer the
// harness does not know one that runs the scenarios every peer can and
// reads no per-table metrics.
func OfHello(caps []string) *Descriptor {
	name := protocol.PeerName(caps)
	if name == "" {
		return Relaybus
	}
	if d, ok := ByName(name); ok {
		return d
	}
	return &Descriptor{Name: name, Title: name, Runs: []int{scenarios.Publish, scenarios.Dispatch, scenarios.Faults, scenarios.Mixed},
		About: "%s is a peer (" + strings.ReplaceAll(name, "%", "%%") + "), not a relaybus build, that this harness has no description of: its dispatcher settings and guarantees are its own, and no per-table metric is read for it; see its worker's ready lines (ignored options) and BENCHMARKS.md"}
}

// IsPeer reports whether d describes a peer, not relaybus.
func (d *Descriptor) IsPeer() bool { return d != Relaybus }

// Dir is the peer module's directory, relative to the tree's root.
func (d *Descriptor) Dir() string { return path.Join("bench", "peers", d.Name) }

// Inputs are the paths of the harness's tree a peer's build reads,
// relative to its root: the peer module, the main module's paths it
// imports (Imports) and the main module's go.mod and go.sum, whose
// requirements take part in the build. A peer whose inputs have
// uncommitted changes is built from the working tree. A path names a
// whole directory tree, so a change anywhere below it marks the peer
// changed too, which only costs a build. Each peer module's tests check
// this list against `go list -deps`.
func (d *Descriptor) Inputs() []string {
	return append(append([]string{d.Dir()}, d.Imports...), "go.mod", "go.sum")
}

// Versioned reports whether the peer's library version can be chosen
// (name@vX.Y.Z).
func (d *Descriptor) Versioned() bool { return len(d.Modules) > 0 }

// TablePatterns are the LIKE patterns of every known kind's tables.
func TablePatterns() []string {
	out := []string{Relaybus.TablePattern}
	for _, d := range Peers {
		out = append(out, d.TablePattern)
	}
	return out
}

// settings is what d runs dispatcher settings ds as.
func (d *Descriptor) settings(ds protocol.Dispatcher) string {
	if d.Settings == nil {
		return cellSettings(ds) + " (the cell's settings)"
	}
	return d.Settings(ds)
}

// cellSettings is the protocol's dispatcher settings in d, as a cell
// gives them.
func cellSettings(d protocol.Dispatcher) string {
	return fmt.Sprintf("concurrency %s, batch %s, poll %s", orDefault(d.Concurrency, ""), orDefault(d.Batch, ""), orDefault(d.PollMs, " ms"))
}

// orDefault is n with unit, or "default" for 0 (the library's default).
func orDefault(n int, unit string) string {
	if n == 0 {
		return "default"
	}
	return fmt.Sprintf("%d%s", n, unit)
}
