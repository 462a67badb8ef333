package peer

import (
	"fmt"
	"math"

	"github.com/berkcansavur/relaybus/bench/protocol"
	"github.com/berkcansavur/relaybus/bench/scenarios"
)

// River's settings as the river peer (bench/peers/river) runs them. The
// peer module's tests check the ones River exports against River.
const (
	// RiverFetchCooldownDefaultMs is river.FetchCooldownDefault: the
	// least time between two fetches of one client. The peer keeps it,
	// lowered to poll_ms where that is shorter (River requires cooldown
	// <= poll interval), unless the cell sets fetch_cooldown_ms.
	RiverFetchCooldownDefaultMs = 100
	// RiverDefaultWorkers is the peer's MaxWorkers when a cell sets no
	// concurrency (relaybus's default concurrency).
	RiverDefaultWorkers = 10
	// RiverRescuerIntervalS is how often River's leader runs its job
	// rescuer (internal/maintenance.JobRescuerIntervalDefault in River
	// v0.51.2; not configurable).
	RiverRescuerIntervalS = 30
	// RiverLeaderTTLS and RiverElectIntervalS: a leader that dies holds
	// its leadership until its TTL ends, and the other clients try to
	// take it every elect interval (internal/leadership in v0.51.2).
	RiverLeaderTTLS     = 15
	RiverElectIntervalS = 5
	// riverBench* are what River's own benchmark (`river bench`) runs a
	// client with (bench/peers/river/options.go quotes it).
	riverBenchFetchCooldownMs     = 2
	riverBenchFetchPollIntervalMs = 20
	riverBenchMaxWorkers          = 2000
	// The peer's dispatcher options (bench/peers/river/options.go) that
	// set River's FetchCooldown, FetchPollInterval and MaxWorkers over
	// the mapping of the protocol's fields.
	riverOptFetchCooldownMs     = "fetch_cooldown_ms"
	riverOptFetchPollIntervalMs = "fetch_poll_interval_ms"
	riverOptMaxWorkers          = "max_workers"
)

// River is the River peer: one River job per (event, handler).
var River = &Descriptor{
	Name:  "river",
	Title: "River",
	Modules: []string{
		"github.com/riverqueue/river",
		"github.com/riverqueue/river/riverdriver/riverpgxv5",
		"github.com/riverqueue/river/rivertype",
	},
	// "relaybus" stands for the library's root package (its retry
	// schedule and limits) and relaybus/batch, which it imports.
	Imports:      []string{"bench/protocol", "bench/record", "bench/stats", "bench/worker/workerkit", "relaybus"},
	Tables:       Tables{Deliveries: "river_job"},
	TablePattern: `river\_%`,
	Runs:         []int{scenarios.Publish, scenarios.Dispatch, scenarios.Keyed, scenarios.Faults, scenarios.Mixed, scenarios.HeldSnapshot, scenarios.Soak},
	Why: map[int]string{scenarios.Work: "the handler-work cells run relaybus's lease renewals beside its completions on purpose; " +
		"a peer has no such renewals (River has no lease: lease_ms is its JobTimeout), so the cells would compare different work"},
	About: "%s is River, built from bench/peers/river (one River job per (event, handler); the job carries the payload). " +
		"It keeps no per-key order (its validity reads \"no key order\" where keyed handles went unchecked) and retries each job on its own, as relaybus retries each delivery. " +
		"Per-table metrics are read from river_job on its side (see each table's \"tables\" line); WAL is the database's on both sides; " +
		"statements per delivery include River's leader election and maintenance queries. " +
		"Each cell's settings line says what River ran: concurrency maps to MaxWorkers, poll_ms to FetchPollInterval; River fetches at most MaxWorkers jobs per FetchCooldown, " +
		"so in the cells tuned for throughput it runs the FetchCooldown of its own benchmark (2 ms), elsewhere River's default (100 ms, lowered to the poll where that is shorter)",
	Settings: riverSettings,
	Tune: func(d protocol.Dispatcher) protocol.Dispatcher {
		if d.PollMs != 0 && d.PollMs < riverBenchFetchCooldownMs {
			return d // River requires cooldown <= poll interval
		}
		return withOption(d, riverOptFetchCooldownMs, riverBenchFetchCooldownMs)
	},
	Own: &Own{
		Label: fmt.Sprintf("River's own benchmark: MaxWorkers %d, FetchCooldown %d ms, FetchPollInterval %d ms",
			riverBenchMaxWorkers, riverBenchFetchCooldownMs, riverBenchFetchPollIntervalMs),
		Dispatcher: func(d protocol.Dispatcher) protocol.Dispatcher {
			d = withOption(d, riverOptMaxWorkers, riverBenchMaxWorkers)
			d = withOption(d, riverOptFetchPollIntervalMs, riverBenchFetchPollIntervalMs)
			return withOption(d, riverOptFetchCooldownMs, riverBenchFetchCooldownMs)
		},
		Why: fmt.Sprintf("River's own benchmark (`river bench`) runs its client with MaxWorkers %d, FetchCooldown %d ms and FetchPollInterval %d ms; "+
			"relaybus has no counterpart of %d handlers in flight per process, and runs the tuned cell's settings there, as its own tuning does",
			riverBenchMaxWorkers, riverBenchFetchCooldownMs, riverBenchFetchPollIntervalMs, riverBenchMaxWorkers),
	},
	Notes: riverNotes,
}

