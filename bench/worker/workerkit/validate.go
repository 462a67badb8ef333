package workerkit

import (
	"errors"
	"fmt"

	"github.com/berkcansavur/relaybus/bench/protocol"
	"github.com/berkcansavur/relaybus/relaybus"
)

// Checks are the parts of a config check that every worker shares, with
// the worker's error prefix and limits. What differs (store kinds, name
// rules, dispatcher fields) each worker checks itself, between them.
type Checks struct {
	Pkg    string // error prefix
	Limits Limits
}

// Limits are a worker's bounds on a config; each is inclusive.
type Limits struct {
	Handlers     int // workload handlers
	PoolSize     int // store pool_size
	KeyCount     int // workload key_count
	PayloadBytes int // workload payload_bytes
	CostUs       int // workload handler_cost_us
	Attempts     int // workload max_attempts
	Publishers   int // publisher publishers
	PublishBatch int // publisher batch
}

// RelaybusLimits are the relaybus worker's limits: the library's where
// it has one. A peer uses them too, so that a config one side accepts the
// other accepts too.
var RelaybusLimits = Limits{
	Handlers:     64,
	PoolSize:     1000,
	KeyCount:     10_000_000,
	PayloadBytes: relaybus.DefaultMaxPayloadBytes,
	CostUs:       10_000_000,
	Attempts:     relaybus.MaxAttemptsLimit,
	Publishers:   1024,
	PublishBatch: relaybus.MaxEventsPerPublish,
}

// Plumbing checks the protocol, the role and its record path, the store
// (with store, the worker's own check of its kind and options) and the
// pool size and counters interval.
func (k *Checks) Plumbing(c *protocol.Config, store func(*protocol.Store) error) error {
	if c.Protocol != protocol.Version {
		return fmt.Errorf("%s: config speaks protocol %d, this worker speaks %d", k.Pkg, c.Protocol, protocol.Version)
	}
	switch c.Role {
	case protocol.RoleSetup, protocol.RoleInspect:
	case protocol.RolePreload, protocol.RolePublisher, protocol.RoleDispatcher:
		if c.RecordPath == "" {
			return fmt.Errorf("%s: role %s needs record_path", k.Pkg, c.Role)
		}
	default:
		return fmt.Errorf("%s: unknown role %q", k.Pkg, c.Role)
	}
	if err := store(&c.Store); err != nil {
		return err
	}
	if c.Store.PoolSize < 0 || c.Store.PoolSize > k.Limits.PoolSize {
		return fmt.Errorf("%s: store pool_size %d out of range [0, %d]", k.Pkg, c.Store.PoolSize, k.Limits.PoolSize)
	}
	if c.CountersIntervalMs < 0 {
		return fmt.Errorf("%s: counters_interval_ms %d is negative", k.Pkg, c.CountersIntervalMs)
	}
	return nil
}

// Handlers checks the workload's handler names: 1 to Limits.Handlers of
// them, each accepted by valid (the worker's own name rule; its error is
// returned as it is, so it carries the worker's prefix), none listed
// twice (a handler registered twice would get each delivery twice, or be
// refused by the library at registration, depending on the worker).
func (k *Checks) Handlers(handlers []string, valid func(what, name string) error) error {
	if len(handlers) == 0 || len(handlers) > k.Limits.Handlers {
		return fmt.Errorf("%s: workload needs 1 to %d handlers, got %d", k.Pkg, k.Limits.Handlers, len(handlers))
	}
	seen := make(map[string]bool, len(handlers))
	for _, h := range handlers {
		if err := valid("workload handler", h); err != nil {
			return err
		}
		if seen[h] {
			return fmt.Errorf("%s: workload handler %q listed twice", k.Pkg, h)
		}
		seen[h] = true
	}
	return nil
}

// Workload checks the workload's keys, payload size, handler cost,
// poison and failure counts and attempts; the worker checks the names.
func (k *Checks) Workload(wl *protocol.Workload) error {
	switch wl.Keys {
	case "", "none":
	case "hot", "many":
		if wl.KeyCount < 1 || wl.KeyCount > k.Limits.KeyCount {
			return fmt.Errorf("%s: workload keys %q needs key_count in [1, %d], got %d", k.Pkg, wl.Keys, k.Limits.KeyCount, wl.KeyCount)
		}
	default:
		return fmt.Errorf("%s: workload keys %q unknown (want none, hot or many)", k.Pkg, wl.Keys)
	}
	if wl.PayloadBytes < 1 || wl.PayloadBytes > k.Limits.PayloadBytes {
		return fmt.Errorf("%s: workload payload_bytes %d out of range [1, %d]", k.Pkg, wl.PayloadBytes, k.Limits.PayloadBytes)
	}
	if wl.HandlerCostUs < 0 || wl.HandlerCostUs > k.Limits.CostUs {
		return fmt.Errorf("%s: workload handler_cost_us %d out of range [0, %d]", k.Pkg, wl.HandlerCostUs, k.Limits.CostUs)
	}
	if wl.PoisonEvery < 0 || wl.FailFirst < 0 || wl.MaxAttempts < 0 || wl.MaxAttempts > k.Limits.Attempts {
		return fmt.Errorf("%s: workload poison_every, fail_first and max_attempts must be >= 0 (max_attempts <= %d)", k.Pkg, k.Limits.Attempts)
	}
	return nil
}

// Publisher checks the publisher settings of a preload or publisher.
func (k *Checks) Publisher(c *protocol.Config) error {
	p := &c.Publisher
	if p.Publishers < 1 || p.Publishers > k.Limits.Publishers {
		return fmt.Errorf("%s: publisher publishers %d out of range [1, %d]", k.Pkg, p.Publishers, k.Limits.Publishers)
	}
	if p.Batch < 1 || p.Batch > k.Limits.PublishBatch {
		return fmt.Errorf("%s: publisher batch %d out of range [1, %d]", k.Pkg, p.Batch, k.Limits.PublishBatch)
	}
	if p.Events < 0 || (c.Role == protocol.RolePreload && p.Events == 0) {
		return fmt.Errorf("%s: publisher events %d: preload needs a positive count, publisher >= 0", k.Pkg, p.Events)
	}
	if p.RatePerSec < 0 || p.StartIndex < 0 || p.Stride < 0 {
		return errors.New(k.Pkg + ": publisher rate_per_sec, start_index and stride must be >= 0")
	}
	return nil
}
