package otel_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/berkcansavur/relaybus/relaybus"
	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/memory"
	relaybusotel "github.com/berkcansavur/relaybus/relaybus/otel"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

// dropSpans is a span processor that drops every span it is given: the
// SDK's cost of making, sampling and ending spans, without an exporter's.
type dropSpans struct{}

func (dropSpans) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (dropSpans) OnEnd(sdktrace.ReadOnlySpan)                     {}
func (dropSpans) Shutdown(context.Context) error                  { return nil }
func (dropSpans) ForceFlush(context.Context) error                { return nil }

// sdkOptions are the instruments' options with the SDK on: a meter
// provider with a manual reader (never collected during the benchmark),
// a tracer provider that samples every span and drops it when it ends,
// and the W3C propagator.
func sdkOptions() *relaybusotel.Options { return sdkOptionsSampler(sdktrace.AlwaysSample()) }

// sdkOptionsSampler is sdkOptions with another sampler.
func sdkOptionsSampler(s sdktrace.Sampler) *relaybusotel.Options {
	return &relaybusotel.Options{
		MeterProvider:  sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader())),
		TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSampler(s), sdktrace.WithSpanProcessor(dropSpans{})),
		Propagator:     propagation.TraceContext{},
	}
}

// BenchmarkBus measures the whole per-delivery path through a Bus on the
// memory store: b.N events of one type, each with a key of its own (so
// that the span gets relaybus.event.key and no key waits for another),
// with one handler that does nothing, published beforehand, outside the
// timer, and the time from Start until the dispatcher has completed the
// last one. One op is one delivery, so ns/op and allocs/op are per
// delivery; cpu-ns/delivery is the process's CPU time over the same
// span (every goroutine, the garbage collector's included), per
// delivery, which other processes on the machine disturb less than
// ns/op. The cases:
//
//   - off: a plain Bus;
//   - headers: off with a traceparent header in every event, as Publish
//     writes one: what carrying the header costs the store and the core
//     (copies of the headers map), apart from the instrumentation;
//   - on: the Bus with WrapStore, Configure (middleware and
//     AfterFinish) and ObserveDispatcher on the SDK (sdkOptions), the
//     events published by Publish, so that each carries a traceparent;
//   - on-ratio: on with the sampler the package doc suggests for
//     production, ParentBased(TraceIDRatioBased(0.01)): one handler span
//     in a hundred sampled (each is the root of its own trace);
//   - on-ratio-noheader: on-ratio with the events published by
//     Bus.Publish, without the trace headers, as a publisher that does
//     not use Publish writes them (the harness's telemetry branch does
//     that): compare it with off, where on-ratio compares with headers.
//
// The figures in the package doc come from
//
//	go test ./relaybus/otel -run '^$' -bench Bus -benchtime 100000x -count 5
func BenchmarkBus(b *testing.B) {
	b.Run("off", func(b *testing.B) { benchmarkBus(b, busOff) })
	b.Run("headers", func(b *testing.B) { benchmarkBus(b, busHeaders) })
	b.Run("on", func(b *testing.B) { benchmarkBus(b, busOn) })
	b.Run("on-ratio", func(b *testing.B) { benchmarkBus(b, busOnRatio) })
	b.Run("on-ratio-noheader", func(b *testing.B) { benchmarkBus(b, busOnRatioNoHeader) })
}

// The cases of BenchmarkBus.
const (
	busOff = iota
	busHeaders
	busOn
	busOnRatio
	busOnRatioNoHeader
)

