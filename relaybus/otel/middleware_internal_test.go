package otel

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/berkcansavur/relaybus/relaybus"
)

// TestOptionsReadLate: the trace API this module builds with keeps the
// slice WithLinks is given, so the pooled start buffers make their link
// option once (the fast path is the one that runs).
func TestOptionsReadLate(t *testing.T) {
	require.True(t, optionsReadLate())
	require.True(t, lateOptions)
}

// TestSpanArgsReuse: span after span of one handler from its pooled
// buffers, with and without a key and a link, in an order that reuses
// each buffer, on both paths of spanArgs (the link option made once, and
// made per span when the API would copy the slice), with and without
// Options.SamplerAttributes: every span has exactly its own attributes
// and link, none of an earlier delivery's, and the sampler saw exactly
// the sampling-relevant ones, or none.
// Not parallel: it sets lateOptions, which the tests running in
// parallel after it read.
func TestSpanArgsReuse(t *testing.T) {
	for _, c := range []struct{ late, samplerAttrs bool }{{true, false}, {false, false}, {true, true}, {false, true}} {
		late := c.late
		t.Run(fmt.Sprintf("lateOptions=%v/SamplerAttributes=%v", late, c.samplerAttrs), func(t *testing.T) {
			saved := lateOptions
			lateOptions = late
			t.Cleanup(func() { lateOptions = saved })

			spans := tracetest.NewSpanRecorder()
			sampler := &seenAttrs{}
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans), sdktrace.WithSampler(sampler))
			in, err := New(&Options{MeterProvider: noop.NewMeterProvider(), TracerProvider: tp, Propagator: propagation.TraceContext{},
				SamplerAttributes: c.samplerAttrs})
			require.NoError(t, err)

			type want struct {
				d    *relaybus.Delivery
				link trace.SpanContext
			}
			var wants []want
			for i := range 12 {
				d := &relaybus.Delivery{
					ID: fmt.Sprint("d", i), EventID: fmt.Sprint("e", i), EventType: "order.placed",
					Handler: "h", Attempts: i%3 + 1,
				}
				if i%2 == 0 {
					d.Key = fmt.Sprint("k", i)
				}
				var link trace.SpanContext
				if i%3 != 2 {
					link = trace.NewSpanContext(trace.SpanContextConfig{
						TraceID: trace.TraceID{byte(i + 1)}, SpanID: trace.SpanID{byte(i + 1)},
						TraceFlags: trace.FlagsSampled, Remote: true,
					})
					d.Headers = map[string]string{}
					propagation.TraceContext{}.Inject(trace.ContextWithSpanContext(context.Background(), link), propagation.MapCarrier(d.Headers))
				}
				wants = append(wants, want{d, link})
				require.NoError(t, in.middleware(context.Background(), d, func(context.Context) error { return nil }))
			}

			ended := spans.Ended()
			require.Len(t, ended, len(wants))
			h := in.handler("h", "order.placed")
			for i, s := range ended {
				w := wants[i]
				fixed := []attribute.KeyValue{
					attrSystem.String(system),
					attrOperationType.String("process"),
					attrOperationName.String("process"),
					attrDestination.String("order.placed"),
					attrConsumerGroup.String("h"),
				}
				if c.samplerAttrs {
					require.ElementsMatch(t, fixed, sampler.seen[i], "span %d: what the sampler saw", i)
				} else {
					require.Empty(t, sampler.seen[i], "span %d: what the sampler saw", i)
				}
				exp := append(fixed,
					AttrHandler.String("h"),
					AttrEventType.String("order.placed"),
					attrMessageID.String(w.d.EventID),
					AttrDeliveryID.String(w.d.ID),
					AttrAttempt.Int(w.d.Attempts),
				)
				if w.d.Key != "" {
					exp = append(exp, AttrEventKey.String(w.d.Key))
				}
				require.ElementsMatch(t, exp, s.Attributes(), "span %d", i)
				if w.link.IsValid() {
					require.Len(t, s.Links(), 1, "span %d", i)
					require.Equal(t, w.link, s.Links()[0].SpanContext, "span %d", i)
				} else {
					require.Empty(t, s.Links(), "span %d", i)
				}
			}

			// What goes back to the pool holds nothing of a delivery.
			a := h.args.Get().(*spanArgs)
			require.Equal(t, h.spanAttrs[:], a.attrs[:spanFixedAttrs])
			require.Equal(t, [spanAttrs - spanFixedAttrs]attribute.KeyValue{}, [spanAttrs - spanFixedAttrs]attribute.KeyValue(a.attrs[spanFixedAttrs:]))
			require.Equal(t, trace.Link{}, a.links[0])
			require.NoError(t, tp.Shutdown(context.Background()))
		})
	}
}

// seenAttrs is a sampler that samples every span and keeps the
// attributes it was shown, span by span.
type seenAttrs struct {
	mu   sync.Mutex
	seen [][]attribute.KeyValue
}

func (s *seenAttrs) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seen = append(s.seen, append([]attribute.KeyValue(nil), p.Attributes...))
	return sdktrace.SamplingResult{Decision: sdktrace.RecordAndSample}
}

func (*seenAttrs) Description() string { return "seenAttrs" }
