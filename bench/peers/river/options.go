package main

import (
	"fmt"
	"time"

	"github.com/berkcansavur/relaybus/bench/worker/workerkit"
)

// optionRules sort the options of a config into applied and ignored:
// every top-level field is plumbing or, when set, ignored.
var optionRules = workerkit.OptionRules{
	Ignored: ignoredFields,
	Known:   knownOptions,
}

// ignoredFields are the config fields this worker knows but cannot apply,
// with the reason; they are reported ignored whenever they are set.
var ignoredFields = map[string]string{
	"store.mongo_uri":                 "River runs on postgres only",
	"store.database":                  "River runs on postgres only",
	"workload.keys":                   "River does not order jobs by key; the key is carried and recorded only",
	"workload.key_count":              "River does not order jobs by key; the key is carried and recorded only",
	"dispatcher.batch":                "River fetches up to MaxWorkers minus running jobs; it has no separate fetch limit",
	"dispatcher.completion_window_us": "River's completer batches by itself; its settings are not exposed",
	"dispatcher.completion_batch_max": "River's completer batches by itself; its settings are not exposed",
	// Fields the protocol gained after this peer was written; they are
	// ignored whether or not this build's bench/protocol knows them.
	"dispatcher.completion_window_disabled": "River's completer batches by itself; it cannot be turned off",
	"dispatcher.handler_batch_max":          "this peer runs one job a worker call and models no wait per call",
	"dispatcher.handler_call_wait_us":       "this peer runs one job a worker call and models no wait per call",
	"dispatcher.handler_batch_calls":        "this peer runs one job a worker call",
	"cpu_profile_path":                      "this peer writes no CPU profile",
}

// knownOptions are the free-form Options keys this worker applies, per
// group; every other key is reported ignored.
var knownOptions = map[string]map[string]bool{
	"dispatcher": {optMaxWorkers: true, optFetchCooldownMs: true, optFetchPollIntervalMs: true, optPollOnly: true},
}

// Free-form dispatcher options: River's own tuning, for cells that run
// River as its authors tune it rather than through the harness's
// settings. Unset, each keeps the mapping of the protocol's fields
// (clientConfig), so a cell that passes none runs as before.
//
// River's own benchmark (`river bench`, cmd/river/riverbench/river_bench.go
// in River's repository, the module github.com/riverqueue/river/cmd/river)
// configures its client with
//
//	FetchCooldown:     2 * time.Millisecond,
//	FetchPollInterval: 20 * time.Millisecond,
//	Queues: map[string]river.QueueConfig{
//		river.QueueDefault: {MaxWorkers: 2_000},
//	},
//
// that is max_workers 2000, fetch_cooldown_ms 2 and
// fetch_poll_interval_ms 20 here ("as its own benchmark runs it"). The
// figures were read from that file in River's repository; the module
// cache this peer builds from holds River's main module (v0.51.2), whose
// source has no benchmark, not cmd/river, so the copy released with
// v0.51.2 was not read itself.
const (
	// optMaxWorkers: MaxWorkers of the one queue, [1, maxConcurrency];
	// replaces dispatcher.concurrency (which stays listed as applied,
	// and is overridden).
	optMaxWorkers = "max_workers"
	// optFetchCooldownMs: FetchCooldown in ms, [1, maxFetchCooldownMs],
	// at most the poll interval (River requires it).
	optFetchCooldownMs = "fetch_cooldown_ms"
	// optFetchPollIntervalMs: FetchPollInterval in ms, [1, maxPollMs];
	// replaces dispatcher.poll_ms for River (the derived cooldown then
	// follows it, as it follows poll_ms).
	optFetchPollIntervalMs = "fetch_poll_interval_ms"
	optPollOnly            = "poll_only"
)

// riverBench* are the settings of River's own benchmark (see above), for
// this package's tests and documentation.
const (
	riverBenchMaxWorkers          = 2_000
	riverBenchFetchCooldownMs     = 2
	riverBenchFetchPollIntervalMs = 20
)

// dispatcherOptions are the free-form dispatcher options this worker
// applies; zero fields keep the mapping of the protocol's fields.
type dispatcherOptions struct {
	// maxWorkers overrides MaxWorkers (0: dispatcher.concurrency, or
	// defaultConcurrency).
	maxWorkers int
	// fetchCooldown overrides the derived FetchCooldown (0: derived).
	fetchCooldown time.Duration
	// fetchPollInterval overrides FetchPollInterval (0: poll_ms, or
	// River's default).
	fetchPollInterval time.Duration
	pollOnly          bool
}

// parseDispatcherOptions reads the known free-form dispatcher options; a
// known option with a bad value is a config error, an unknown one is
// ignored (and reported by the option rules).
func parseDispatcherOptions(opts map[string]any) (dispatcherOptions, error) {
	var d dispatcherOptions
	var err error
	if d.maxWorkers, err = checks.WholeOption(opts, optMaxWorkers, "", maxConcurrency); err != nil {
		return d, err
	}
	ms, err := checks.WholeOption(opts, optFetchCooldownMs, "milliseconds", maxFetchCooldownMs)
	if err != nil {
		return d, err
	}
	d.fetchCooldown = time.Duration(ms) * time.Millisecond
	if ms, err = checks.WholeOption(opts, optFetchPollIntervalMs, "milliseconds", maxPollMs); err != nil {
		return d, err
	}
	d.fetchPollInterval = time.Duration(ms) * time.Millisecond
	if v, ok := opts[optPollOnly]; ok {
		b, ok := v.(bool)
		if !ok {
			return d, fmt.Errorf("river: dispatcher option %s must be true or false, got %v", optPollOnly, v)
		}
		d.pollOnly = b
	}
	return d, nil
}
