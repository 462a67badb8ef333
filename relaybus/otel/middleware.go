package otel

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/berkcansavur/relaybus/relaybus"
)

// Middleware returns the handler middleware: for every handler call it
// counts the call, records its lag and duration, counts a failure, keeps
// relaybus.handler.active, and runs the call in a consumer span whose
// context the handler gets (so its logs and its own spans carry the
// trace). Put it first in Config.Middleware (Configure does): what it
// measures is everything inside it.
func (in *Instruments) Middleware() relaybus.Middleware { return in.middleware }

func (in *Instruments) middleware(ctx context.Context, d *relaybus.Delivery, next func(context.Context) error) (err error) {
	start := time.Now()
	h := in.handler(d.Handler, d.EventType)
	h.calls.Add(1)
	ctx, span := in.startProcess(ctx, d, h)
	if !d.EventCreatedAt.IsZero() {
		now := start
		if !in.clockIsDefault {
			now = in.now()
		}
		// In the span's context, so that an exemplar of the lag points at
		// the attempt it measured.
		in.handlerLag.Record(ctx, max(now.Sub(d.EventCreatedAt), 0).Seconds(), h.opts.rec...)
	}

	returned := false
	defer func() {
		dur := time.Since(start).Seconds()
		if err != nil || !returned {
			in.failed(ctx, span, d, err, !returned, dur)
		} else {
			in.handlerDuration.Record(ctx, dur, h.opts.rec...)
		}
		h.ended.Add(1)
		span.End()
	}()
	err = next(ctx)
	returned = true
	return err
}

// failed records a handler call that failed (err, or a panic) after
// dur seconds, on its span and in its metrics; apart from the middleware,
// whose frame (on the stack of every handler call) it keeps small.
func (in *Instruments) failed(ctx context.Context, span trace.Span, d *relaybus.Delivery, err error, panicked bool, dur float64) {
	typ := errorType(err)
	if panicked {
		// A panic is on its way up to the dispatcher, which recovers it
		// and fails the attempt: record it without stopping it.
		typ = errorTypePanic
		span.SetStatus(codes.Error, "handler panicked")
	} else {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.SetAttributes(AttrErrorType.String(typ))
	fo := in.opts(attrKey{handler: d.Handler, eventType: d.EventType, errorType: typ})
	in.handlerFailures.Add(ctx, 1, fo.add...)
	in.handlerDuration.Record(ctx, dur, fo.rec...)
}

// The span start options that never change.
var consumerKind = trace.WithSpanKind(trace.SpanKindConsumer)

// noParent is the trace API's span of no trace, which a context without
// a span holds.
var noParent = trace.SpanFromContext(context.Background())

// A handler span has spanAttrs attributes: the five messaging.*
// attributes that OpenTelemetry's messaging conventions name as
// sampling-relevant (system, operation type and name, destination,
// consumer group) and relaybus.handler and relaybus.event.type, the same
// for every call of a handler on an event type (handlerTel.spanAttrs),
// then the attempt's own message ID, delivery ID, attempt and key. They
// are set on a span that records, just after its start; only with
// Options.SamplerAttributes are the five given at the start too, where a
// sampler sees them. An unsampled span is then never given any, which was
// much of what it cost: the SDK copies a start's attributes
// into a slice of its own, an allocation per attempt.
const (
	spanSamplerAttrs = 5
	spanFixedAttrs   = spanSamplerAttrs + 2
	spanAttrs        = spanFixedAttrs + 4
)

// spanArgs is a buffer from a pool of its handler's that startProcess
// uses for a span with a link or one that records: the link, and the
// attributes a recording span gets. The tracer reads the link only while
// Start runs (trace.NewSpanStartConfig copies it into the span's config)
// and the span copies what SetAttributes gives it, so one spanArgs serves
// span after span: its fixed attributes are written once, when it is
// made, and only the attempt's own ones (and the link) are written for
// each span and cleared after it.
type spanArgs struct {
	attrs [spanAttrs]attribute.KeyValue
	links [1]trace.Link
	// withLink links: an option made once, with the spanArgs, when
	// lateOptions holds (it reads the array as it is when Start applies
	// it); nil otherwise, and made per span.
	withLink trace.SpanStartOption
	opts     [4]trace.SpanStartOption
}

// newSpanArgs makes a spanArgs for the spans of h.
func newSpanArgs(h *handlerTel) *spanArgs {
	a := new(spanArgs)
	copy(a.attrs[:], h.spanAttrs[:])
	if lateOptions {
		a.withLink = trace.WithLinks(a.links[:]...)
	}
	return a
}

// lateOptions reports whether trace.WithLinks keeps the slice it is
// given and reads it only when the option is applied, as
// go.opentelemetry.io/otel/trace does: a spanArgs makes its link option
// once then, else once per linked span (one more allocation).
var lateOptions = optionsReadLate()

func optionsReadLate() bool {
	var links [1]trace.Link
	withLink := trace.WithLinks(links[:]...)
	links[0] = trace.Link{SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}})}
	c := trace.NewSpanStartConfig(withLink)
	return len(c.Links()) == 1 && c.Links()[0].SpanContext.Equal(links[0].SpanContext)
}

