// Package bench is the harness that measures and verifies relaybus: it
// compares two git refs by running their own workers against real
// databases in ABBA-interleaved windows, checks that every window was
// exact, and compares the two sides with small-sample statistics. The
// command is cmd/bench (flags and printing); comparison runs the
// pipeline below for it; this package only documents the layout.
//
// # The data flow, one package per step
//
//	refs      resolve the two refs (tags, branches, SHAs, release trailers)
//	build     build each ref's bench binary (its worker) in a git worktree
//	proc      run worker processes: protocol 1 over stdin and stdout
//	peer      the kind of side each hello names; Fit fits the cells to the sides
//	runner    plan the windows (ABBA) and measure each one on a fresh database
//	pgmetrics read the server's counters around a window
//	record    the per-process record files the workers write
//	validate  check a window's records: lost, duplicates, order, dead letters
//	result    run.json: the schema, the metric names, its one writer
//	stats     medians, quantiles, Mann-Whitney U, Hodges-Lehmann intervals
//	compare   per cell and metric: ratio, interval, p, verdict; the gate
//	report    terminal tables, report.md, bench.txt, SVG plots
//
// Beside the flow: protocol defines worker protocol 1 (frozen since
// v0.1.0: every release stays drivable), worker is the worker side of it
// (`bench worker`), scenarios defines the cells of --smoke, --quick and
// --full and scenario 6 (the in-place upgrade, one run, driven by
// runner/upgrade.go), lifecycle shows what one delivery leaves behind in
// PostgreSQL (`bench lifecycle`, pageinspect), and mongometrics reads
// MongoDB's counters for a runner that does not exist yet.
//
// # Peers
//
// A side may be another library instead of a relaybus ref: `river` (or
// `river@vX.Y.Z`) is the worker in bench/peers/river and `ceiling` the
// lane pattern in plain SQL in bench/peers/ceiling, modules of their own
// that speak protocol 1. Everything the harness knows of a kind of side
// is its descriptor in peer (relaybus's too): refs and build read its
// module directory, build inputs and library modules; peer.Fit skips the
// cells it does not run, maps the cells' settings onto it, gives it its
// own tuning and adds the cells "as its own benchmark runs it"; the
// runner reads its tables (pgmetrics) and the report labels it and
// prints the settings each side ran. A side whose hello declares
// no-key-order is validated without the order checks.
package bench
