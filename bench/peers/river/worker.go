package main

import (
	"cmp"
	"context"
	"io"

	"github.com/berkcansavur/relaybus/bench/protocol"
	"github.com/berkcansavur/relaybus/bench/worker/workerkit"
)

// Limits on a worker config that only this worker has, checked before
// the role starts; where a field means the same as for the relaybus
// worker, its limit is the relaybus worker's (workerkit.RelaybusLimits).
const (
	maxConcurrency     = 10_000 // river.QueueNumWorkersMax
	maxPollMs          = 3_600_000
	maxLeaseMs         = 24 * 3_600_000
	maxFetchCooldownMs = 60_000
)

// capabilities lists what this worker can do; the harness records them.
// "peer" and "no-key-order" are what set it apart from a relaybus worker.
func capabilities() []string {
	return []string{
		protocol.CapabilityPeer, protocol.CapabilityPeerPrefix + "river", protocol.CapabilityNoKeyOrder,
		"store:postgres",
		"role:setup", "role:preload", "role:publisher", "role:dispatcher", "role:inspect",
		"record:v1", "workload:poison", "workload:fail_first", "dispatcher:extra_cost",
	}
}

// workerMain runs one worker and returns the process exit code: 0 when
// the role finished (or was stopped by ctx), 1 when it failed, 2 for a
// bad config.
func workerMain(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer) int {
	hello := workerkit.Hello{Pkg: "river", Version: peerVersion(), Capabilities: capabilities()}
	s, code := workerkit.Start(stdin, stdout, stderr, hello, validateConfig, &optionRules)
	if s == nil {
		return code
	}
	extra, err := parseDispatcherOptions(s.Cfg.Dispatcher.Options)
	if err != nil {
		return s.Out.Fail(2, err)
	}
	w := &worker{Session: s, extra: extra, stderr: stderr}
	return w.Run(ctx, w.run)
}

// checks are the config checks every worker shares, with the relaybus
// worker's limits, so that a config one side accepts the other accepts
// too. The names (event type, handlers) are also refused control
// characters (checks.Name), which a job's args do not need either.
var checks = workerkit.Checks{Pkg: "river", Limits: workerkit.RelaybusLimits}

func validateConfig(c *protocol.Config) error {
	return checks.Config(c, checks.Peer("River runs on postgres only", validateDispatcher))
}

// validateDispatcher checks the dispatcher fields this worker applies.
// Batch and the completion settings are ignored (see the package doc),
// so their values are not checked.
func validateDispatcher(c *protocol.Config) error {
	d := &c.Dispatcher
	return cmp.Or(
		checks.InRange("dispatcher concurrency", d.Concurrency, maxConcurrency),
		checks.InRange("dispatcher poll_ms", d.PollMs, maxPollMs),
		checks.InRange("dispatcher lease_ms", d.LeaseMs, maxLeaseMs),
		checks.InRange("dispatcher extra_cost_per_delivery_us", d.ExtraCostPerDeliveryUs, checks.Limits.CostUs),
	)
}

// worker is one River peer worker process.
type worker struct {
	*workerkit.Session
	extra  dispatcherOptions
	stderr io.Writer // River's own logger writes here too
}