// RiverFetchCooldownMs is the FetchCooldown the river peer runs a
// dispatcher with at pollMs (0: River's default poll, 1 s), when the
// harness passes no fetch_cooldown_ms.
func RiverFetchCooldownMs(pollMs int) int {
	if pollMs > 0 && pollMs < RiverFetchCooldownDefaultMs {
		return pollMs
	}
	return RiverFetchCooldownDefaultMs
}

// riverSettings is what the peer makes of dispatcher settings d.
func riverSettings(d protocol.Dispatcher) string {
	workers, workersFrom := d.Concurrency, "concurrency"
	if workers == 0 {
		workers, workersFrom = RiverDefaultWorkers, "relaybus's default concurrency"
	}
	if n, ok := optionInt(d, riverOptMaxWorkers); ok {
		workers, workersFrom = n, "max_workers, as its own benchmark runs it"
	}
	poll, pollFrom := d.PollMs, "poll_ms"
	if n, ok := optionInt(d, riverOptFetchPollIntervalMs); ok {
		poll, pollFrom = n, "fetch_poll_interval_ms, as its own benchmark runs it"
	}
	cd := RiverFetchCooldownMs(poll)
	cdFrom := "River's default"
	if cd < RiverFetchCooldownDefaultMs {
		cdFrom = "River's default 100 ms lowered to the poll, as River requires"
	}
	if n, ok := optionInt(d, riverOptFetchCooldownMs); ok {
		cd, cdFrom = n, "fetch_cooldown_ms, set by the harness"
		if n == riverBenchFetchCooldownMs {
			cdFrom = "fetch_cooldown_ms, as its own benchmark runs it"
		}
	}
	return fmt.Sprintf("MaxWorkers %d (%s), FetchPollInterval %s (%s), FetchCooldown %d ms (%s): at most %d jobs per cooldown per process (about %d/s each); "+
		"batch is not River's (it fetches up to MaxWorkers minus running jobs)", workers, workersFrom, orDefault(poll, " ms"), pollFrom, cd, cdFrom, workers, workers*1000/cd)
}

// riverNotes are the notes about the fault and mixed cells of a run with
// River on side.
func riverNotes(side string, m *scenarios.Matrix) []string {
	var notes []string
	faults, mixed := false, false
	for _, c := range m.Cells {
		faults = faults || c.Scenario == scenarios.Faults
		mixed = mixed || c.Scenario == scenarios.Mixed
	}
	if faults {
		notes = append(notes, fmt.Sprintf("faults: River has no lease. For %s, lease_ms sets JobTimeout and RescueStuckJobsAfter, and River's leader rescues a killed dispatcher's jobs "+
			"on its rescuer's next run, every %d s (not configurable): lease_ms plus up to %d s after the kill, plus up to about %d s more when the killed process was the leader "+
			"(its leadership lapses after %d s, and the others try every %d s), where relaybus's lease lapses after lease_ms. "+
			"The fault cells check that River loses nothing and repeats only what the kill explains, but their recovery does not compare: River's happens in the drain, after the window",
			side, RiverRescuerIntervalS, RiverRescuerIntervalS, RiverLeaderTTLS+RiverElectIntervalS, RiverLeaderTTLS, RiverElectIntervalS))
	}
	if mixed {
		notes = append(notes, fmt.Sprintf("mixed: %s's dispatchers wake on River's LISTEN/NOTIFY when jobs are inserted, while relaybus's poll every poll_ms: commit-to-handler latency compares a notified side with a polling one", side))
	}
	return notes
}

// withOption is d with dispatcher option name set to v (d's own map is
// not changed: cells share it).
func withOption(d protocol.Dispatcher, name string, v any) protocol.Dispatcher {
	opts := make(map[string]any, len(d.Options)+1)
	for k, x := range d.Options {
		opts[k] = x
	}
	opts[name] = v
	d.Options = opts
	return d
}

// optionInt reads dispatcher option name as a whole number, as Go code
// (int) or JSON (float64) gives it.
func optionInt(d protocol.Dispatcher, name string) (int, bool) {
	switch v := d.Options[name].(type) {
	case int:
		return v, true
	case float64:
		if v == math.Trunc(v) {
			return int(v), true
		}
	}
	return 0, false
}
