package memory_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/berkcansavur/relaybus/relaybus"
	"github.com/berkcansavur/relaybus/relaybus/memory"
)

// BenchmarkClaimComplete measures one delivery through claim and
// completion in batches of 100, with a backlog of backlog deliveries
// (claims scan the live deliveries, so the backlog is the cost driver).
func BenchmarkClaimComplete(b *testing.B) {
	for _, backlog := range []int{1_000, 10_000} {
		b.Run(fmt.Sprintf("backlog=%d", backlog), func(b *testing.B) {
			ctx := b.Context()
			s := memory.New(nil)
			now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
			const batch = 100
			seq := 0
			publishBatch := func(n int) {
				p := &relaybus.EventPublishParams{Now: now}
				for range n {
					seq++
					p.Events = append(p.Events, &relaybus.EventPublish{
						Event:      &relaybus.Event{ID: fmt.Sprint("e", seq), Type: "t"},
						Deliveries: []relaybus.DeliverySpec{{Handler: "h", MaxAttempts: 3}},
					})
				}
				tx, _ := s.TxBegin(ctx)
				if _, err := s.EventPublishTx(ctx, tx, p); err != nil {
					b.Fatal(err)
				}
				if err := s.TxCommit(ctx, tx); err != nil {
					b.Fatal(err)
				}
			}
			for range backlog / batch {
				publishBatch(batch)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i += batch {
				b.StopTimer()
				publishBatch(batch) // keep the backlog steady
				b.StartTimer()
				ds, err := s.DeliveryClaim(ctx, &relaybus.DeliveryClaimParams{Owner: "o", Handlers: []string{"h"}, Limit: batch, LeaseDuration: time.Minute, Now: now})
				if err != nil || len(ds) != batch {
					b.Fatalf("claim: %d deliveries, %v", len(ds), err)
				}
				ls := make([]relaybus.Lease, len(ds))
				for j, d := range ds {
					ls[j] = d.Lease()
				}
				if _, err := s.DeliveryCompleteMany(ctx, &relaybus.DeliveryCompleteManyParams{Leases: ls, Now: now}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
