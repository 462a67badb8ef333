package otel

import (
	"context"
	"maps"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/berkcansavur/relaybus/relaybus"
)

// Publish is bus.Publish in a producer span, with the span's trace
// context written into the Headers of each event the store gets (by the
// configured propagator: W3C traceparent, and tracestate when set). The
// store gets copies of the events with those headers added; the caller's
// events are not modified but for what Bus.Publish itself writes back
// (a generated ID and CreatedAt), which they get exactly as from
// Bus.Publish. A header the propagator writes replaces the event's own
// of that name, and counts against relaybus.MaxHeaders. The error is
// bus.Publish's, unchanged. No event publishes nothing, in no span.
func Publish[TTx any](ctx context.Context, in *Instruments, bus *relaybus.Bus[TTx], events ...*relaybus.Event) error {
	return in.publish(ctx, events, func(ctx context.Context, es []*relaybus.Event) error {
		return bus.Publish(ctx, es...)
	})
}

// PublishTx is Publish with bus.PublishTx in tx. The span ends when
// PublishTx returns, before the caller commits.
func PublishTx[TTx any](ctx context.Context, in *Instruments, bus *relaybus.Bus[TTx], tx TTx, events ...*relaybus.Event) error {
	return in.publish(ctx, events, func(ctx context.Context, es []*relaybus.Event) error {
		return bus.PublishTx(ctx, tx, es...)
	})
}

func (in *Instruments) publish(ctx context.Context, events []*relaybus.Event, call func(context.Context, []*relaybus.Event) error) error {
	if len(events) == 0 {
		return call(ctx, events)
	}
	eventType := commonType(events)
	name := "publish"
	attrs := []attribute.KeyValue{
		attrSystem.String(system),
		attrOperationType.String("send"),
		attrOperationName.String("publish"),
	}
	if eventType != "" {
		name += " " + eventType
		attrs = append(attrs, attrDestination.String(eventType), AttrEventType.String(eventType))
	}
	if len(events) > 1 {
		attrs = append(attrs, attrBatchCount.Int(len(events)))
	} else if events[0] != nil && events[0].Key != "" {
		attrs = append(attrs, AttrEventKey.String(events[0].Key))
	}
	ctx, span := in.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attrs...))
	defer span.End()

	// The same context goes into every event: inject it once.
	carrier := propagation.MapCarrier{}
	in.prop.Inject(ctx, carrier)
	copies := events
	if len(carrier) > 0 {
		copies = make([]*relaybus.Event, len(events))
		for i, e := range events {
			if e == nil {
				continue // the bus reports it
			}
			c := *e
			c.Headers = make(map[string]string, len(e.Headers)+len(carrier))
			maps.Copy(c.Headers, e.Headers)
			maps.Copy(c.Headers, carrier)
			copies[i] = &c
		}
	}
	err := call(ctx, copies)
	if len(carrier) > 0 {
		for i, e := range events {
			if e != nil {
				e.ID, e.CreatedAt = copies[i].ID, copies[i].CreatedAt
			}
		}
	}
	if len(events) == 1 && events[0] != nil && events[0].ID != "" {
		span.SetAttributes(attrMessageID.String(events[0].ID))
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		span.SetAttributes(AttrErrorType.String(errorType(err)))
	}
	return err
}

// commonType is the type of every event, or "" when they differ.
func commonType(events []*relaybus.Event) string {
	t := ""
	for i, e := range events {
		if e == nil {
			return ""
		}
		if i == 0 {
			t = e.Type
		} else if e.Type != t {
			return ""
		}
	}
	return t
}
