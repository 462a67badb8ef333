package otel_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"

	"github.com/berkcansavur/relaybus/relaybus"
	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/memory"
	relaybusotel "github.com/berkcansavur/relaybus/relaybus/otel"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// bundle is what setup returns: the instruments on in-memory SDK
// providers, a memory store, the bus on the wrapped store, and the
// outcomes AfterFinish saw.
type bundle struct {
	in       *relaybusotel.Instruments
	reader   *sdkmetric.ManualReader
	spans    *tracetest.SpanRecorder
	tracer   trace.Tracer // of the same provider, for parents in tests
	store    *memory.Store
	bus      *relaybus.Bus[*memory.Tx]
	mu       sync.Mutex
	finishes []relaybus.Finish
}

type setupOptions struct {
	childOfPublish bool
}

func setup(t *testing.T, so *setupOptions) *bundle {
	t.Helper()
	if so == nil {
		so = &setupOptions{}
	}
	tb := &bundle{reader: sdkmetric.NewManualReader(), spans: tracetest.NewSpanRecorder()}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tb.spans))
	tb.tracer = tp.Tracer("test")
	var err error
	tb.in, err = relaybusotel.New(&relaybusotel.Options{
		MeterProvider:  sdkmetric.NewMeterProvider(sdkmetric.WithReader(tb.reader)),
		TracerProvider: tp,
		Propagator:     propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}),
		ChildOfPublish: so.childOfPublish,
	})
	require.NoError(t, err)
	tb.store = memory.New(nil)
	cfg := tb.in.Configure(relaybus.Config{
		Owner:          "test-owner",
		PollInterval:   time.Millisecond,
		RetryBaseDelay: time.Millisecond,
		RetryMaxDelay:  4 * time.Millisecond,
		RetryJitter:    relaybus.Disabled,
		LeaseDuration:  5 * time.Second,
		AfterFinish: func(_ context.Context, f relaybus.Finish) {
			tb.mu.Lock()
			tb.finishes = append(tb.finishes, f)
			tb.mu.Unlock()
		},
	})
	tb.bus, err = relaybus.New(relaybusotel.WrapStore[*memory.Tx](tb.store, tb.in), cfg)
	require.NoError(t, err)
	return tb
}

// run starts the bus, waits until AfterFinish has seen n attempts, and
// stops it.
func (tb *bundle) run(t *testing.T, n int) { tb.runCtx(t, context.Background(), n) }

// runCtx is run with the bus started on ctx.
func (tb *bundle) runCtx(t *testing.T, ctx context.Context, n int) {
	t.Helper()
	require.NoError(t, tb.bus.Start(ctx))
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, tb.bus.Stop(ctx))
	}()
	require.Eventually(t, func() bool {
		tb.mu.Lock()
		defer tb.mu.Unlock()
		return len(tb.finishes) >= n
	}, 10*time.Second, time.Millisecond)
}

