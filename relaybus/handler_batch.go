package relaybus

import (
	"context"
	"time"
)

// Batch handlers: a handler that takes several deliveries in one call, so
// that what costs a round trip per call (a read-modify-write of an entity
// with a conditional write, a request to another service) is paid once for
// many deliveries (docs/adr/0002-batch-handlers.md).

// BatchHandlerFunc handles a batch of deliveries of one handler in one
// call. For a keyed batch, key is the ordering key and ds are
// consecutive deliveries of that key, in sequence order; for an unkeyed
// batch, key is "" and ds are unkeyed deliveries in any order.
//
// It returns one error per delivery (nil: that delivery succeeded), or
// nil when all succeeded. A slice of another length fails every delivery
// of the batch, as a panic or the end of HandlerOptions.Timeout does.
//
// Each delivery keeps its own attempts, retries and dead letter. In a
// keyed batch the order is never given up: the deliveries before the
// first failed one are completed, the failed one is retried (or buried)
// like a failed single delivery, and those after it are released without
// spending an attempt, whatever their entries say: they run again after
// the failed one, in order. A handler should therefore stop at a key's
// first failure; what it does for the deliveries after it may be done
// again. For an unkeyed batch every entry counts on its own.
//
// ctx is cancelled on shutdown, after HandlerOptions.Timeout, and when the
// lease of any delivery of the batch is lost (a keyed batch's deliveries
// share one lane, so a takeover takes all of them): then nothing more is
// written for the lost ones, and a keyed batch completes none after the
// first lost one. Use each Delivery's FencingToken for writes elsewhere.
type BatchHandlerFunc func(ctx context.Context, key string, ds []*Delivery) []error

// BatchOptions tune a batch handler. A nil *BatchOptions takes every
// default.
type BatchOptions struct {
	// HandlerOptions apply as to a handler of one delivery, except that
	// Timeout bounds one call (one batch), and Middleware must be empty:
	// a middleware wraps the call of one delivery. Config.Middleware does
	// not wrap batch handlers either.
	HandlerOptions
	// MaxSize is the most deliveries of one call. 0 means
	// DefaultBatchMaxSize; else [1, MaxBatchMaxSize]. A keyed batch holds
	// what is due of its key when it is claimed, up to MaxSize (with
	// MaxWait 0: no wait to fill a batch). Config.BatchSize bounds the deliveries of
	// one claim, so batches are at most that large too: set it to at
	// least MaxSize times MaxCalls times the keys that are busy at once.
	MaxSize int
	// MaxCalls is the most calls one claim of a key feeds: a claim takes
	// up to MaxSize*MaxCalls due deliveries of a key (its run; at most
	// MaxBatchMaxSize, and the PostgreSQL store gives at most 128 from
	// one hold of the key's lane), and the handler gets them MaxSize at
	// a time, in sequence order, each call after the one before succeeded in full;
	// after a failure the rest of the run is released, spending no
	// attempt. So a hot key pays one claim for several calls, still with
	// one call of the key in flight. 0 means DefaultBatchMaxCalls; else
	// [1, MaxBatchMaxCalls]; 1 is one call per claim.
	//
	// HandleBatch completes the successes of a key's run together, in one
	// DeliveryCompleteMany call when the run ends (even when they are more
	// than Config.CompletionBatchMax): a later call's completions never
	// commit before an earlier one's. What that costs: a process that
	// stops before the run's completions committed runs all of them again,
	// in order, and a call's completions wait for the calls after it.
	// HandleBatchTx commits each call's transaction before the next call.
	MaxCalls int
	// MaxWait is the most a batch waits to fill: a claimed batch of
	// fewer than MaxSize deliveries whose oldest was published
	// (Event.CreatedAt) less than MaxWait ago is not run but given back,
	// spending no attempt, due again when its oldest has waited MaxWait
	// (driver.DeliveryReleaseParams.AvailableAt); the claim after that
	// takes it with what arrived meanwhile (up to MaxSize times MaxCalls
	// of a key) and runs it, full or not. A key's later deliveries wait
	// behind its head, so its order holds. 0 (the default) runs what is
	// due at once; else (0, MaxBatchMaxWait].
	//
	// What it costs: a batch given back is one release write per
	// delivery, and its deliveries run up to MaxWait (plus
	// Config.PollInterval, for the claim that finds them due) later.
	// The wait counts from the publish, so a delivery published with a
	// DeliverAt later than that, or retried, is not held back, and nor is
	// a suspect (it runs alone). With a store that cannot claim a key's
	// run (driver.KeyRunClaimer), a keyed batch never grows and MaxWait
	// applies to unkeyed batches only. Batches given back are counted in
	// DispatcherStats.HeldBack.
	MaxWait time.Duration
}