// startProcess starts the consumer span of one attempt, linked to (or,
// with Options.ChildOfPublish, a child of) the span context in the
// delivery's headers, and carries the headers' baggage into ctx. The
// sampler sees the span's kind, name ("process <event type>"), its link
// or parent, and with Options.SamplerAttributes the sampling-relevant
// attributes; a span that records then gets all of its attributes. A
// delivery without headers takes its start options from h as they are:
// nothing of this package is allocated or pooled for it.
func (in *Instruments) startProcess(ctx context.Context, d *relaybus.Delivery, h *handlerTel) (context.Context, trace.Span) {
	var a *spanArgs
	opts := h.startOpts
	parent := ctx
	if len(d.Headers) > 0 {
		parent, opts, a = in.fromHeaders(parent, d.Headers, h)
	}
	if !in.childOfPublish {
		// A trace per attempt: the dispatcher's context may carry a span
		// of whatever started Run, which is no parent of this work. An
		// invalid span over it hides any such span, as WithNewRoot would
		// (which makes the SDK put an empty span context into a context
		// of its own, two allocations), and it ends the tracer's and its
		// sampler's look-ups of the current span at the top of the
		// context: without it each would walk every layer the
		// dispatcher's context has (a cancellation, a deadline, Run's own
		// context) only to find none.
		parent = trace.ContextWithSpan(parent, noParent)
	}
	ctx, span := in.tracer.Start(parent, h.spanName, opts...)
	if span.IsRecording() {
		if a == nil {
			a = h.args.Get().(*spanArgs)
		}
		a.setAttributes(span, d)
	}
	if a != nil {
		a.links[0] = trace.Link{}
		h.args.Put(a)
	}
	return ctx, span
}

// setAttributes sets the attributes of a span that records, those of h
// and d's own, from a's buffer, which it leaves as it found it.
func (a *spanArgs) setAttributes(span trace.Span, d *relaybus.Delivery) {
	own := a.attrs[spanFixedAttrs:]
	own[0] = attrMessageID.String(d.EventID)
	own[1] = AttrDeliveryID.String(d.ID)
	own[2] = AttrAttempt.Int(d.Attempts)
	n := len(a.attrs) - 1
	if d.Key != "" {
		own[3] = AttrEventKey.String(d.Key)
		n++
	}
	span.SetAttributes(a.attrs[:n]...)
	// Cleared before it goes back, so that the pool holds no strings of
	// this delivery: the fixed attributes stay.
	clear(own)
}

// fromHeaders reads the span context and the baggage in a delivery's
// headers: it returns ctx with the baggage (and with
// Options.ChildOfPublish the span context as its remote parent), and
// the start options, with the link to the span context and the spanArgs
// that holds it (nil when there is none). Apart from startProcess, whose
// frame (on the stack of every handler call) it keeps small.
func (in *Instruments) fromHeaders(ctx context.Context, headers map[string]string, h *handlerTel) (context.Context, []trace.SpanStartOption, *spanArgs) {
	// Extracted onto an empty context, so that only the headers' span
	// context is found, never one ctx carries already.
	ectx := in.prop.Extract(context.Background(), propagation.MapCarrier(headers))
	if b := baggage.FromContext(ectx); b.Len() > 0 {
		ctx = baggage.ContextWithBaggage(ctx, b)
	}
	sc := trace.SpanContextFromContext(ectx)
	switch {
	case !sc.IsValid():
		return ctx, h.startOpts, nil
	case in.childOfPublish:
		return trace.ContextWithRemoteSpanContext(ctx, sc), h.startOpts, nil
	}
	a := h.args.Get().(*spanArgs)
	a.links[0] = trace.Link{SpanContext: sc}
	withLink := a.withLink
	if withLink == nil {
		withLink = trace.WithLinks(a.links[:]...)
	}
	return ctx, append(append(a.opts[:0], h.startOpts...), withLink), a
}

// handlerKey names the calls of one handler on one event type.
type handlerKey struct{ handler, eventType string }

