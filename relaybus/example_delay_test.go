package relaybus_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/berkcansavur/relaybus/relaybus"
	"github.com/berkcansavur/relaybus/relaybus/memory"
)

// An event with a DeliverAt runs no sooner: here a reminder a day after
// the order. Its key's later events wait for it (they keep their order),
// so delay an event of a key only when everything after it may wait too.
// The bus's clock is moved by hand, as a test would.
func Example_deliverAt() {
	ctx := context.Background()
	var mu sync.Mutex
	now := time.Date(2030, time.March, 1, 9, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	bus, err := relaybus.New[*memory.Tx](memory.New(nil), relaybus.Config{Now: clock})
	if err != nil {
		panic(err)
	}
	_ = bus.Handle("cart.reminder", "send-reminder", func(_ context.Context, d *relaybus.Delivery) error {
		fmt.Printf("reminder for %s at %s\n", d.Key, clock().Format(time.DateTime))
		return nil
	}, nil)
	if err := bus.Publish(ctx, &relaybus.Event{Type: "cart.reminder", Key: "customer-42", DeliverAt: now.Add(24 * time.Hour)}); err != nil {
		panic(err)
	}

	res, _ := bus.Work(ctx, nil)
	fmt.Println("ran at once:", len(res.Worked))
	mu.Lock()
	now = now.Add(24 * time.Hour)
	mu.Unlock()
	res, _ = bus.Work(ctx, nil)
	fmt.Println("ran a day later:", len(res.Worked))
	// Output:
	// ran at once: 0
	// reminder for customer-42 at 2030-03-02 09:00:00
	// ran a day later: 1
}
