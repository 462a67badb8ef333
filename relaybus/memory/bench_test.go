package memory_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/memory"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

// BenchmarkClaimComplete measures one delivery through claim and
// completion in batches of 100, with a steady backlog of backlog due
// deliveries, unkeyed or spread over 100 keys. The backlog is what a
// claim that scans every live delivery pays for; the indexed claim should
// cost about the same per delivery at every size. ns/delivery is the
// figure to compare (ns/op counts b.N, rounded up to whole batches).
func BenchmarkClaimComplete(b *testing.B) {
	const batch = 100
	for _, backlog := range []int{1_000, 10_000, 100_000} {
		for _, keys := range []int{0, batch} {
			name := fmt.Sprintf("backlog=%d/unkeyed", backlog)
			if keys > 0 {
				name = fmt.Sprintf("backlog=%d/keys=%d", backlog, keys)
			}
			b.Run(name, func(b *testing.B) { benchClaimComplete(b, backlog, keys, batch) })
		}
	}
}

// benchClaimComplete runs one case of BenchmarkClaimComplete. With keys
// > 0, event i gets key i mod keys; batch must be a multiple of keys, so
// each refill gives every key one more delivery and each claim can take
// the head of every key.
func benchClaimComplete(b *testing.B, backlog, keys, batch int) {
	ctx := b.Context()
	s := memory.New(nil)
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	seq := 0
	publishBatch := func(n int) {
		p := &driver.EventPublishParams{Now: now}
		for range n {
			seq++
			ev := &relaytype.Event{ID: fmt.Sprint("e", seq), Type: "t"}
			if keys > 0 {
				ev.Key = fmt.Sprint("k", seq%keys)
			}
			p.Events = append(p.Events, &driver.EventPublish{
				Event:      ev,
				Deliveries: []driver.DeliverySpec{{Handler: "h", MaxAttempts: 3}},
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
	delivered := 0
	b.ResetTimer()
	for delivered < b.N {
		b.StopTimer()
		publishBatch(batch) // keep the backlog steady
		b.StartTimer()
		ds, err := s.DeliveryClaim(ctx, &driver.DeliveryClaimParams{Owner: "o", Handlers: []string{"h"}, Limit: batch, LeaseDuration: time.Minute, Now: now})
		if err != nil || len(ds) != batch {
			b.Fatalf("claim: %d deliveries, %v", len(ds), err)
		}
		ls := make([]relaytype.Lease, len(ds))
		for j, d := range ds {
			ls[j] = d.Lease()
		}
		if _, err := s.DeliveryCompleteMany(ctx, &driver.DeliveryCompleteManyParams{Leases: ls, Now: now}); err != nil {
			b.Fatal(err)
		}
		delivered += len(ds)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(delivered), "ns/delivery")
}
