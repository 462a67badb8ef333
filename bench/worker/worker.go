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
	"strings"

	"github.com/berkcansavur/relaybus/bench/protocol"
	"github.com/berkcansavur/relaybus/bench/worker/workerkit"
	"github.com/berkcansavur/relaybus/relaybus"
	"github.com/berkcansavur/relaybus/relaybus/driver"
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
	return w.Run(ctx, w.run)
}

// capabilities lists what this worker can do; the harness records them.
func capabilities() []string {
	return []string{
		"store:postgres", "store:mongo",
		"role:setup", "role:preload", "role:publisher", "role:dispatcher", "role:inspect",
		"record:v1", "workload:poison", "workload:fail_first", "dispatcher:extra_cost",
		"profile:cpu", "dispatcher:completion_window_disabled",
		protocol.CapabilityCompletionRecords, protocol.CapabilityBatchHandlers,
	}
}

// checks are the config checks every worker shares; the limits are this
// worker's (workerkit.RelaybusLimits, the config's size
// workerkit.MaxConfigBytes).
var checks = workerkit.Checks{Pkg: "worker", Limits: workerkit.RelaybusLimits}

func validateConfig(c *protocol.Config) error {
	return checks.Config(c, &workerkit.Own{
		Store: validateStore,
		Name: func(what, name string) error {
			if err := driver.ValidateName(what, name); err != nil {
				return fmt.Errorf("worker: %w", err)
			}
			return nil
		},
		Workload: func(wl *protocol.Workload) error {
			if wl.RetryBaseDelayMs < 0 || wl.RetryMaxDelayMs < 0 {
				return errors.New("worker: workload retry delays must be >= 0")
			}
			return nil
		},
		Dispatcher: validateDispatcher,
	})
}

// validateDispatcher checks what relaybus.New does not: the name (the
// lease holder in every handle record) and the fields the worker turns
// into relaybus settings itself.
func validateDispatcher(c *protocol.Config) error {
	if c.Name == "" || strings.ContainsAny(c.Name, "\t\n\r") {
		return fmt.Errorf("worker: a dispatcher needs a name without tabs or newlines (its records' holder), got %q", c.Name)
	}
	d := &c.Dispatcher
	if err := checks.InRange("dispatcher extra_cost_per_delivery_us", d.ExtraCostPerDeliveryUs, checks.Limits.CostUs); err != nil {
		return err
	}
	if err := checks.InRange("dispatcher handler_call_wait_us", d.HandlerCallWaitUs, checks.Limits.CostUs); err != nil {
		return err
	}
	if d.HandlerBatchMax < 0 || d.HandlerBatchMax > relaybus.MaxBatchMaxSize {
		return fmt.Errorf("worker: dispatcher handler_batch_max %d out of range [0, %d]", d.HandlerBatchMax, relaybus.MaxBatchMaxSize)
	}
	if d.HandlerBatchCalls < 0 || d.HandlerBatchCalls > relaybus.MaxBatchMaxCalls {
		return fmt.Errorf("worker: dispatcher handler_batch_calls %d out of range [0, %d]", d.HandlerBatchCalls, relaybus.MaxBatchMaxCalls)
	}
	if d.HandlerBatchCalls > 0 && d.HandlerBatchMax == 0 {
		return fmt.Errorf("worker: dispatcher handler_batch_calls %d needs handler_batch_max (batch handlers)", d.HandlerBatchCalls)
	}
	if d.CompletionWindowDisabled && d.CompletionWindowUs != 0 {
		return fmt.Errorf("worker: dispatcher completion_window_disabled with completion_window_us %d: set one of them", d.CompletionWindowUs)
	}
	// The other dispatcher fields are validated by relaybus.New, which
	// names the field and its range.
	return nil
}

// validateStore checks the store's kind, its address and its free-form
// options.
func validateStore(st *protocol.Store) error {
	switch st.Kind {
	case "postgres":
		if st.DSN == "" {
			return errors.New("worker: store postgres needs dsn")
		}
	case "mongo":
		if st.MongoURI == "" || st.Database == "" {
			return errors.New("worker: store mongo needs mongo_uri and database")
		}
	default:
		return fmt.Errorf("worker: unknown store kind %q (want postgres or mongo)", st.Kind)
	}
	_, err := parseStoreOptions(st.Options)
	return err
}

// worker is one relaybus worker process.
type worker struct {
	*workerkit.Session
}
