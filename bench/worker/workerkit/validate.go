package workerkit

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

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

// Own are the checks of a config that are a worker's own, which
// Checks.Config runs in their place among the shared ones.
type Own struct {
	// Store checks the store's kind, address and free-form options.
	Store func(*protocol.Store) error
	// Name checks a workload name (the event type, each handler) by the
	// worker's rule; its error is returned as it is, so it carries the
	// worker's prefix. Checks.Name is the peers' rule.
	Name func(what, name string) error
	// Workload, when set, checks what the worker adds to Checks.Workload
	// (its retry settings).
	Workload func(*protocol.Workload) error
	// Dispatcher, when set, checks the settings of a dispatcher.
	Dispatcher func(*protocol.Config) error
}

// Config checks a config in the order every worker checks it, so that
// the same config fails on every side with the same first complaint:
// Plumbing (with own.Store); then, for the roles that have a workload,
// the event type's name, the handlers (own.Name), Workload and
// own.Workload; then Publisher for a preload or publisher, or
// own.Dispatcher for a dispatcher. Setup and inspect have no workload:
// their check ends after Plumbing.
func (k *Checks) Config(c *protocol.Config, own *Own) error {
	if err := k.Plumbing(c, own.Store); err != nil {
		return err
	}
	if c.Role == protocol.RoleSetup || c.Role == protocol.RoleInspect {
		return nil
	}
	wl := &c.Workload
	if err := own.Name("workload event_type", wl.EventType); err != nil {
		return err
	}
	if err := k.Handlers(wl.Handlers, own.Name); err != nil {
		return err
	}
	if err := k.Workload(wl); err != nil {
		return err
	}
	if own.Workload != nil {
		if err := own.Workload(wl); err != nil {
			return err
		}
	}
	switch c.Role {
	case protocol.RolePreload, protocol.RolePublisher:
		return k.Publisher(c)
	case protocol.RoleDispatcher:
		if own.Dispatcher != nil {
			return own.Dispatcher(c)
		}
	}
	return nil
}

// Peer returns the own checks of a peer on PostgreSQL that retries on
// relaybus's schedule: the store is postgres (PostgresOnly, why saying
// why another kind is not), the names follow the peers' rule (Name), the
// retry delays relaybus's bounds (RetrySchedule), and dispatcher checks
// the dispatcher settings the peer applies.
func (k *Checks) Peer(why string, dispatcher func(*protocol.Config) error) *Own {
	return &Own{
		Store: k.PostgresOnly(why),
		Name:  k.Name,
		Workload: func(wl *protocol.Workload) error {
			_, err := k.RetrySchedule(wl)
			return err
		},
		Dispatcher: dispatcher,
	}
}

// Name is the peers' rule for a workload name: relaybus's (non-empty,
// valid UTF-8, at most relaybus.MaxHandlerNameBytes), and no control
// characters, which the record format cannot hold (tabs, newlines).
func (k *Checks) Name(what, name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%s: %s is empty", k.Pkg, what)
	case len(name) > relaybus.MaxHandlerNameBytes:
		return fmt.Errorf("%s: %s is over %d bytes", k.Pkg, what, relaybus.MaxHandlerNameBytes)
	case !utf8.ValidString(name):
		return fmt.Errorf("%s: %s %q is not valid UTF-8", k.Pkg, what, name)
	case strings.ContainsFunc(name, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return fmt.Errorf("%s: %s %q contains a control character", k.Pkg, what, name)
	}
	return nil
}

// InRange checks that a field's value (what names it: "dispatcher
// poll_ms") is in [0, maxV]. A worker's own checks chain it with cmp.Or,
// which returns the first failure.
func (k *Checks) InRange(what string, v, maxV int) error {
	if v < 0 || v > maxV {
		return fmt.Errorf("%s: %s %d out of range [0, %d]", k.Pkg, what, v, maxV)
	}
	return nil
}

// PostgresOnly returns the store check of a worker that runs on
// PostgreSQL only: kind postgres with a dsn; why says, in the error for
// any other kind, why that kind is not supported.
func (k *Checks) PostgresOnly(why string) func(*protocol.Store) error {
	return func(st *protocol.Store) error {
		if st.Kind != "postgres" {
			return fmt.Errorf("%s: store kind %q is not supported (%s)", k.Pkg, st.Kind, why)
		}
		if st.DSN == "" {
			return errors.New(k.Pkg + ": store postgres needs dsn")
		}
		return nil
	}
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
