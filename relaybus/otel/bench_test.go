package otel_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/berkcansavur/relaybus/relaybus"
	relaybusotel "github.com/berkcansavur/relaybus/relaybus/otel"
)

// BenchmarkMiddleware measures what the middleware adds to one handler
// call that does nothing, on a delivery with a traceparent header: with
// the no-op providers (noop); with the SDK, a manual reader and every
// span sampled and ended into no processor (sdk); and with the SDK and
// the sampler the package doc suggests for production,
// ParentBased(TraceIDRatioBased(0.01)) (sdk-ratio: one span in a
// hundred sampled). sdk-ratio-noheader is sdk-ratio on a delivery
// without headers, as one published without Publish is: no extraction,
// no link.
func BenchmarkMiddleware(b *testing.B) {
	d := &relaybus.Delivery{
		ID: "1", EventID: "e", EventType: "order.placed", Key: "customer-42", Handler: "h", Attempts: 1,
		EventCreatedAt: time.Now(),
		Headers:        map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
	}
	bare := *d
	bare.Headers = nil
	ratio := func() *relaybusotel.Options {
		return sdkOptionsSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0.01)))
	}
	next := func(context.Context) error { return nil }
	for _, bc := range []struct {
		name string
		opts *relaybusotel.Options
		d    *relaybus.Delivery
	}{
		{"noop", &relaybusotel.Options{MeterProvider: noop.NewMeterProvider(), TracerProvider: tracenoop.NewTracerProvider(),
			Propagator: propagation.TraceContext{}}, d},
		{"sdk", &relaybusotel.Options{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader())),
			TracerProvider: sdktrace.NewTracerProvider(), Propagator: propagation.TraceContext{}}, d},
		{"sdk-ratio", ratio(), d},
		{"sdk-ratio-noheader", ratio(), &bare},
	} {
		b.Run(bc.name, func(b *testing.B) {
			in, err := relaybusotel.New(bc.opts)
			if err != nil {
				b.Fatal(err)
			}
			mw := in.Middleware()
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if err := mw(ctx, bc.d, next); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