func benchmarkBus(b *testing.B, mode int) {
	ctx := context.Background()
	var st relaybus.Store[*memory.Tx] = memory.New(nil)
	cfg := relaybus.Config{Concurrency: 64, BatchSize: 64, PollInterval: time.Millisecond}
	var in *relaybusotel.Instruments
	if mode == busOn || mode == busOnRatio || mode == busOnRatioNoHeader {
		opts := sdkOptions()
		if mode == busOnRatio || mode == busOnRatioNoHeader {
			opts = sdkOptionsSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0.01)))
		}
		var err error
		if in, err = relaybusotel.New(opts); err != nil {
			b.Fatal(err)
		}
		st, cfg = relaybusotel.WrapStore(st, in), in.Configure(cfg)
	}
	bus, err := relaybus.New(st, cfg)
	if err != nil {
		b.Fatal(err)
	}
	if in != nil {
		reg, err := in.ObserveDispatcher(bus)
		if err != nil {
			b.Fatal(err)
		}
		defer func() { _ = reg.Unregister() }()
	}
	if err := bus.Handle("order.placed", "h", func(context.Context, *relaybus.Delivery) error { return nil }, nil); err != nil {
		b.Fatal(err)
	}
	for i := 0; i < b.N; i += relaybus.MaxEventsPerPublish {
		batch := make([]*relaybus.Event, 0, min(b.N-i, relaybus.MaxEventsPerPublish))
		for j := range cap(batch) {
			e := &relaybus.Event{Type: "order.placed", Key: fmt.Sprint("k", i+j)}
			if mode == busHeaders {
				e.Headers = map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
			}
			batch = append(batch, e)
		}
		if in != nil && mode != busOnRatioNoHeader {
			err = relaybusotel.Publish(ctx, in, bus, batch...)
		} else {
			err = bus.Publish(ctx, batch...)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	if err := bus.Start(ctx); err != nil {
		b.Fatal(err)
	}
	for bus.DispatcherStats().Completed < int64(b.N) {
		time.Sleep(100 * time.Microsecond)
	}
	b.StopTimer()
	if cpu := cpuTime() - cpu0; cpu > 0 {
		b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/delivery")
	}
	if err := bus.Stop(ctx); err != nil {
		b.Fatal(err)
	}
	s := bus.DispatcherStats()
	if s.Completed != int64(b.N) || s.Failed+s.LeasesLost != 0 {
		b.Fatalf("dispatcher stats %+v: want %d completed and nothing failed or lost", s, b.N)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "deliveries/s")
}

// BenchmarkStore measures what WrapStore adds to the dispatcher's store
// calls on the memory store: one op is a DeliveryClaim of one delivery
// and its DeliveryComplete, bare (off) and wrapped on the SDK (on). The
// events are written into the bare store beforehand, outside the timer.
//
//	go test ./relaybus/otel -run '^$' -bench Store -benchtime 100000x -count 5
func BenchmarkStore(b *testing.B) {
	for _, on := range []bool{false, true} {
		name := "off"
		if on {
			name = "on"
		}
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			mem := memory.New(nil)
			var st driver.Store[*memory.Tx] = mem
			if on {
				in, err := relaybusotel.New(sdkOptions())
				if err != nil {
					b.Fatal(err)
				}
				st = relaybusotel.WrapStore(st, in)
			}
			now := time.Now()
			for i := 0; i < b.N; i += relaybus.MaxEventsPerPublish {
				p := &driver.EventPublishParams{Now: now}
				for j := range min(b.N-i, relaybus.MaxEventsPerPublish) {
					p.Events = append(p.Events, &driver.EventPublish{
						Event:      &relaytype.Event{ID: fmt.Sprint("e", i+j), Type: "t"},
						Deliveries: []driver.DeliverySpec{{Handler: "h", MaxAttempts: 3}},
					})
				}
				tx, _ := mem.TxBegin(ctx)
				if _, err := mem.EventPublishTx(ctx, tx, p); err != nil {
					b.Fatal(err)
				}
				if err := mem.TxCommit(ctx, tx); err != nil {
					b.Fatal(err)
				}
			}
			claim := &driver.DeliveryClaimParams{Owner: "o", Handlers: []string{"h"}, Limit: 1, LeaseDuration: time.Minute, Now: now}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				ds, err := st.DeliveryClaim(ctx, claim)
				if err != nil || len(ds) != 1 {
					b.Fatalf("claim: %d deliveries, %v", len(ds), err)
				}
				ok, err := st.DeliveryComplete(ctx, &driver.DeliveryCompleteParams{Lease: ds[0].Lease(), Now: now})
				if err != nil || !ok {
					b.Fatalf("complete: %v %v", ok, err)
				}
			}
		})
	}
}