// handlerTel is what every call of one handler on one event type
// shares, built once: the options of its metrics (handler and event
// type; and of relaybus.delivery.finished, per outcome), its span's
// name and fixed attributes, and the counts behind its observable
// instruments.
type handlerTel struct {
	opts      *measOpts
	finished  [len(outcomes)]*measOpts
	spanName  string
	spanAttrs [spanFixedAttrs]attribute.KeyValue
	// startOpts are the start options of a span without a link:
	// consumerKind, and with Options.SamplerAttributes the sampler's
	// attributes. Never written to once made.
	startOpts []trace.SpanStartOption
	// args holds the *spanArgs of this handler's spans.
	args sync.Pool

	// calls is relaybus.handler.calls and calls less ended
	// relaybus.handler.active: one atomic add at each end of a call
	// (both reported once calls is not 0, so that a handler that only
	// ever had an AfterFinish has no series of them). finishedN is
	// relaybus.delivery.finished per outcome (reported once not 0) and
	// otherFinished that of any other outcome (string -> *atomic.Int64).
	calls, ended  atomic.Int64
	finishedN     [len(outcomes)]atomic.Int64
	otherFinished sync.Map
}

// observeHandlers reports the observable instruments of every handler
// seen so far.
func (in *Instruments) observeHandlers(_ context.Context, o metric.Observer) error {
	in.handlers.Range(func(k, v any) bool {
		h := v.(*handlerTel)
		// ended first: every call it counts is in calls by then, so the
		// difference is never below 0 (a call that ends between the two
		// loads counts as running).
		ended := h.ended.Load()
		if n := h.calls.Load(); n > 0 {
			o.ObserveInt64(in.handlerCalls, n, h.opts.obs...)
			o.ObserveInt64(in.handlerActive, n-ended, h.opts.obs...)
		}
		for i := range h.finishedN {
			if n := h.finishedN[i].Load(); n > 0 {
				o.ObserveInt64(in.finished, n, h.finished[i].obs...)
			}
		}
		h.otherFinished.Range(func(outcome, n any) bool {
			hk := k.(handlerKey)
			opts := in.opts(attrKey{handler: hk.handler, eventType: hk.eventType, outcome: outcome.(string)})
			o.ObserveInt64(in.finished, n.(*atomic.Int64).Load(), opts.obs...)
			return true
		})
		return true
	})
	return nil
}

// outcomes are the FinishOutcomes whose options handlerTel holds; any
// other takes the general cache.
var outcomes = [...]relaybus.FinishOutcome{
	relaybus.FinishCompleted, relaybus.FinishRescheduled, relaybus.FinishBuried,
	relaybus.FinishReleased, relaybus.FinishLeaseLost, relaybus.FinishWriteFailed,
}

// handler returns the cached handlerTel of a handler and event type.
func (in *Instruments) handler(handler, eventType string) *handlerTel {
	k := handlerKey{handler, eventType}
	if h, ok := in.handlers.Load(k); ok {
		return h.(*handlerTel)
	}
	h := &handlerTel{
		opts:     in.opts(attrKey{handler: handler, eventType: eventType}),
		spanName: "process " + eventType,
		spanAttrs: [...]attribute.KeyValue{
			attrSystem.String(system),
			attrOperationType.String("process"),
			attrOperationName.String("process"),
			attrDestination.String(eventType),
			attrConsumerGroup.String(handler),
			AttrHandler.String(handler),
			AttrEventType.String(eventType),
		},
	}
	h.startOpts = []trace.SpanStartOption{consumerKind}
	if in.samplerAttributes {
		h.startOpts = append(h.startOpts, trace.WithAttributes(h.spanAttrs[:spanSamplerAttrs]...))
	}
	for i, o := range outcomes {
		h.finished[i] = in.opts(attrKey{handler: handler, eventType: eventType, outcome: string(o)})
	}
	h.args.New = func() any { return newSpanArgs(h) }
	v, _ := in.handlers.LoadOrStore(k, h)
	return v.(*handlerTel)
}

// AfterFinish counts the attempt in relaybus.delivery.finished, with
// its outcome: set it as Config.AfterFinish (Configure does).
func (in *Instruments) AfterFinish(ctx context.Context, f relaybus.Finish) {
	if f.Delivery == nil {
		return
	}
	h := in.handler(f.Delivery.Handler, f.Delivery.EventType)
	for i, o := range outcomes {
		if o == f.Outcome {
			h.finishedN[i].Add(1)
			return
		}
	}
	n, _ := h.otherFinished.LoadOrStore(string(f.Outcome), new(atomic.Int64))
	n.(*atomic.Int64).Add(1)
}

// system is the messaging.system of every span.
const system = "relaybus"
