package otel

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/codes"
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
	base := attrKey{handler: d.Handler, eventType: d.EventType}
	opt := in.opt(base)
	if !d.EventCreatedAt.IsZero() {
		in.handlerLag.Record(ctx, max(in.now().Sub(d.EventCreatedAt), 0).Seconds(), opt)
	}
	in.handlerCalls.Add(ctx, 1, opt)
	in.handlerActive.Add(ctx, 1, opt)

	ctx, span := in.startProcess(ctx, d)
	returned := false
	defer func() {
		typ := errorType(err)
		switch {
		case !returned:
			// A panic is on its way up to the dispatcher, which recovers
			// it and fails the attempt: record it without stopping it.
			typ = errorTypePanic
			span.SetStatus(codes.Error, "handler panicked")
		case err != nil:
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		dur := time.Since(start).Seconds()
		if typ != "" {
			span.SetAttributes(AttrErrorType.String(typ))
			fopt := in.opt(attrKey{handler: d.Handler, eventType: d.EventType, errorType: typ})
			in.handlerFailures.Add(ctx, 1, fopt)
			in.handlerDuration.Record(ctx, dur, fopt)
		} else {
			in.handlerDuration.Record(ctx, dur, opt)
		}
		in.handlerActive.Add(ctx, -1, opt)
		span.End()
	}()
	err = next(ctx)
	returned = true
	return err
}

// startProcess starts the consumer span of one attempt, linked to (or,
// with Options.ChildOfPublish, a child of) the span context in the
// delivery's headers, and carries the headers' baggage into ctx.
func (in *Instruments) startProcess(ctx context.Context, d *relaybus.Delivery) (context.Context, trace.Span) {
	ps := in.processSpan(d.Handler, d.EventType)
	opts := make([]trace.SpanStartOption, 0, 5)
	opts = append(opts, trace.WithSpanKind(trace.SpanKindConsumer), ps.static)
	dynamic := []attribute.KeyValue{
		attrMessageID.String(d.EventID),
		AttrDeliveryID.String(d.ID),
		AttrAttempt.Int(d.Attempts),
		AttrEventKey.String(d.Key),
	}
	if d.Key == "" {
		dynamic = dynamic[:3]
	}
	opts = append(opts, trace.WithAttributes(dynamic...))
	parent := ctx
	if len(d.Headers) > 0 {
		// Extracted onto an empty context, so that only the headers'
		// span context is found, never one ctx carries already.
		ectx := in.prop.Extract(context.Background(), propagation.MapCarrier(d.Headers))
		if b := baggage.FromContext(ectx); b.Len() > 0 {
			parent = baggage.ContextWithBaggage(parent, b)
		}
		if sc := trace.SpanContextFromContext(ectx); sc.IsValid() {
			if in.childOfPublish {
				parent = trace.ContextWithRemoteSpanContext(parent, sc)
			} else {
				opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
			}
		}
	}
	if !in.childOfPublish {
		// A trace per attempt: the dispatcher's context may carry a span
		// of whatever started Run, which is no parent of this work.
		opts = append(opts, trace.WithNewRoot())
	}
	return in.tracer.Start(parent, ps.name, opts...)
}

// processSpanStatic is what every handler span of one handler and event
// type shares: its name and its fixed attributes, built once.
type processSpanStatic struct {
	name   string
	static trace.SpanStartOption
}

// processSpan returns the cached processSpanStatic of a handler.
func (in *Instruments) processSpan(handler, eventType string) *processSpanStatic {
	k := attrKey{handler: handler, eventType: eventType}
	if ps, ok := in.spans.Load(k); ok {
		return ps.(*processSpanStatic)
	}
	ps, _ := in.spans.LoadOrStore(k, &processSpanStatic{
		name: "process " + eventType,
		static: trace.WithAttributes(
			attrSystem.String(system),
			attrOperationType.String("process"),
			attrOperationName.String("process"),
			attrDestination.String(eventType),
			attrConsumerGroup.String(handler),
			AttrHandler.String(handler),
			AttrEventType.String(eventType),
		),
	})
	return ps.(*processSpanStatic)
}

// AfterFinish counts the attempt in relaybus.delivery.finished, with
// its outcome: set it as Config.AfterFinish (Configure does).
func (in *Instruments) AfterFinish(ctx context.Context, f relaybus.Finish) {
	if f.Delivery == nil {
		return
	}
	in.finished.Add(ctx, 1, in.opt(attrKey{handler: f.Delivery.Handler, eventType: f.Delivery.EventType, outcome: string(f.Outcome)}))
}

// system is the messaging.system of every span.
const system = "relaybus"
