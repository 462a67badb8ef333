// Package worker is the worker side of the harness's protocol 1: what
// `bench worker` runs. It reads one protocol.Config on stdin, writes JSON
// lines on stdout and logs on stderr, and plays one role (setup, preload,
// publisher, dispatcher, inspect) against a real store.
//
// Every release carries its own copy of this package, so the harness at
// HEAD drives the worker of any older release: protocol 1 only grows.
package worker

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/berkcansavur/relaybus/bench/protocol"
	"github.com/berkcansavur/relaybus/bench/worker/workerkit"
	"github.com/berkcansavur/relaybus/relaybus"
)

// Limits on a worker config, checked before the role starts (the
// config's size is bounded by workerkit.MaxConfigBytes).
const (
	maxPublishers   = 1024
	maxPublishBatch = relaybus.MaxEventsPerPublish
	maxPayloadBytes = relaybus.DefaultMaxPayloadBytes
	maxHandlers     = 64
	maxKeyCount     = 10_000_000
	maxCostUs       = 10_000_000
	maxPoolSize     = 1000
)

// Main runs one worker and returns the process exit code: 0 when the role
// finished (or was stopped by ctx), 1 when it failed, 2 for a bad config.
func Main(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer) int {
	hello := workerkit.Hello{Pkg: "worker", Version: relaybus.Version, Capabilities: capabilities()}
	s, code := workerkit.Start(stdin, stdout, stderr, hello, validateConfig, &optionRules)
	if s == nil {
		return code
	}
	w := &worker{Session: s}
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

// capabilities lists what this worker can do; the harness records them.
func capabilities() []string {
	return []string{
		"store:postgres", "store:mongo",
		"role:setup", "role:preload", "role:publisher", "role:dispatcher", "role:inspect",
		"record:v1", "workload:poison", "workload:fail_first", "dispatcher:extra_cost",
		"profile:cpu", "dispatcher:completion_window_disabled",
	}
}

func validateConfig(c *protocol.Config) error {
	if c.Protocol != protocol.Version {
		return fmt.Errorf("worker: config speaks protocol %d, this worker speaks %d", c.Protocol, protocol.Version)
	}
	switch c.Role {
	case protocol.RoleSetup, protocol.RoleInspect:
	case protocol.RolePreload, protocol.RolePublisher, protocol.RoleDispatcher:
		if c.RecordPath == "" {
			return fmt.Errorf("worker: role %s needs record_path", c.Role)
		}
	default:
		return fmt.Errorf("worker: unknown role %q", c.Role)
	}
	switch c.Store.Kind {
	case "postgres":
		if c.Store.DSN == "" {
			return errors.New("worker: store postgres needs dsn")
		}
	case "mongo":
		if c.Store.MongoURI == "" || c.Store.Database == "" {
			return errors.New("worker: store mongo needs mongo_uri and database")
		}
	default:
		return fmt.Errorf("worker: unknown store kind %q (want postgres or mongo)", c.Store.Kind)
	}
	if _, err := parseStoreOptions(c.Store.Options); err != nil {
		return err
	}
	if c.Store.PoolSize < 0 || c.Store.PoolSize > maxPoolSize {
		return fmt.Errorf("worker: store pool_size %d out of range [0, %d]", c.Store.PoolSize, maxPoolSize)
	}
	if c.CountersIntervalMs < 0 {
		return fmt.Errorf("worker: counters_interval_ms %d is negative", c.CountersIntervalMs)
	}
	if c.Role == protocol.RoleSetup || c.Role == protocol.RoleInspect {
		return nil
	}
	wl := &c.Workload
	if err := relaybus.ValidateName("workload event_type", wl.EventType); err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	if len(wl.Handlers) == 0 || len(wl.Handlers) > maxHandlers {
		return fmt.Errorf("worker: workload needs 1 to %d handlers, got %d", maxHandlers, len(wl.Handlers))
	}
	for _, h := range wl.Handlers {
		if err := relaybus.ValidateName("workload handler", h); err != nil {
			return fmt.Errorf("worker: %w", err)
		}
	}
	switch wl.Keys {
	case "", "none":
	case "hot", "many":
		if wl.KeyCount < 1 || wl.KeyCount > maxKeyCount {
			return fmt.Errorf("worker: workload keys %q needs key_count in [1, %d], got %d", wl.Keys, maxKeyCount, wl.KeyCount)
		}
	default:
		return fmt.Errorf("worker: workload keys %q unknown (want none, hot or many)", wl.Keys)
	}
	if wl.PayloadBytes < 1 || wl.PayloadBytes > maxPayloadBytes {
		return fmt.Errorf("worker: workload payload_bytes %d out of range [1, %d]", wl.PayloadBytes, maxPayloadBytes)
	}
	if wl.HandlerCostUs < 0 || wl.HandlerCostUs > maxCostUs {
		return fmt.Errorf("worker: workload handler_cost_us %d out of range [0, %d]", wl.HandlerCostUs, maxCostUs)
	}
	if wl.PoisonEvery < 0 || wl.FailFirst < 0 || wl.MaxAttempts < 0 || wl.MaxAttempts > relaybus.MaxAttemptsLimit {
		return errors.New("worker: workload poison_every, fail_first and max_attempts must be >= 0 (max_attempts <= 1000)")
	}
	if wl.RetryBaseDelayMs < 0 || wl.RetryMaxDelayMs < 0 {
		return errors.New("worker: workload retry delays must be >= 0")
	}
	switch c.Role {
	case protocol.RolePreload, protocol.RolePublisher:
		p := &c.Publisher
		if p.Publishers < 1 || p.Publishers > maxPublishers {
			return fmt.Errorf("worker: publisher publishers %d out of range [1, %d]", p.Publishers, maxPublishers)
		}
		if p.Batch < 1 || p.Batch > maxPublishBatch {
			return fmt.Errorf("worker: publisher batch %d out of range [1, %d]", p.Batch, maxPublishBatch)
		}
		if p.Events < 0 || (c.Role == protocol.RolePreload && p.Events == 0) {
			return fmt.Errorf("worker: publisher events %d: preload needs a positive count, publisher >= 0", p.Events)
		}
		if p.RatePerSec < 0 || p.StartIndex < 0 || p.Stride < 0 {
			return errors.New("worker: publisher rate_per_sec, start_index and stride must be >= 0")
		}
	case protocol.RoleDispatcher:
		d := &c.Dispatcher
		if d.ExtraCostPerDeliveryUs < 0 || d.ExtraCostPerDeliveryUs > maxCostUs {
			return fmt.Errorf("worker: dispatcher extra_cost_per_delivery_us %d out of range [0, %d]", d.ExtraCostPerDeliveryUs, maxCostUs)
		}
		if d.CompletionWindowDisabled && d.CompletionWindowUs != 0 {
			return fmt.Errorf("worker: dispatcher completion_window_disabled with completion_window_us %d: set one of them", d.CompletionWindowUs)
		}
		// The other dispatcher fields are validated by relaybus.New,
		// which names the field and its range.
	}
	return nil
}

// worker is one relaybus worker process.
type worker struct {
	*workerkit.Session
}
