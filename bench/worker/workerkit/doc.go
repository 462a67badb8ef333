// Package workerkit is the part of a protocol 1 worker that does not
// depend on what it drives: the JSON-line output, reading the config and
// the checks every worker makes of it, sorting its options into applied
// and ignored, the role switch, the counters ticker, the CPU profile, the
// publish loop with its records and latency summary, and a peer's
// command line. The relaybus worker (bench/worker) and the peer workers
// (bench/peers/...) both use it, so that the lines a harness reads mean
// the same on both sides of a comparison, and a config one side refuses
// the other refuses with the same first complaint.
//
// It imports bench/protocol, bench/record, bench/stats and the relaybus
// library's root package (for its limits), never a store: a peer module
// links it without linking relaybus's stores or their drivers.
//
// Every error text starts with the worker's own prefix (Session.Pkg:
// "worker" for the relaybus worker, "river" for the River peer), as the
// error and done lines of protocol 1 always have.
//
// # Files
//
//	session.go   Start (hello, the config), Session.Run (the exit code, the CPU profile), the role switch
//	validate.go  Checks: the config checks every worker shares, and Checks.Config, the order they run in
//	options.go   OptionRules (applied and ignored), the free-form options' values
//	publish.go   the publish loop of preload and publisher
//	profile.go   the CPU profile of cpu_profile_path
//	command.go   a peer's command line: `<name> worker` and `<name> version`
//
// # Packages beside it
//
//   - workerpg: what a worker on PostgreSQL does through pgx without a
//     store (the pool of the config's store, the key states of inspect);
//     apart so that workerkit links no database driver.
//   - peertest: what the tests of a peer share (its binary run as the
//     harness runs it, a test server, the end-to-end workload, the golden
//     protocol lines and records).
package workerkit
