package relaybus

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/internal/check"
)

// HandlerFunc handles one delivery. A nil error completes it; an error
// retries it with backoff until its attempt budget is spent, then makes it a
// dead letter (Permanent errors at once). ctx is cancelled on shutdown, when
// the lease is lost, and after HandlerOptions.Timeout.
type HandlerFunc func(ctx context.Context, d *Delivery) error

// TxHandlerFunc handles one delivery inside a store transaction; the
// delivery's completion commits in the same transaction, so the handler's
// writes happen effectively once.
type TxHandlerFunc[TTx any] func(ctx context.Context, tx TTx, d *Delivery) error

// Middleware wraps every call of a handler, plain or transactional: it
// runs with the attempt's context and delivery and calls next to go on, to
// the next middleware and last to the handler; what it returns is the
// attempt's outcome, as a handler's error is (nil completes the delivery,
// and a middleware that does not call next completes it without running
// the handler). Logging with the delivery's attributes, tracing, metrics,
// a per-call timeout or an error mapping are middleware. It must not
// modify d, and next must not be called after the middleware returned.
// A panic in a middleware is recovered like a handler's. For a
// transactional handler the whole chain runs inside the transaction.
type Middleware func(ctx context.Context, d *Delivery, next func(ctx context.Context) error) error

// chain wraps call in mws, the first outermost.
func chain(mws []Middleware, d *Delivery, call func(context.Context) error) func(context.Context) error {
	for i := len(mws) - 1; i >= 0; i-- {
		mw, next := mws[i], call
		call = func(ctx context.Context) error { return mw(ctx, d, next) }
	}
	return call
}

// HandlerOptions tune one handler. A nil *HandlerOptions takes every default.
type HandlerOptions struct {
	// MaxAttempts is the attempt budget of the handler's deliveries. 0 means
	// Config.MaxAttempts; else [1, MaxAttemptsLimit]. It is stored with each
	// delivery at publish, so it is the publisher's value that counts.
	MaxAttempts int
	// Timeout bounds one attempt: the handler's ctx is cancelled after it and
	// the attempt fails. 0 means none; else [MinHandlerTimeout,
	// MaxHandlerTimeout].
	Timeout time.Duration
	// Middleware wraps this handler's calls, inside Config.Middleware;
	// the first is outermost. A nil entry is an error.
	Middleware []Middleware
}

// handler is one registered handler: run here (fn or txFn set) or only
// declared (both nil).
type handler[TTx any] struct {
	name        string
	eventType   string
	maxAttempts int
	timeout     time.Duration
	// middleware: Config.Middleware, then HandlerOptions.Middleware.
	middleware []Middleware
	fn         HandlerFunc
	txFn       TxHandlerFunc[TTx]
	// batchFn is a batch handler's (HandleBatch), with batchMax the most
	// deliveries of one call and batchRun the most of one key a claim
	// takes for it (BatchOptions.MaxCalls calls of batchMax, at most
	// MaxBatchMaxSize).
	batchFn   BatchHandlerFunc
	batchTxFn BatchTxHandlerFunc[TTx]
	batchMax  int
	batchRun  int
	// batchWait is BatchOptions.MaxWait: a batch shorter than batchMax
	// whose oldest delivery was published less than batchWait ago is
	// given back to be due then, to fill (holdBack).
	batchWait time.Duration
}

func (h *handler[TTx]) runs() bool { return h.fn != nil || h.txFn != nil || h.isBatch() }

// isBatch reports whether h is a batch handler (HandleBatch, HandleBatchTx).
func (h *handler[TTx]) isBatch() bool { return h.batchFn != nil || h.batchTxFn != nil }

