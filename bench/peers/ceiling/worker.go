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
	maxNameBytes   = 255
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
	if w.Cfg.CPUProfilePath != "" {
		stop, err := startCPUProfile(w.Cfg.CPUProfilePath)
		if err != nil {
			return w.Out.Fail(1, err)
		}
		defer func() {
			if err := stop(); err != nil {
				w.Log.Error("cpu profile", "error", err)
			}
		}()
	}
	if err := w.run(ctx); err != nil {
		w.Log.Error("role failed", "error", err)
		return w.Out.Fail(1, err)
	}
	return 0
}

// checks are the config checks every worker shares, with the relaybus
// worker's limits, so that a config one side accepts the other accepts
// too.
var checks = workerkit.Checks{Pkg: peerName, Limits: workerkit.RelaybusLimits}

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
	if _, err := retryScheduleFor(wl); err != nil {
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
			return fmt.Errorf("ceiling: dispatcher concurrency %d out of range [0, %d]", d.Concurrency, maxConcurrency)
		}
		if d.Batch < 0 || d.Batch > maxBatch {
			return fmt.Errorf("ceiling: dispatcher batch %d out of range [0, %d]", d.Batch, maxBatch)
		}
		if d.PollMs < 0 || d.PollMs > maxPollMs {
			return fmt.Errorf("ceiling: dispatcher poll_ms %d out of range [0, %d]", d.PollMs, maxPollMs)
		}
		if d.ExtraCostPerDeliveryUs < 0 || d.ExtraCostPerDeliveryUs > checks.Limits.CostUs {
			return fmt.Errorf("ceiling: dispatcher extra_cost_per_delivery_us %d out of range [0, %d]", d.ExtraCostPerDeliveryUs, checks.Limits.CostUs)
		}
		// lease_ms and the completion settings are ignored (see the
		// package doc), so their values are not checked.
	}
	return nil
}

// validateStore checks the store's kind and address.
func validateStore(st *protocol.Store) error {
	switch st.Kind {
	case "postgres":
		if st.DSN == "" {
			return errors.New("ceiling: store postgres needs dsn")
		}
	default:
		return fmt.Errorf("ceiling: store kind %q is not supported (the ceiling is plain PostgreSQL)", st.Kind)
	}
	return nil
}

// validateName applies relaybus's rule for names (non-empty, valid UTF-8,
// at most maxNameBytes) and also refuses control characters, which the
// record format cannot hold (tabs, newlines).
func validateName(what, name string) error {
	switch {
	case name == "":
		return fmt.Errorf("ceiling: %s is empty", what)
	case len(name) > maxNameBytes:
		return fmt.Errorf("ceiling: %s is over %d bytes", what, maxNameBytes)
	case !utf8.ValidString(name):
		return fmt.Errorf("ceiling: %s %q is not valid UTF-8", what, name)
	case strings.ContainsFunc(name, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return fmt.Errorf("ceiling: %s %q contains a control character", what, name)
	}
	return nil
}

// worker is one ceiling peer worker process.
type worker struct {
	*workerkit.Session
	opts dispatcherOptions
}
