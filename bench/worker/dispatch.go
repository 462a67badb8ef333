package worker

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/berkcansavur/relaybus/bench/protocol"
	"github.com/berkcansavur/relaybus/bench/record"
	"github.com/berkcansavur/relaybus/relaybus"
)

func dispatch[TTx any](ctx context.Context, w *worker, st relaybus.Store[TTx]) error {
	wl, dc := &w.Cfg.Workload, &w.Cfg.Dispatcher
	rw, err := record.Create(w.Cfg.RecordPath)
	if err != nil {
		return err
	}
	rec := &recorder{w: rw}
	var handled, failed atomic.Int64

	cfg := busConfig(wl, dc)
	cfg.Logger = w.Log
	// The records of a completion batch reach the kernel before the
	// completion is sent, so a SIGKILL cannot lose the record of a
	// completed delivery.
	cfg.BeforeComplete = func(context.Context, []*relaybus.Delivery) error { return rec.flush() }
	// Each completion the store confirmed gets a C line, written to the
	// kernel with the next batch's handles or at the end: a kill may lose
	// the last ones, so they bound what happened from below.
	cfg.AfterFinish = func(_ context.Context, f relaybus.Finish) {
		if f.Outcome != relaybus.FinishCompleted {
			return
		}
		d := f.Delivery
		rec.mu.Lock()
		err := rec.w.AddCompleted(record.Completed{
			EventID: d.EventID, Handler: d.Handler, Attempt: d.Attempts, Token: d.LeaseToken, CompletedNs: time.Now().UnixNano(),
		})
		rec.mu.Unlock()
		if err != nil {
			w.Log.Error("worker: recording a completion", "error", err)
		}
	}
	bus, err := relaybus.New(st, cfg)
	if err != nil {
		return err
	}
	cost := time.Duration(wl.HandlerCostUs) * time.Microsecond
	extra := time.Duration(dc.ExtraCostPerDeliveryUs) * time.Microsecond
	wait := time.Duration(dc.HandlerCallWaitUs) * time.Microsecond
	// apply is one delivery's work from start, the record its last step;
	// it reports whether the delivery failed (planted).
	apply := func(d *relaybus.Delivery, start time.Time) (bool, error) {
		if cost > 0 {
			spin(cost)
		}
		if extra > 0 {
			spin(extra)
		}
		poison := len(d.Payload) > 0 && d.Payload[0] == protocol.PayloadPoison
		fail := poison || d.Attempts <= wl.FailFirst
		// The handler's work ends here: the record is its last step.
		// One worker process is one store instance, so its name is
		// the lease's holder.
		end := time.Now()
		rec.mu.Lock()
		err := rec.w.AddHandled(record.Handled{
			EventID: d.EventID, Handler: d.Handler, Key: d.Key, Sequence: d.Sequence,
			Attempt: d.Attempts, HandleNs: start.UnixNano(), OK: !fail,
			EndNs: end.UnixNano(), Holder: w.Cfg.Name, Token: d.LeaseToken,
		})
		rec.mu.Unlock()
		if err != nil {
			return false, err
		}
		if fail {
			failed.Add(1)
			return true, fmt.Errorf("planted failure (poison=%v, attempt %d)", poison, d.Attempts)
		}
		handled.Add(1)
		return false, nil
	}
	for _, h := range wl.Handlers {
		if dc.HandlerBatchMax > 0 {
			if err := bus.HandleBatch(wl.EventType, h, batchHandler(apply, wait), w.batchOptions(dc.HandlerBatchMax, dc.HandlerBatchCalls)); err != nil {
				return err
			}
			continue
		}
		fn := func(ctx context.Context, d *relaybus.Delivery) error {
			start := time.Now()
			if wait > 0 {
				time.Sleep(wait)
			}
			_, err := apply(d, start)
			return err
		}
		if err := bus.Handle(wl.EventType, h, fn, w.workloadHandlerOptions()); err != nil {
			return err
		}
	}
	counters := func() *protocol.Counters {
		s := bus.DispatcherStats()
		c := &protocol.Counters{
			Handled: handled.Load(), HandlerFailed: failed.Load(),
			Completed: s.Completed, Claims: s.Claims, Claimed: s.Claimed,
			Rescheduled: s.Rescheduled, Buried: s.Buried, Released: s.Released, LeasesLost: s.LeasesLost,
		}
		rec.counters(c)
		return c
	}
	w.Ready()
	tickStop := make(chan struct{})
	go w.Tick(tickStop, func() { w.Out.Emit(&protocol.Message{Type: protocol.TypeCounters, Counters: counters()}) })
	runErr := bus.Run(ctx)
	close(tickStop)
	closeErr := rw.Close()
	if runErr != nil {
		return runErr
	}
	if closeErr != nil {
		return fmt.Errorf("worker: closing records: %w", closeErr)
	}
	w.Out.Emit(&protocol.Message{Type: protocol.TypeDone, Counters: counters()})
	return nil
}

// batchHandler is the workload's handler as a batch handler: one wait
// for the whole call (the round trip of a read-modify-write of the key's
// row elsewhere, which applies the batch at once), then each delivery in
// order. The first delivery's record spans the wait; each later one
// starts where the one before it ended, so the records of one key never
// overlap. A keyed batch stops at its first failure: the deliveries after
// it did not run (the dispatcher releases them, and they run again after
// the failed one).
func batchHandler(apply func(*relaybus.Delivery, time.Time) (bool, error), wait time.Duration) relaybus.BatchHandlerFunc {
	return func(_ context.Context, key string, ds []*relaybus.Delivery) []error {
		start := time.Now()
		if wait > 0 {
			time.Sleep(wait)
		}
		var errs []error
		for i, d := range ds {
			failed, err := apply(d, start)
			if err != nil {
				if errs == nil {
					errs = make([]error, len(ds))
				}
				errs[i] = err
				if key != "" || !failed {
					return errs
				}
			}
			start = time.Now()
		}
		return errs
	}
}

// spin busy-waits for d: a handler cost that uses CPU like real work
// does, and that a sleep's timer granularity would not reproduce.
func spin(d time.Duration) {
	for end := time.Now().Add(d); time.Now().Before(end); {
	}
}

// busConfig is the dispatcher's relaybus.Config as the protocol's
// workload and dispatcher groups set it (zero: the library's default).
func busConfig(wl *protocol.Workload, dc *protocol.Dispatcher) relaybus.Config {
	cfg := relaybus.Config{
		Concurrency:           dc.Concurrency,
		BatchSize:             dc.Batch,
		PollInterval:          time.Duration(dc.PollMs) * time.Millisecond,
		LeaseDuration:         time.Duration(dc.LeaseMs) * time.Millisecond,
		CompletionBatchWindow: time.Duration(dc.CompletionWindowUs) * time.Microsecond,
		CompletionBatchMax:    dc.CompletionBatchMax,
		RetryBaseDelay:        time.Duration(wl.RetryBaseDelayMs) * time.Millisecond,
		RetryMaxDelay:         time.Duration(wl.RetryMaxDelayMs) * time.Millisecond,
	}
	if dc.CompletionWindowDisabled {
		// completion_window_us cannot say it: -1 µs would be -1000 ns,
		// which relaybus rejects.
		cfg.CompletionBatchWindow = relaybus.Disabled
	}
	return cfg
}
