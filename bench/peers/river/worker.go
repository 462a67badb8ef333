package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/berkcansavur/relaybus/bench/protocol"
	"github.com/berkcansavur/relaybus/bench/worker/workerkit"
)

// Limits on a worker config that only this worker has, checked before
// the role starts; where a field means the same as for the relaybus
// worker, its limit is the relaybus worker's (workerkit.RelaybusLimits).
const (
	maxNameBytes       = 255
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
	if err := w.run(ctx); err != nil {
		w.Log.Error("role failed", "error", err)
		return w.Out.Fail(1, err)
	}
	return 0
}

// checks are the config checks every worker shares, with the relaybus
// worker's limits, so that a config one side accepts the other accepts
// too.
var checks = workerkit.Checks{Pkg: "river", Limits: workerkit.RelaybusLimits}

func validateConfig(c *protocol.Config) error {
	if err := checks.Plumbing(c, validateStore); err != nil {
		return err
	}
	if c.Role == protocol.RoleSetup || c.Role == protocol.RoleInspect {
		return nil
	}
	wl := &c.Workload
	if err := validateName("workload event_type", wl.EventType); err != nil {
		return err
	}
	if err := checks.Handlers(wl.Handlers, validateName); err != nil {
		return err
	}
	if err := checks.Workload(wl); err != nil {
		return err
	}
	if _, err := retryPolicyFor(wl); err != nil {
		return err
	}
	switch c.Role {
	case protocol.RolePreload, protocol.RolePublisher:
		if err := checks.Publisher(c); err != nil {
			return err
		}
	case protocol.RoleDispatcher:
		d := &c.Dispatcher
		if d.Concurrency < 0 || d.Concurrency > maxConcurrency {
			return fmt.Errorf("river: dispatcher concurrency %d out of range [0, %d]", d.Concurrency, maxConcurrency)
		}
		if d.PollMs < 0 || d.PollMs > maxPollMs {
			return fmt.Errorf("river: dispatcher poll_ms %d out of range [0, %d]", d.PollMs, maxPollMs)
		}
		if d.LeaseMs < 0 || d.LeaseMs > maxLeaseMs {
			return fmt.Errorf("river: dispatcher lease_ms %d out of range [0, %d]", d.LeaseMs, maxLeaseMs)
		}
		if d.ExtraCostPerDeliveryUs < 0 || d.ExtraCostPerDeliveryUs > checks.Limits.CostUs {
			return fmt.Errorf("river: dispatcher extra_cost_per_delivery_us %d out of range [0, %d]", d.ExtraCostPerDeliveryUs, checks.Limits.CostUs)
		}
		// Batch and the completion settings are ignored (see the
		// package doc), so their values are not checked.
	}
	return nil
}

// validateStore checks the store's kind and address.
func validateStore(st *protocol.Store) error {
	switch st.Kind {
	case "postgres":
		if st.DSN == "" {
			return errors.New("river: store postgres needs dsn")
		}
	default:
		return fmt.Errorf("river: store kind %q is not supported (River runs on postgres only)", st.Kind)
	}
	return nil
}

// validateName applies relaybus's rule for names (non-empty, valid UTF-8,
// at most maxNameBytes) and also refuses control characters, which the
// record format cannot hold (tabs, newlines) and a job's args do not need.
func validateName(what, name string) error {
	switch {
	case name == "":
		return fmt.Errorf("river: %s is empty", what)
	case len(name) > maxNameBytes:
		return fmt.Errorf("river: %s is over %d bytes", what, maxNameBytes)
	case !utf8.ValidString(name):
		return fmt.Errorf("river: %s %q is not valid UTF-8", what, name)
	case strings.ContainsFunc(name, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return fmt.Errorf("river: %s %q contains a control character", what, name)
	}
	return nil
}

// worker is one River peer worker process.
type worker struct {
	*workerkit.Session
	extra  dispatcherOptions
	stderr io.Writer // River's own logger writes here too
}