// HandleBatch registers a batch handler fn for eventType under name (see
// BatchHandlerFunc). At most one batch of a (handler, key) is in flight at
// a time, across every process: its deliveries live in one lane, leased to
// one dispatcher, and a claim hands out a key's deliveries only while
// nothing of the key is in flight. A delivery that is a suspect (it was in
// flight when its lane was taken over) runs alone, in a batch of one.
// With a store that cannot claim a key's run (driver.KeyRunClaimer; the
// MongoDB store), a keyed batch holds one delivery: still correct, not
// faster. Errors: as Handle, a nil fn, a MaxSize, MaxCalls or MaxWait
// out of range, or Middleware given.
func (b *Bus[TTx]) HandleBatch(eventType, name string, fn BatchHandlerFunc, opts *BatchOptions) error {
	if fn == nil {
		return invalidf("handler %q: nil BatchHandlerFunc", name)
	}
	o, err := batchOptionsOf(name, opts)
	if err != nil {
		return err
	}
	return b.registerHandler(eventType, name, &o.HandlerOptions, &handler[TTx]{batchFn: fn, batchMax: o.MaxSize, batchRun: batchRunOf(o), batchWait: o.MaxWait})
}

// BatchTxHandlerFunc handles a batch of deliveries inside one store
// transaction (HandleBatchTx); key and ds are as for BatchHandlerFunc,
// and so are its results.
type BatchTxHandlerFunc[TTx any] func(ctx context.Context, tx TTx, key string, ds []*Delivery) []error

// HandleBatchTx registers a transactional batch handler: fn runs inside a
// store transaction (TxBegin), the batch's deliveries are completed in it
// (one DeliveryCompleteTx each) and it commits, so the handler's writes
// and the completions commit together or not at all. The call is all or
// nothing: when any delivery fails (or the handler panics, times out, or
// a completion reports its lease lost) the transaction rolls back, the
// failed deliveries are retried or buried with their own attempts, and
// the others are released, spending no attempt, to run again. In a keyed
// batch only the first failure counts, as with HandleBatch: the
// deliveries before it run again first (the failed one is not due until
// its retry), so a key still moves past a delivery that keeps failing.
// Everything else is as HandleBatch.
func (b *Bus[TTx]) HandleBatchTx(eventType, name string, fn BatchTxHandlerFunc[TTx], opts *BatchOptions) error {
	if fn == nil {
		return invalidf("handler %q: nil BatchTxHandlerFunc", name)
	}
	o, err := batchOptionsOf(name, opts)
	if err != nil {
		return err
	}
	return b.registerHandler(eventType, name, &o.HandlerOptions, &handler[TTx]{batchTxFn: fn, batchMax: o.MaxSize, batchRun: batchRunOf(o), batchWait: o.MaxWait})
}

// batchOptionsOf checks opts and applies their defaults.
func batchOptionsOf(name string, opts *BatchOptions) (BatchOptions, error) {
	var o BatchOptions
	if opts != nil {
		o = *opts
	}
	if o.MaxSize == 0 {
		o.MaxSize = DefaultBatchMaxSize
	} else if o.MaxSize < 1 || o.MaxSize > MaxBatchMaxSize {
		return o, invalidf("handler %q: MaxSize %d out of range [1, %d]", name, o.MaxSize, MaxBatchMaxSize)
	}
	if o.MaxCalls == 0 {
		o.MaxCalls = DefaultBatchMaxCalls
	} else if o.MaxCalls < 1 || o.MaxCalls > MaxBatchMaxCalls {
		return o, invalidf("handler %q: MaxCalls %d out of range [1, %d]", name, o.MaxCalls, MaxBatchMaxCalls)
	}
	if o.MaxWait < 0 || o.MaxWait > MaxBatchMaxWait {
		return o, invalidf("handler %q: MaxWait %v out of range [0, %v]", name, o.MaxWait, MaxBatchMaxWait)
	}
	if len(o.Middleware) > 0 {
		return o, invalidf("handler %q: a batch handler takes no Middleware", name)
	}
	return o, nil
}

// batchRunOf is the most deliveries of one key a claim takes for a batch
// handler of o (its defaults applied): MaxCalls calls of MaxSize, at most
// MaxBatchMaxSize (driver.MaxKeyRun). A store may give less: PostgreSQL
// gives at most twice a lane's quota from one hold of it.
func batchRunOf(o BatchOptions) int {
	return min(o.MaxSize*o.MaxCalls, MaxBatchMaxSize)
}
