package main

import (
	"cmp"
	"context"
	"io"

	"github.com/berkcansavur/relaybus/bench/protocol"
	"github.com/berkcansavur/relaybus/bench/worker/workerkit"
)

// peerName is this peer's name in the harness ("--base ceiling") and the
// prefix of its error texts.
const peerName = "ceiling"

// peerVersion is the hello's version. The peer is built from the
// harness's own tree, so its version is the lane pattern's revision here:
// raise it when the statements or their settings change, so that result
// sets of different revisions do not read as one.
const peerVersion = "ceiling 1 (plain SQL lane pattern, pgx v5)"

// Limits on a worker config that only this worker has, checked before
// the role starts; where a field means the same as for the relaybus
// worker, its limit is the relaybus worker's (workerkit.RelaybusLimits).
const (
	maxConcurrency = 10_000
	maxBatch       = 10_000
	maxPollMs      = 3_600_000
)

// CapabilityNoFaults is listed in this peer's hello: it is meant for the
// work cells (scenarios 1, 2, 3 and 5), not for the fault cells. A lane
// is held by a row lock for the length of one transaction, and nothing
// is written at claim, so a dispatcher killed (or a database restarted)
// between a handle and its completion's commit leaves the delivery
// pending with its attempt not counted: it runs again at the same
// attempt, which the validator rightly calls a duplicate. The harness
// skips the fault scenario for a side that lists it.
const CapabilityNoFaults = "no-faults"

// capabilities lists what this worker can do; the harness records them.
func capabilities() []string {
	return []string{
		protocol.CapabilityPeer, protocol.CapabilityPeerPrefix + peerName, CapabilityNoFaults,
		"store:postgres",
		"role:setup", "role:preload", "role:publisher", "role:dispatcher", "role:inspect",
		"record:v1", "workload:poison", "workload:fail_first", "dispatcher:extra_cost",
		"profile:cpu", protocol.CapabilityCompletionRecords,
	}
}

// workerMain runs one worker and returns the process exit code: 0 when
// the role finished (or was stopped by ctx), 1 when it failed, 2 for a
// bad config.
func workerMain(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer) int {
	hello := workerkit.Hello{Pkg: peerName, Version: peerVersion, Capabilities: capabilities()}
	s, code := workerkit.Start(stdin, stdout, stderr, hello, validateConfig, &optionRules)
	if s == nil {
		return code
	}
	opts, err := parseDispatcherOptions(s.Cfg.Dispatcher.Options)
	if err != nil {
		return s.Out.Fail(2, err)
	}
	w := &worker{Session: s, opts: opts}
	return w.Run(ctx, w.run)
}

// checks are the config checks every worker shares, with the relaybus
// worker's limits, so that a config one side accepts the other accepts
// too.
var checks = workerkit.Checks{Pkg: peerName, Limits: workerkit.RelaybusLimits}

func validateConfig(c *protocol.Config) error {
	return checks.Config(c, checks.Peer("the ceiling is plain PostgreSQL", validateDispatcher))
}

// validateDispatcher checks the dispatcher fields this worker applies.
// lease_ms and the completion settings are ignored (see the package
// doc), so their values are not checked.
func validateDispatcher(c *protocol.Config) error {
	d := &c.Dispatcher
	return cmp.Or(
		checks.InRange("dispatcher concurrency", d.Concurrency, maxConcurrency),
		checks.InRange("dispatcher batch", d.Batch, maxBatch),
		checks.InRange("dispatcher poll_ms", d.PollMs, maxPollMs),
		checks.InRange("dispatcher extra_cost_per_delivery_us", d.ExtraCostPerDeliveryUs, checks.Limits.CostUs),
	)
}

// worker is one ceiling peer worker process.
type worker struct {
	*workerkit.Session
	opts dispatcherOptions
}
