package otel_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"os/signal"
	"sort"
	"strings"
	"time"

	"go.opentelemetry.io/otel/exporters/stdout/stdoutmetric"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/berkcansavur/relaybus/relaybus"
	"github.com/berkcansavur/relaybus/relaybus/memory"
	relaybusotel "github.com/berkcansavur/relaybus/relaybus/otel"
)

// Wiring the instruments into a bus: New on the program's providers,
// WrapStore for the store's metrics, Configure for the middleware and
// AfterFinish, and Publish for the publish span and the trace headers.
// Here the providers are the SDK's in-memory reader and span recorder,
// so that the example can print what they got.
func Example() {
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	spans := tracetest.NewSpanRecorder()
	in, err := relaybusotel.New(&relaybusotel.Options{
		MeterProvider:  sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
		TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)),
		Propagator:     propagation.TraceContext{},
	})
	if err != nil {
		log.Fatal(err)
	}

	finished := make(chan relaybus.FinishOutcome, 1)
	bus, err := relaybus.New(relaybusotel.WrapStore[*memory.Tx](memory.New(nil), in), in.Configure(relaybus.Config{
		PollInterval: 10 * time.Millisecond,
		// The program's own AfterFinish runs after the instruments'.
		AfterFinish: func(_ context.Context, f relaybus.Finish) { finished <- f.Outcome },
	}))
	if err != nil {
		log.Fatal(err)
	}
	err = bus.Handle("order.placed", "send-receipt", func(ctx context.Context, d *relaybus.Delivery) error {
		_, hasTraceparent := d.Headers["traceparent"]
		fmt.Println("handler: traceparent in the headers:", hasTraceparent)
		return nil
	}, nil)
	if err != nil {
		log.Fatal(err)
	}
	if err := relaybusotel.Publish(ctx, in, bus, &relaybus.Event{Type: "order.placed", Key: "customer-42"}); err != nil {
		log.Fatal(err)
	}
	if err := bus.Start(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("finished:", <-finished)
	if err := bus.Stop(ctx); err != nil {
		log.Fatal(err)
	}

	for _, s := range spans.Ended() {
		fmt.Printf("span %q %s, links %d\n", s.Name(), s.SpanKind(), len(s.Links()))
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		log.Fatal(err)
	}
	var lines []string
	for _, m := range rm.ScopeMetrics[0].Metrics {
		switch d := m.Data.(type) {
		case metricdata.Sum[int64]:
			lines = append(lines, fmt.Sprintf("%s (%s): %d", m.Name, m.Unit, d.DataPoints[0].Value))
		case metricdata.Histogram[float64]:
			lines = append(lines, fmt.Sprintf("%s (%s): %d recorded", m.Name, m.Unit, d.DataPoints[0].Count))
		case metricdata.Histogram[int64]:
			lines = append(lines, fmt.Sprintf("%s (%s): sum %d", m.Name, m.Unit, d.DataPoints[0].Sum))
		}
	}
	sort.Strings(lines)
	for _, l := range lines {
		if strings.HasPrefix(l, "relaybus.claim.duration") {
			continue // as many claims as polls
		}
		fmt.Println(l)
	}
	// Output:
	// handler: traceparent in the headers: true
	// finished: completed
	// span "publish order.placed" producer, links 0
	// span "process order.placed" consumer, links 1
	// relaybus.claim.size ({delivery}): sum 1
	// relaybus.delivery.finished ({attempt}): 1
	// relaybus.handler.active ({call}): 0
	// relaybus.handler.calls ({call}): 1
	// relaybus.handler.duration (s): 1 recorded
	// relaybus.handler.lag (s): 1 recorded
	// relaybus.publish.duration (s): 1 recorded
}

// The same wiring with the stdout exporters, as a program would start
// with before it has a collector: spans and metrics are printed as JSON
// on stdout. (It is compiled, not run: its output has times and IDs.)
func Example_stdout() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	traceExporter, err := stdouttrace.New(stdouttrace.WithPrettyPrint())
	if err != nil {
		log.Fatal(err)
	}
	tracerProvider := sdktrace.NewTracerProvider(sdktrace.WithBatcher(traceExporter))
	defer func() { _ = tracerProvider.Shutdown(context.Background()) }()
	metricExporter, err := stdoutmetric.New()
	if err != nil {
		log.Fatal(err)
	}
	meterProvider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewPeriodicReader(metricExporter)))
	defer func() { _ = meterProvider.Shutdown(context.Background()) }()

	in, err := relaybusotel.New(&relaybusotel.Options{
		MeterProvider:  meterProvider,
		TracerProvider: tracerProvider,
		Propagator:     propagation.TraceContext{},
	})
	if err != nil {
		log.Fatal(err)
	}
	bus, err := relaybus.New(relaybusotel.WrapStore[*memory.Tx](memory.New(nil), in), in.Configure(relaybus.Config{}))
	if err != nil {
		log.Fatal(err)
	}
	err = bus.Handle("order.placed", "send-receipt", func(ctx context.Context, d *relaybus.Delivery) error {
		return nil // ctx carries the handler's span: log and trace with it
	}, nil)
	if err != nil {
		log.Fatal(err)
	}
	if err := relaybusotel.Publish(ctx, in, bus, &relaybus.Event{Type: "order.placed", Key: "customer-42"}); err != nil {
		log.Fatal(err)
	}
	if err := bus.Run(ctx); err != nil { // until interrupted
		log.Fatal(err)
	}
}
