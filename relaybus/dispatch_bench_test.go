package relaybus_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/berkcansavur/relaybus/relaybus"
	"github.com/berkcansavur/relaybus/relaybus/memory"
)

// BenchmarkDispatch measures the dispatcher's own cost on the in-memory
// store: b.N deliveries published beforehand, a handler that does
// nothing, and the time from Start until the store has confirmed the last
// completion. unkeyed runs every delivery concurrently; keys=16 spreads
// them over 16 ordering keys, so a key's next delivery can be claimed only
// after the one before it has completed. It uses only the public API, so
// the same file measures any version of the library:
//
//	go test -run XXX -bench Dispatch -benchtime 100000x ./relaybus/
func BenchmarkDispatch(b *testing.B) {
	for _, keys := range []int{0, 16} {
		name := "unkeyed"
		if keys > 0 {
			name = fmt.Sprintf("keys=%d", keys)
		}
		b.Run(name, func(b *testing.B) { benchmarkDispatch(b, keys) })
	}
}

func benchmarkDispatch(b *testing.B, keys int) {
	store := memory.New(nil)
	bus, err := relaybus.New[*memory.Tx](store, relaybus.Config{Concurrency: 64, BatchSize: 64, PollInterval: time.Millisecond})
	if err != nil {
		b.Fatal(err)
	}
	if err := bus.Handle("t", "h", func(context.Context, *relaybus.Delivery) error { return nil }, nil); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for i := 0; i < b.N; i += relaybus.MaxEventsPerPublish {
		batch := make([]*relaybus.Event, 0, min(b.N-i, relaybus.MaxEventsPerPublish))
		for j := range cap(batch) {
			e := &relaybus.Event{Type: "t"}
			if keys > 0 {
				e.Key = fmt.Sprintf("k%d", (i+j)%keys)
			}
			batch = append(batch, e)
		}
		if err := bus.Publish(ctx, batch...); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	if err := bus.Start(ctx); err != nil {
		b.Fatal(err)
	}
	for bus.DispatcherStats().Completed < int64(b.N) {
		time.Sleep(100 * time.Microsecond)
	}
	b.StopTimer()
	if err := bus.Stop(ctx); err != nil {
		b.Fatal(err)
	}
	st := bus.DispatcherStats()
	if st.Completed != int64(b.N) || st.Failed+st.LeasesLost != 0 {
		b.Fatalf("dispatcher stats %+v: want %d completed and nothing failed or lost", st, b.N)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "deliveries/s")
	b.ReportMetric(float64(st.Claimed)/float64(max(st.Claims, 1)), "deliveries/claim")
}