// metrics collects every metric by name.
func (tb *bundle) metrics(t *testing.T) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, tb.reader.Collect(context.Background(), &rm))
	out := make(map[string]metricdata.Metrics)
	for _, sm := range rm.ScopeMetrics {
		require.Equal(t, relaybusotel.ScopeName, sm.Scope.Name)
		require.Equal(t, relaybus.Version, sm.Scope.Version)
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

// attrs is the attribute set of alternating keys and values, as a map
// key.
func attrs(kv ...string) attribute.Distinct {
	var kvs []attribute.KeyValue
	for i := 0; i < len(kv); i += 2 {
		kvs = append(kvs, attribute.String(kv[i], kv[i+1]))
	}
	s := attribute.NewSet(kvs...)
	return s.Equivalent()
}

// sums returns an Int64 sum's value per attribute set, encoded.
func sums(t *testing.T, m metricdata.Metrics) map[attribute.Distinct]int64 {
	t.Helper()
	s, ok := m.Data.(metricdata.Sum[int64])
	require.True(t, ok, "%s is a %T", m.Name, m.Data)
	out := make(map[attribute.Distinct]int64)
	for _, dp := range s.DataPoints {
		out[dp.Attributes.Equivalent()] += dp.Value
	}
	return out
}

// counts returns a float histogram's count per attribute set.
func counts(t *testing.T, m metricdata.Metrics) map[attribute.Distinct]uint64 {
	t.Helper()
	h, ok := m.Data.(metricdata.Histogram[float64])
	require.True(t, ok, "%s is a %T", m.Name, m.Data)
	out := make(map[attribute.Distinct]uint64)
	for _, dp := range h.DataPoints {
		out[dp.Attributes.Equivalent()] += dp.Count
	}
	return out
}

func spanAttr(s sdktrace.ReadOnlySpan, k attribute.Key) attribute.Value {
	for _, kv := range s.Attributes() {
		if kv.Key == k {
			return kv.Value
		}
	}
	return attribute.Value{}
}

// TestHandlerMetricsAndSpans: one event published with Publish, three
// handlers (one succeeds, one fails once then succeeds, one returns a
// Permanent error): every handler metric, every outcome, the store's
// metrics, the publish span, the headers, and a consumer span per
// attempt linked to the publish span with its attributes and status.
func TestHandlerMetricsAndSpans(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	var mu sync.Mutex
	headers := map[string]map[string]string{}
	spanInHandler := map[string]trace.SpanContext{}
	seen := func(ctx context.Context, d *relaybus.Delivery) {
		mu.Lock()
		defer mu.Unlock()
		headers[d.Handler] = d.Headers
		spanInHandler[d.Handler] = trace.SpanContextFromContext(ctx)
	}
	require.NoError(t, tb.bus.Handle("order.placed", "ok", func(ctx context.Context, d *relaybus.Delivery) error {
		seen(ctx, d)
		return nil
	}, nil))
	var retryCalls atomic.Int32
	require.NoError(t, tb.bus.Handle("order.placed", "retry", func(ctx context.Context, d *relaybus.Delivery) error {
		seen(ctx, d)
		if retryCalls.Add(1) == 1 {
			return errors.New("flaky")
		}
		return nil
	}, &relaybus.HandlerOptions{MaxAttempts: 3}))
	require.NoError(t, tb.bus.HandleTx("order.placed", "dead", func(ctx context.Context, _ *memory.Tx, d *relaybus.Delivery) error {
		seen(ctx, d)
		return relaybus.Permanent(errors.New("malformed"))
	}, nil))

	ev := &relaybus.Event{Type: "order.placed", Key: "customer-42", Payload: []byte("{}")}
	require.NoError(t, relaybusotel.Publish(context.Background(), tb.in, tb.bus, ev))
	require.NotEmpty(t, ev.ID, "the bus's generated ID reaches the caller's event")
	require.False(t, ev.CreatedAt.IsZero())
	require.Nil(t, ev.Headers, "the caller's event is not given the trace headers")

	tb.run(t, 4)

	// The publish span, and its context in every delivery's headers.
	var publish sdktrace.ReadOnlySpan
	var process []sdktrace.ReadOnlySpan
	for _, s := range tb.spans.Ended() {
		switch s.SpanKind() {
		case trace.SpanKindProducer:
			require.Nil(t, publish, "one publish span")
			publish = s
		case trace.SpanKindConsumer:
			process = append(process, s)
		}
	}
	require.NotNil(t, publish)
	require.Equal(t, "publish order.placed", publish.Name())
	require.Equal(t, "relaybus", spanAttr(publish, "messaging.system").AsString())
	require.Equal(t, "send", spanAttr(publish, "messaging.operation.type").AsString())
	require.Equal(t, "order.placed", spanAttr(publish, "messaging.destination.name").AsString())
	require.Equal(t, ev.ID, spanAttr(publish, "messaging.message.id").AsString())
	require.Equal(t, "customer-42", spanAttr(publish, relaybusotel.AttrEventKey).AsString())
	require.Equal(t, codes.Unset, publish.Status().Code)
	psc := publish.SpanContext()
	want := "00-" + psc.TraceID().String() + "-" + psc.SpanID().String() + "-01"
	for _, h := range []string{"ok", "retry", "dead"} {
		require.Equal(t, map[string]string{"traceparent": want}, headers[h], h)
	}

	// A consumer span per attempt: a new trace, linked to the publish.
	require.Len(t, process, 4)
	byHandler := map[string][]sdktrace.ReadOnlySpan{}
	for _, s := range process {
		require.Equal(t, "process order.placed", s.Name())
		require.Len(t, s.Links(), 1)
		require.Equal(t, psc.WithRemote(true), s.Links()[0].SpanContext, "the extracted context is remote")
		require.NotEqual(t, psc.TraceID(), s.SpanContext().TraceID(), "a trace of its own")
		require.False(t, s.Parent().IsValid(), "a root span")
		h := spanAttr(s, relaybusotel.AttrHandler).AsString()
		require.Equal(t, h, spanAttr(s, "messaging.consumer.group.name").AsString())
		require.Equal(t, "order.placed", spanAttr(s, relaybusotel.AttrEventType).AsString())
		require.Equal(t, "customer-42", spanAttr(s, relaybusotel.AttrEventKey).AsString())
		require.Equal(t, ev.ID, spanAttr(s, "messaging.message.id").AsString())
		require.NotEmpty(t, spanAttr(s, relaybusotel.AttrDeliveryID).AsString())
		byHandler[h] = append(byHandler[h], s)
	}
	require.Len(t, byHandler["ok"], 1)
	require.Equal(t, codes.Unset, byHandler["ok"][0].Status().Code)
	require.Equal(t, int64(1), spanAttr(byHandler["ok"][0], relaybusotel.AttrAttempt).AsInt64())
	require.Equal(t, spanInHandler["ok"], byHandler["ok"][0].SpanContext(), "the handler runs in the span")
	require.Len(t, byHandler["retry"], 2)
	require.Equal(t, codes.Error, byHandler["retry"][0].Status().Code)
	require.Contains(t, byHandler["retry"][0].Status().Description, "flaky")
	require.Equal(t, "_OTHER", spanAttr(byHandler["retry"][0], relaybusotel.AttrErrorType).AsString())
	require.Len(t, byHandler["retry"][0].Events(), 1, "the error is recorded")
	require.Equal(t, int64(1), spanAttr(byHandler["retry"][0], relaybusotel.AttrAttempt).AsInt64())
	require.Equal(t, codes.Unset, byHandler["retry"][1].Status().Code)
	require.Equal(t, int64(2), spanAttr(byHandler["retry"][1], relaybusotel.AttrAttempt).AsInt64())
	require.Len(t, byHandler["dead"], 1)
	require.Equal(t, codes.Error, byHandler["dead"][0].Status().Code)
	require.Equal(t, "permanent", spanAttr(byHandler["dead"][0], relaybusotel.AttrErrorType).AsString())

	// The metrics.
	ms := tb.metrics(t)
	h := func(handler string) attribute.Distinct {
		return attrs("relaybus.handler", handler, "relaybus.event.type", "order.placed")
	}
	he := func(handler, errType string) attribute.Distinct {
		return attrs("relaybus.handler", handler, "relaybus.event.type", "order.placed", "error.type", errType)
	}
	ho := func(handler, outcome string) attribute.Distinct {
		return attrs("relaybus.handler", handler, "relaybus.event.type", "order.placed", "relaybus.outcome", outcome)
	}
	require.Equal(t, map[attribute.Distinct]int64{h("ok"): 1, h("retry"): 2, h("dead"): 1}, sums(t, ms["relaybus.handler.calls"]))
	require.Equal(t, map[attribute.Distinct]int64{he("retry", "_OTHER"): 1, he("dead", "permanent"): 1}, sums(t, ms["relaybus.handler.failures"]))
	require.Equal(t, map[attribute.Distinct]uint64{h("ok"): 1, h("retry"): 1, he("retry", "_OTHER"): 1, he("dead", "permanent"): 1},
		counts(t, ms["relaybus.handler.duration"]))
	require.Equal(t, map[attribute.Distinct]uint64{h("ok"): 1, h("retry"): 2, h("dead"): 1}, counts(t, ms["relaybus.handler.lag"]))
	require.Equal(t, map[attribute.Distinct]int64{h("ok"): 0, h("retry"): 0, h("dead"): 0}, sums(t, ms["relaybus.handler.active"]))
	require.Equal(t, map[attribute.Distinct]int64{
		ho("ok", "completed"): 1, ho("retry", "rescheduled"): 1, ho("retry", "completed"): 1, ho("dead", "buried"): 1,
	}, sums(t, ms["relaybus.delivery.finished"]))
	for _, name := range []string{"relaybus.handler.duration", "relaybus.handler.lag", "relaybus.claim.duration", "relaybus.publish.duration"} {
		require.Equal(t, "s", ms[name].Unit, name)
	}
	require.Equal(t, "{call}", ms["relaybus.handler.calls"].Unit)
	require.Equal(t, "{attempt}", ms["relaybus.delivery.finished"].Unit)

	claims := counts(t, ms["relaybus.claim.duration"])[attrs()]
	require.NotZero(t, claims)
	size, ok := ms["relaybus.claim.size"].Data.(metricdata.Histogram[int64])
	require.True(t, ok)
	require.Len(t, size.DataPoints, 1)
	require.Equal(t, claims, size.DataPoints[0].Count, "every claim's size is recorded")
	require.Equal(t, int64(4), size.DataPoints[0].Sum, "four deliveries claimed: one per attempt")
	require.Equal(t, map[attribute.Distinct]uint64{attrs("relaybus.store.method", "EventPublishTx"): 1},
		counts(t, ms["relaybus.publish.duration"]), "the memory store has no EventPublisher: Bus.Publish calls EventPublishTx")
}

// TestPanic: a panicking handler is a failure with error.type panic, its
// span ends with status Error, and the active count goes back to zero;
// the dispatcher still recovers the panic and reschedules the delivery.
func TestPanic(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	var once sync.Once
	require.NoError(t, tb.bus.Handle("t", "h", func(context.Context, *relaybus.Delivery) error {
		once.Do(func() { panic("boom") })
		return nil
	}, nil))
	require.NoError(t, relaybusotel.Publish(context.Background(), tb.in, tb.bus, &relaybus.Event{Type: "t"}))
	tb.run(t, 2)

	ms := tb.metrics(t)
	base := attrs("relaybus.handler", "h", "relaybus.event.type", "t")
	panicked := attrs("relaybus.handler", "h", "relaybus.event.type", "t", "error.type", "panic")
	require.Equal(t, map[attribute.Distinct]int64{panicked: 1}, sums(t, ms["relaybus.handler.failures"]))
	require.Equal(t, map[attribute.Distinct]int64{base: 0}, sums(t, ms["relaybus.handler.active"]))
	require.Equal(t, map[attribute.Distinct]uint64{base: 1, panicked: 1}, counts(t, ms["relaybus.handler.duration"]))
	var statuses []codes.Code
	for _, s := range tb.spans.Ended() {
		if s.SpanKind() == trace.SpanKindConsumer {
			statuses = append(statuses, s.Status().Code)
		}
	}
	require.Equal(t, []codes.Code{codes.Error, codes.Unset}, statuses)
	require.Equal(t, relaybus.FinishRescheduled, tb.finishes[0].Outcome)
}

// TestChildOfPublish: with Options.ChildOfPublish the handler span is a
// child of the publish span, in its trace, with no link; the caller's
// span is the publish span's parent; tracestate and baggage travel too.
func TestChildOfPublish(t *testing.T) {
	t.Parallel()
	tb := setup(t, &setupOptions{childOfPublish: true})
	var got map[string]string
	require.NoError(t, tb.bus.Handle("t", "h", func(_ context.Context, d *relaybus.Delivery) error {
		got = d.Headers
		return nil
	}, nil))
	ts, err := trace.ParseTraceState("vendor=value")
	require.NoError(t, err)
	ctx, request := tb.tracer.Start(context.Background(), "request")
	ctx = trace.ContextWithSpanContext(ctx, request.SpanContext().WithTraceState(ts))
	require.NoError(t, relaybusotel.Publish(ctx, tb.in, tb.bus, &relaybus.Event{Type: "t", Headers: map[string]string{"own": "kept"}}))
	request.End()
	tb.run(t, 1)

	var publish, process sdktrace.ReadOnlySpan
	for _, s := range tb.spans.Ended() {
		switch s.SpanKind() {
		case trace.SpanKindProducer:
			publish = s
		case trace.SpanKindConsumer:
			process = s
		}
	}
	require.Equal(t, request.SpanContext().SpanID(), publish.Parent().SpanID())
	require.Equal(t, publish.SpanContext().SpanID(), process.Parent().SpanID())
	require.Equal(t, publish.SpanContext().TraceID(), process.SpanContext().TraceID())
	require.Empty(t, process.Links())
	require.Equal(t, "vendor=value", got["tracestate"])
	require.Equal(t, "kept", got["own"])
	require.Contains(t, got, "traceparent")
}

// TestPublishTx: PublishTx injects into copies, leaves the caller's
// Headers map alone, gives the caller the bus's IDs, marks a batch, and
// on an error returns the bus's error unchanged with an Error span and
// no ID written back (as Bus.PublishTx does).
func TestPublishTx(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	require.NoError(t, tb.bus.Declare("t", "h", nil))
	ctx := context.Background()

	own := map[string]string{"a": "b"}
	e1, e2 := &relaybus.Event{Type: "t", Headers: own}, &relaybus.Event{Type: "t", Key: "k"}
	tx, err := tb.store.TxBegin(ctx)
	require.NoError(t, err)
	require.NoError(t, relaybusotel.PublishTx(ctx, tb.in, tb.bus, tx, e1, e2))
	require.NoError(t, tb.store.TxCommit(ctx, tx))
	require.Equal(t, map[string]string{"a": "b"}, own)
	require.NotEmpty(t, e1.ID)
	require.NotEmpty(t, e2.ID)
	res, err := tb.bus.ListDeliveries(ctx, nil)
	require.NoError(t, err)
	require.Len(t, res.Deliveries, 2)
	for _, d := range res.Deliveries {
		require.Contains(t, d.Headers, "traceparent")
		if d.EventID == e1.ID {
			require.Equal(t, "b", d.Headers["a"])
		}
	}
	spans := tb.spans.Ended()
	require.Len(t, spans, 1)
	require.Equal(t, int64(2), spanAttr(spans[0], "messaging.batch.message_count").AsInt64())

	bad := &relaybus.Event{Type: "no-handler"}
	tx, err = tb.store.TxBegin(ctx)
	require.NoError(t, err)
	pubErr := relaybusotel.PublishTx(ctx, tb.in, tb.bus, tx, bad)
	require.ErrorIs(t, pubErr, relaybus.ErrInvalid)
	require.NoError(t, tb.store.TxRollback(ctx, tx))
	require.Empty(t, bad.ID, "nothing written back for an invalid publish, as from Bus.PublishTx")
	spans = tb.spans.Ended()
	require.Len(t, spans, 2)
	require.Equal(t, codes.Error, spans[1].Status().Code)
	require.Equal(t, "invalid", spanAttr(spans[1], relaybusotel.AttrErrorType).AsString())

	// The error the bus gives without the helper, unchanged.
	tx, err = tb.store.TxBegin(ctx)
	require.NoError(t, err)
	withHelper := relaybusotel.PublishTx(ctx, tb.in, tb.bus, tx, &relaybus.Event{ID: "e-1", Type: "no-handler"})
	plain := tb.bus.PublishTx(ctx, tx, &relaybus.Event{ID: "e-1", Type: "no-handler"})
	require.NoError(t, tb.store.TxRollback(ctx, tx))
	require.Error(t, plain)
	require.Equal(t, plain.Error(), withHelper.Error())

	require.NoError(t, relaybusotel.PublishTx(ctx, tb.in, tb.bus, tx), "no events: nothing")
	require.Len(t, tb.spans.Ended(), 3, "and no span")
}

// TestNoPropagator: a propagator that writes nothing (the global default)
// leaves the events as the caller gave them: no empty Headers map.
func TestNoPropagator(t *testing.T) {
	t.Parallel()
	in, err := relaybusotel.New(&relaybusotel.Options{Propagator: propagation.NewCompositeTextMapPropagator()})
	require.NoError(t, err)
	store := memory.New(nil)
	bus, err := relaybus.New[*memory.Tx](store, relaybus.Config{})
	require.NoError(t, err)
	require.NoError(t, bus.Declare("t", "h", nil))
	e := &relaybus.Event{Type: "t"}
	require.NoError(t, relaybusotel.Publish(context.Background(), in, bus, e))
	require.NotEmpty(t, e.ID)
	res, err := bus.ListDeliveries(context.Background(), nil)
	require.NoError(t, err)
	require.Len(t, res.Deliveries, 1)
	require.Empty(t, res.Deliveries[0].Headers)
}

// TestLeaseMetrics: LeaseExtend through the wrapper counts the leases it
// renewed and the ones it found lost, and returns the store's results.
func TestLeaseMetrics(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	require.NoError(t, tb.bus.Declare("t", "h", nil))
	ctx := context.Background()
	require.NoError(t, tb.bus.Publish(ctx, &relaybus.Event{Type: "t"}, &relaybus.Event{Type: "t"}))
	store := relaybusotel.WrapStore[*memory.Tx](tb.store, tb.in)
	now := time.Now()
	ds, err := store.DeliveryClaim(ctx, &driver.DeliveryClaimParams{
		Owner: "o", Handlers: []string{"h"}, Limit: 10, LeaseDuration: time.Minute, Now: now,
	})
	require.NoError(t, err)
	require.Len(t, ds, 2)
	ok, err := store.DeliveryComplete(ctx, &driver.DeliveryCompleteParams{Lease: ds[1].Lease(), Now: now})
	require.NoError(t, err)
	require.True(t, ok)
	oks, err := store.LeaseExtend(ctx, &driver.LeaseExtendParams{
		Owner: "o", Leases: []relaytype.Lease{ds[0].Lease(), ds[1].Lease()}, ExpiresAt: now.Add(2 * time.Minute), Now: now,
	})
	require.NoError(t, err)
	require.Equal(t, []bool{true, false}, oks)

	ms := tb.metrics(t)
	none := attrs()
	require.Equal(t, map[attribute.Distinct]int64{none: 1}, sums(t, ms["relaybus.lease.renewals"]))
	require.Equal(t, map[attribute.Distinct]int64{none: 1}, sums(t, ms["relaybus.lease.lost"]))
	require.Equal(t, "{lease}", ms["relaybus.lease.lost"].Unit)
	size := ms["relaybus.claim.size"].Data.(metricdata.Histogram[int64])
	require.Equal(t, int64(2), size.DataPoints[0].Sum)
}

// TestErrorTypesAndRoots: a handler that runs out of its Timeout is a
// failure with error.type timeout; a delivery published without the
// helper has no trace headers and gets a span with no link; a span in
// the context the bus was started with is no parent of a handler span;
// baggage in the headers reaches the handler's context.
func TestErrorTypesAndRoots(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	require.NoError(t, tb.bus.Handle("slow", "h-slow", func(ctx context.Context, _ *relaybus.Delivery) error {
		<-ctx.Done()
		return ctx.Err()
	}, &relaybus.HandlerOptions{Timeout: relaybus.MinHandlerTimeout, MaxAttempts: 1}))
	var member string
	require.NoError(t, tb.bus.Handle("plain", "h-plain", func(ctx context.Context, _ *relaybus.Delivery) error {
		member = baggage.FromContext(ctx).Member("tenant").Value()
		return nil
	}, nil))
	ctx := context.Background()
	require.NoError(t, tb.bus.Publish(ctx, &relaybus.Event{Type: "slow"}))
	m, err := baggage.NewMemberRaw("tenant", "acme")
	require.NoError(t, err)
	b, err := baggage.New(m)
	require.NoError(t, err)
	require.NoError(t, relaybusotel.Publish(baggage.ContextWithBaggage(ctx, b), tb.in, tb.bus, &relaybus.Event{Type: "plain"}))

	runCtx, runSpan := tb.tracer.Start(ctx, "main")
	tb.runCtx(t, runCtx, 2)
	runSpan.End()
	require.Equal(t, "acme", member)

	for _, s := range tb.spans.Ended() {
		if s.SpanKind() != trace.SpanKindConsumer {
			continue
		}
		require.False(t, s.Parent().IsValid(), "not a child of the span Run was started in")
		require.NotEqual(t, runSpan.SpanContext().TraceID(), s.SpanContext().TraceID())
		switch spanAttr(s, relaybusotel.AttrHandler).AsString() {
		case "h-slow":
			require.Empty(t, s.Links(), "no headers, no link")
			require.Equal(t, "timeout", spanAttr(s, relaybusotel.AttrErrorType).AsString())
		case "h-plain":
			require.Len(t, s.Links(), 1)
		}
	}
	ms := tb.metrics(t)
	timeout := attrs("relaybus.handler", "h-slow", "relaybus.event.type", "slow", "error.type", "timeout")
	require.Equal(t, map[attribute.Distinct]int64{timeout: 1}, sums(t, ms["relaybus.handler.failures"]))
	buried := attrs("relaybus.handler", "h-slow", "relaybus.event.type", "slow", "relaybus.outcome", "buried")
	completed := attrs("relaybus.handler", "h-plain", "relaybus.event.type", "plain", "relaybus.outcome", "completed")
	require.Equal(t, map[attribute.Distinct]int64{buried: 1, completed: 1}, sums(t, ms["relaybus.delivery.finished"]))
}

// TestDocTable: the package doc's table has a row for every instrument,
// with the unit and the kind the meter made it with, and no other row.
func TestDocTable(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("doc.go")
	require.NoError(t, err)
	type row struct{ kind, unit string }
	doc := map[string]row{}
	for _, line := range strings.Split(string(src), "\n") {
		if f := strings.Fields(strings.TrimPrefix(line, "//\t")); strings.HasPrefix(line, "//\trelaybus.") && len(f) >= 3 {
			doc[f[0]] = row{f[1], f[2]}
		}
	}

	// One run that makes every instrument record.
	tb := setup(t, nil)
	require.NoError(t, tb.bus.Handle("t", "h", func(context.Context, *relaybus.Delivery) error {
		return relaybus.Permanent(errors.New("no"))
	}, nil))
	require.NoError(t, tb.bus.Declare("claimed-here", "d", nil))
	ctx := context.Background()
	require.NoError(t, relaybusotel.Publish(ctx, tb.in, tb.bus, &relaybus.Event{Type: "t"}, &relaybus.Event{Type: "claimed-here"}))
	tb.run(t, 1)
	store := relaybusotel.WrapStore[*memory.Tx](tb.store, tb.in)
	now := time.Now()
	ds, err := store.DeliveryClaim(ctx, &driver.DeliveryClaimParams{Owner: "o", Handlers: []string{"d"}, Limit: 1, LeaseDuration: time.Minute, Now: now})
	require.NoError(t, err)
	require.Len(t, ds, 1)
	oks, err := store.LeaseExtend(ctx, &driver.LeaseExtendParams{
		Owner: "o", Leases: []relaytype.Lease{ds[0].Lease(), {DeliveryID: ds[0].ID, Token: "0:99:1"}}, ExpiresAt: now.Add(time.Minute), Now: now,
	})
	require.NoError(t, err)
	require.Equal(t, []bool{true, false}, oks)
	reg, err := tb.in.ObserveDispatcher(tb.bus)
	require.NoError(t, err)
	defer func() { require.NoError(t, reg.Unregister()) }()
	at := time.Now()
	r, err := relaybus.CheckStoreHealth(&relaybus.StoreHealth{
		At: at, DeliveriesDeadRows: 1 << 20, LaneUpdates: 5_000, LaneHOTUpdates: 5_000, DeliveriesLastAutovacuum: at.Add(-time.Minute),
		XminHolder: &relaybus.XminHolder{Kind: relaytype.XminHolderSession, XactStart: at.Add(-time.Hour), Age: time.Hour},
	}, nil, nil)
	require.NoError(t, err)
	require.NotEmpty(t, r.Warnings)
	tb.in.RecordStoreHealth(ctx, r)
	st, err := tb.bus.Statistics(ctx)
	require.NoError(t, err)
	tb.in.RecordStatistics(ctx, st)

	got := map[string]row{}
	for name, m := range tb.metrics(t) {
		kind := ""
		switch d := m.Data.(type) {
		case metricdata.Sum[int64]:
			kind = "counter"
			if !d.IsMonotonic {
				kind = "updowncounter"
			}
		case metricdata.Histogram[float64], metricdata.Histogram[int64]:
			kind = "histogram"
		case metricdata.Gauge[float64], metricdata.Gauge[int64]:
			kind = "gauge"
		}
		got[name] = row{kind, m.Unit}
	}
	require.Equal(t, doc, got)
	require.Len(t, got, 19)
}

// TestFinishedCounts: relaybus.delivery.finished counts each outcome of
// each handler, one the package does not know of too, and cumulatively
// over collections; a handler that only ever had an AfterFinish has no
// relaybus.handler.calls or relaybus.handler.active series.
func TestFinishedCounts(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	ctx := context.Background()
	d := &relaybus.Delivery{Handler: "h", EventType: "t"}
	tb.in.AfterFinish(ctx, relaybus.Finish{Delivery: d, Outcome: relaybus.FinishCompleted})
	tb.in.AfterFinish(ctx, relaybus.Finish{Delivery: d, Outcome: "custom"})
	tb.in.AfterFinish(ctx, relaybus.Finish{Outcome: relaybus.FinishCompleted}) // no delivery: not counted
	ho := func(outcome string) attribute.Distinct {
		return attrs("relaybus.handler", "h", "relaybus.event.type", "t", "relaybus.outcome", outcome)
	}
	ms := tb.metrics(t)
	require.Equal(t, map[attribute.Distinct]int64{ho("completed"): 1, ho("custom"): 1}, sums(t, ms["relaybus.delivery.finished"]))
	require.NotContains(t, ms, "relaybus.handler.calls")
	require.NotContains(t, ms, "relaybus.handler.active")

	tb.in.AfterFinish(ctx, relaybus.Finish{Delivery: d, Outcome: relaybus.FinishCompleted})
	tb.in.AfterFinish(ctx, relaybus.Finish{Delivery: d, Outcome: "custom"})
	ms = tb.metrics(t)
	require.Equal(t, map[attribute.Distinct]int64{ho("completed"): 2, ho("custom"): 2}, sums(t, ms["relaybus.delivery.finished"]))
	require.True(t, ms["relaybus.delivery.finished"].Data.(metricdata.Sum[int64]).IsMonotonic)
}

// TestActiveWhileRunning: relaybus.handler.active counts the calls in
// the middleware at the collection (three running, blocked in the
// handler, of a handler with four done before), and 0 once they return;
// relaybus.handler.calls counts every call started, running or not.
func TestActiveWhileRunning(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	ctx := context.Background()
	mw := tb.in.Middleware()
	d := &relaybus.Delivery{ID: "d", EventID: "e", EventType: "t", Handler: "h", Attempts: 1}
	for range 4 {
		require.NoError(t, mw(ctx, d, func(context.Context) error { return nil }))
	}
	release := make(chan struct{})
	var started, done sync.WaitGroup
	for range 3 {
		started.Add(1)
		done.Go(func() {
			_ = mw(ctx, d, func(context.Context) error {
				started.Done()
				<-release
				return nil
			})
		})
	}
	started.Wait()
	h := attrs("relaybus.handler", "h", "relaybus.event.type", "t")
	ms := tb.metrics(t)
	require.Equal(t, map[attribute.Distinct]int64{h: 3}, sums(t, ms["relaybus.handler.active"]))
	require.Equal(t, map[attribute.Distinct]int64{h: 7}, sums(t, ms["relaybus.handler.calls"]))
	require.False(t, ms["relaybus.handler.active"].Data.(metricdata.Sum[int64]).IsMonotonic)
	close(release)
	done.Wait()
	ms = tb.metrics(t)
	require.Equal(t, map[attribute.Distinct]int64{h: 0}, sums(t, ms["relaybus.handler.active"]))
	require.Equal(t, map[attribute.Distinct]int64{h: 7}, sums(t, ms["relaybus.handler.calls"]))
}
