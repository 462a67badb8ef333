// Package bench is the harness that measures and verifies relaybus: it
// compares two git refs by running their own workers against real
// databases in ABBA-interleaved windows, checks that every window was
// exact, and compares the two sides with small-sample statistics. The
// command is cmd/bench; this package only documents the layout.
//
// # The data flow, one package per step
//
//	refs      resolve the two refs (tags, branches, SHAs, release trailers)
//	build     build each ref's bench binary (its worker) in a git worktree
//	proc      run worker processes: protocol 1 over stdin and stdout
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
// `river@vX.Y.Z`) is the worker in bench/peers/river, a module of its own
// that speaks protocol 1. refs resolves it to the harness's own tree and
// build builds it there; a side whose hello declares no-key-order is
// validated without the order checks; scenarios skips the cells a peer
// cannot run comparably and writes the notes the report shows; pgmetrics
// reads its table (river_job) for the per-table metrics.
package bench
