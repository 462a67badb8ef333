package memory_test

import (
	"context"
	"fmt"
	"time"

	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/memory"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

// A publish commits in a transaction; a claim leases the delivery and a
// completion finishes it.
func Example() {
	ctx := context.Background()
	store := memory.New(nil)
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

	tx, _ := store.TxBegin(ctx)
	res, err := store.EventPublishTx(ctx, tx, &driver.EventPublishParams{
		Now: now,
		Events: []*driver.EventPublish{{
			Event:      &relaytype.Event{ID: "order-1", Type: "order.created", Key: "customer-7"},
			Deliveries: []driver.DeliverySpec{{Handler: "mailer", MaxAttempts: 5}},
		}},
	})
	if err != nil {
		_ = store.TxRollback(ctx, tx)
		fmt.Println(err)
		return
	}
	if err := store.TxCommit(ctx, tx); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("inserted:", res.Inserted[0], "sequence:", res.Sequences[0])

	ds, _ := store.DeliveryClaim(ctx, &driver.DeliveryClaimParams{
		Owner: "worker-1", Handlers: []string{"mailer"}, Limit: 10, LeaseDuration: time.Minute, Now: now,
	})
	d := ds[0]
	fmt.Println("claimed:", d.EventID, d.Handler, "attempt", d.Attempts)

	ok, _ := store.DeliveryComplete(ctx, &driver.DeliveryCompleteParams{Lease: d.Lease(), Now: now.Add(time.Second)})
	fmt.Println("completed:", ok)
	// Output:
	// inserted: true sequence: 1
	// claimed: order-1 mailer attempt 1
	// completed: true
}
