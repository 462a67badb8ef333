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
// call that does nothing: with the no-op providers, and with the SDK
// (a manual reader, every span sampled and ended into no processor).
func BenchmarkMiddleware(b *testing.B) {
	d := &relaybus.Delivery{
		ID: "1", EventID: "e", EventType: "order.placed", Key: "customer-42", Handler: "h", Attempts: 1,
		EventCreatedAt: time.Now(),
		Headers:        map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
	}
	next := func(context.Context) error { return nil }
	for _, bc := range []struct {
		name string
		opts *relaybusotel.Options
	}{
		{"noop", &relaybusotel.Options{MeterProvider: noop.NewMeterProvider(), TracerProvider: tracenoop.NewTracerProvider(),
			Propagator: propagation.TraceContext{}}},
		{"sdk", &relaybusotel.Options{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader())),
			TracerProvider: sdktrace.NewTracerProvider(), Propagator: propagation.TraceContext{}}},
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
				if err := mw(ctx, d, next); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
