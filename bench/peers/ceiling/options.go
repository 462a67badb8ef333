package main

import "github.com/berkcansavur/relaybus/bench/worker/workerkit"

// optionRules sort the options of a config into applied and ignored:
// every top-level field but cpu_profile_path is plumbing.
var optionRules = workerkit.OptionRules{
	TopLevel: map[string]bool{workerkit.OptionCPUProfilePath: true},
	Ignored:  ignoredFields,
	Known:    knownOptions,
}

// ignoredFields are the config fields this worker knows but cannot apply,
// with the reason; they are reported ignored whenever they are set.
var ignoredFields = map[string]string{
	"store.mongo_uri":                       "the ceiling is plain PostgreSQL",
	"store.database":                        "the ceiling is plain PostgreSQL",
	"dispatcher.lease_ms":                   "no lease: a lane is held by a row lock for one transaction (claim, handle, complete)",
	"dispatcher.completion_window_us":       "a claim's completions are one statement, sent with the next claim",
	"dispatcher.completion_batch_max":       "a claim's completions are one statement, sent with the next claim",
	"dispatcher.completion_window_disabled": "a claim's completions are one statement, sent with the next claim",
	"dispatcher.handler_batch_max":          "the ceiling runs one delivery a handler call and models no wait per call",
	"dispatcher.handler_call_wait_us":       "the ceiling runs one delivery a handler call and models no wait per call",
	"dispatcher.handler_batch_calls":        "the ceiling runs one delivery a handler call",
}

// knownOptions are the free-form Options keys this worker applies, per
// group; every other key is reported ignored.
var knownOptions = map[string]map[string]bool{
	"dispatcher": {optStreams: true, optMaxLanes: true},
}

// Free-form dispatcher options.
const (
	// optStreams: claim streams (connections) per dispatcher process,
	// [1, maxStreams]; default defaultStreams, at most store.pool_size
	// when that is set.
	optStreams = "streams"
	// optMaxLanes: the most lanes one claim takes, [1, 256]; default
	// defaultMaxLanes.
	optMaxLanes = "max_lanes"
)

// Dispatcher settings and their bounds.
const (
	// defaultStreams: four claim streams per process. The lane pattern in
	// plain pgx measured on this 2-core machine peaked at 8 connections
	// in all, and the dispatch cells run 2 processes.
	defaultStreams = 4
	maxStreams     = 64
	// defaultMaxLanes bounds the lanes of one claim: a claim starts with
	// one lane and doubles the lanes it asks for while what it gets does
	// not fill its batch, up to this.
	defaultMaxLanes = 16
	laneCount       = 256
	// defaultBatch and defaultConcurrency are relaybus's defaults
	// (relaybus.DefaultBatchSize, DefaultConcurrency), for cells that set
	// none; defaultPollMs is relaybus.DefaultPollInterval.
	defaultBatch       = 10
	defaultConcurrency = 10
	defaultPollMs      = 1000
)

// dispatcherOptions are the free-form dispatcher options this worker
// applies; zero fields take the defaults.
type dispatcherOptions struct {
	streams  int
	maxLanes int
}

// parseDispatcherOptions reads the known free-form dispatcher options; a
// known option with a bad value is a config error, an unknown one is
// ignored (and reported by the option rules).
func parseDispatcherOptions(opts map[string]any) (dispatcherOptions, error) {
	var d dispatcherOptions
	var err error
	if d.streams, err = checks.WholeOption(opts, optStreams, "", maxStreams); err != nil {
		return d, err
	}
	d.maxLanes, err = checks.WholeOption(opts, optMaxLanes, "", laneCount)
	return d, err
}
