package main

import (
	"fmt"
	"math"
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
	"cpu_profile_path":                      "this peer writes no CPU profile",
}

// knownOptions are the free-form Options keys this worker applies, per
// group; every other key is reported ignored.
var knownOptions = map[string]map[string]bool{
	"dispatcher": {optFetchCooldownMs: true, optPollOnly: true},
}

// Free-form dispatcher options.
const (
	optFetchCooldownMs = "fetch_cooldown_ms"
	optPollOnly        = "poll_only"
)

// dispatcherOptions are the free-form dispatcher options this worker
// applies.
type dispatcherOptions struct {
	// fetchCooldown overrides the derived FetchCooldown (0: derived).
	fetchCooldown time.Duration
	pollOnly      bool
}

// parseDispatcherOptions reads the known free-form dispatcher options; a
// known option with a bad value is a config error, an unknown one is
// ignored (and reported by classifyOptions).
func parseDispatcherOptions(opts map[string]any) (dispatcherOptions, error) {
	var d dispatcherOptions
	if v, ok := opts[optFetchCooldownMs]; ok {
		ms, ok := v.(float64)
		if !ok || ms != math.Trunc(ms) || ms < 1 || ms > maxFetchCooldownMs {
			return d, fmt.Errorf("river: dispatcher option %s must be a whole number of milliseconds in [1, %d], got %v", optFetchCooldownMs, maxFetchCooldownMs, v)
		}
		d.fetchCooldown = time.Duration(ms) * time.Millisecond
	}
	if v, ok := opts[optPollOnly]; ok {
		b, ok := v.(bool)
		if !ok {
			return d, fmt.Errorf("river: dispatcher option %s must be true or false, got %v", optPollOnly, v)
		}
		d.pollOnly = b
	}
	return d, nil
}
