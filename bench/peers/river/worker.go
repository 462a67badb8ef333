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
	"github.com/berkcansavur/relaybus/relaybus"
)

// Limits on a worker config, checked before the role starts. They are
// those of the relaybus worker where the two share a meaning, so that a
// config one side accepts the other accepts too.
const (
	maxPublishers      = 1024
	maxPublishBatch    = relaybus.MaxEventsPerPublish
	maxPayloadBytes    = relaybus.DefaultMaxPayloadBytes
	maxHandlers        = 64
	maxNameBytes       = 255
	maxKeyCount        = 10_000_000
	maxCostUs          = 10_000_000
	maxPoolSize        = 1000
	maxAttempts        = relaybus.MaxAttemptsLimit
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

func validateConfig(c *protocol.Config) error {
	if c.Protocol != protocol.Version {
		return fmt.Errorf("river: config speaks protocol %d, this worker speaks %d", c.Protocol, protocol.Version)
	}
	switch c.Role {
	case protocol.RoleSetup, protocol.RoleInspect:
	case protocol.RolePreload, protocol.RolePublisher, protocol.RoleDispatcher:
		if c.RecordPath == "" {
			return fmt.Errorf("river: role %s needs record_path", c.Role)
		}
	default:
		return fmt.Errorf("river: unknown role %q", c.Role)
	}
	switch c.Store.Kind {
	case "postgres":
		if c.Store.DSN == "" {
			return errors.New("river: store postgres needs dsn")
		}
	default:
		return fmt.Errorf("river: store kind %q is not supported (River runs on postgres only)", c.Store.Kind)
	}
	if c.Store.PoolSize < 0 || c.Store.PoolSize > maxPoolSize {
		return fmt.Errorf("river: store pool_size %d out of range [0, %d]", c.Store.PoolSize, maxPoolSize)
	}
	if c.CountersIntervalMs < 0 {
		return fmt.Errorf("river: counters_interval_ms %d is negative", c.CountersIntervalMs)
	}
	if c.Role == protocol.RoleSetup || c.Role == protocol.RoleInspect {
		return nil
	}
	wl := &c.Workload
	if err := validateName("workload event_type", wl.EventType); err != nil {
		return err
	}
	if len(wl.Handlers) == 0 || len(wl.Handlers) > maxHandlers {
		return fmt.Errorf("river: workload needs 1 to %d handlers, got %d", maxHandlers, len(wl.Handlers))
	}
	seen := map[string]bool{}
	for _, h := range wl.Handlers {
		if err := validateName("workload handler", h); err != nil {
			return err
		}
		if seen[h] {
			return fmt.Errorf("river: workload handler %q listed twice", h)
		}
		seen[h] = true
	}
	switch wl.Keys {
	case "", "none":
	case "hot", "many":
		if wl.KeyCount < 1 || wl.KeyCount > maxKeyCount {
			return fmt.Errorf("river: workload keys %q needs key_count in [1, %d], got %d", wl.Keys, maxKeyCount, wl.KeyCount)
		}
	default:
		return fmt.Errorf("river: workload keys %q unknown (want none, hot or many)", wl.Keys)
	}
	if wl.PayloadBytes < 1 || wl.PayloadBytes > maxPayloadBytes {
		return fmt.Errorf("river: workload payload_bytes %d out of range [1, %d]", wl.PayloadBytes, maxPayloadBytes)
	}
	if wl.HandlerCostUs < 0 || wl.HandlerCostUs > maxCostUs {
		return fmt.Errorf("river: workload handler_cost_us %d out of range [0, %d]", wl.HandlerCostUs, maxCostUs)
	}
	if wl.PoisonEvery < 0 || wl.FailFirst < 0 || wl.MaxAttempts < 0 || wl.MaxAttempts > maxAttempts {
		return fmt.Errorf("river: workload poison_every, fail_first and max_attempts must be >= 0 (max_attempts <= %d)", maxAttempts)
	}
	if _, err := retryPolicyFor(wl); err != nil {
		return err
	}
	switch c.Role {
	case protocol.RolePreload, protocol.RolePublisher:
		p := &c.Publisher
		if p.Publishers < 1 || p.Publishers > maxPublishers {
			return fmt.Errorf("river: publisher publishers %d out of range [1, %d]", p.Publishers, maxPublishers)
		}
		if p.Batch < 1 || p.Batch > maxPublishBatch {
			return fmt.Errorf("river: publisher batch %d out of range [1, %d]", p.Batch, maxPublishBatch)
		}
		if p.Events < 0 || (c.Role == protocol.RolePreload && p.Events == 0) {
			return fmt.Errorf("river: publisher events %d: preload needs a positive count, publisher >= 0", p.Events)
		}
		if p.RatePerSec < 0 || p.StartIndex < 0 || p.Stride < 0 {
			return errors.New("river: publisher rate_per_sec, start_index and stride must be >= 0")
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
		if d.ExtraCostPerDeliveryUs < 0 || d.ExtraCostPerDeliveryUs > maxCostUs {
			return fmt.Errorf("river: dispatcher extra_cost_per_delivery_us %d out of range [0, %d]", d.ExtraCostPerDeliveryUs, maxCostUs)
		}
		// Batch and the completion settings are ignored (see the
		// package doc), so their values are not checked.
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