// Handle registers fn for eventType under name. The name is unique across the
// bus and is what deliveries are stored under: renaming a handler orphans its
// pending deliveries. Errors: empty or invalid type or name, a duplicate
// name, a nil fn, bad options, or the dispatcher already started.
func (b *Bus[TTx]) Handle(eventType, name string, fn HandlerFunc, opts *HandlerOptions) error {
	if fn == nil {
		return invalidf("handler %q: nil HandlerFunc", name)
	}
	return b.register(eventType, name, opts, fn, nil)
}

// HandleTx registers a transactional handler: fn runs inside a store
// transaction (TxBegin) and the delivery's completion commits in it
// (DeliveryCompleteTx, then TxCommit). If the completion reports the lease
// lost, or fn fails or panics, the transaction rolls back; a failure is then
// rescheduled or buried outside it.
func (b *Bus[TTx]) HandleTx(eventType, name string, fn TxHandlerFunc[TTx], opts *HandlerOptions) error {
	if fn == nil {
		return invalidf("handler %q: nil TxHandlerFunc", name)
	}
	return b.register(eventType, name, opts, nil, fn)
}

// Declare registers a handler that this process publishes to but does not
// run: a publisher-only process must know which handlers exist to give each
// event its deliveries. Its deliveries are never claimed by this bus.
func (b *Bus[TTx]) Declare(eventType, name string, opts *HandlerOptions) error {
	return b.register(eventType, name, opts, nil, nil)
}

func (b *Bus[TTx]) register(eventType, name string, opts *HandlerOptions, fn HandlerFunc, txFn TxHandlerFunc[TTx]) error {
	return b.registerHandler(eventType, name, opts, &handler[TTx]{fn: fn, txFn: txFn})
}

// registerHandler checks and registers h (its functions set) under name
// for eventType, with opts.
func (b *Bus[TTx]) registerHandler(eventType, name string, opts *HandlerOptions, h *handler[TTx]) error {
	if eventType == "" {
		return invalidf("handler %q: event type is empty", name)
	}
	if err := check.Text("event type", eventType, MaxEventTypeBytes); err != nil {
		return err
	}
	if err := driver.ValidateName("handler name", name); err != nil {
		return err
	}
	var o HandlerOptions
	if opts != nil {
		o = *opts
	}
	if o.MaxAttempts == 0 {
		o.MaxAttempts = b.cfg.MaxAttempts
	} else if o.MaxAttempts < 1 || o.MaxAttempts > MaxAttemptsLimit {
		return invalidf("handler %q: MaxAttempts %d out of range [1, %d]", name, o.MaxAttempts, MaxAttemptsLimit)
	}
	if o.Timeout != 0 && (o.Timeout < MinHandlerTimeout || o.Timeout > MaxHandlerTimeout) {
		return invalidf("handler %q: Timeout %v out of range [%v, %v]", name, o.Timeout, MinHandlerTimeout, MaxHandlerTimeout)
	}
	if slices.ContainsFunc(o.Middleware, func(m Middleware) bool { return m == nil }) {
		return invalidf("handler %q: a nil Middleware", name)
	}

	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state != stateNew {
		return invalidf("handler %q: the dispatcher has already started; register handlers before Start or Run", name)
	}
	if _, dup := b.handlers[name]; dup {
		return invalidf("handler %q is already registered", name)
	}
	if len(b.byType[eventType]) >= MaxHandlersPerEvent {
		return invalidf("event type %q: over the limit of %d handlers", eventType, MaxHandlersPerEvent)
	}
	h.name, h.eventType, h.maxAttempts, h.timeout = name, eventType, o.MaxAttempts, o.Timeout
	if !h.isBatch() {
		h.middleware = append(b.cfg.Middleware, o.Middleware...)
	}
	b.handlers[name] = h
	b.byType[eventType] = append(b.byType[eventType], driver.DeliverySpec{Handler: name, MaxAttempts: o.MaxAttempts})
	return nil
}

// permanentError marks an error that must not be retried.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return "permanent: " + e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Permanent wraps err so that the delivery is buried at once, without
// retries. Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

// IsPermanent reports whether err (or an error it wraps) came from Permanent.
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}
