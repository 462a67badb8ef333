package relaybus_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/berkcansavur/relaybus/relaybus"
	"github.com/berkcansavur/relaybus/relaybus/memory"
)

// Work runs the due deliveries on the calling goroutine and returns when
// none is left: a test publishes, works, and checks the handlers'
// effects, without starting a dispatcher or waiting for one.
func ExampleBus_Work() {
	ctx := context.Background()
	bus, err := relaybus.New[*memory.Tx](memory.New(nil), relaybus.Config{})
	if err != nil {
		panic(err)
	}
	_ = bus.Handle("order.placed", "send-receipt", func(_ context.Context, d *relaybus.Delivery) error {
		fmt.Printf("receipt for %s\n", d.Payload)
		return nil
	}, nil)
	_ = bus.Handle("order.placed", "charge-card", func(context.Context, *relaybus.Delivery) error {
		return relaybus.Permanent(errors.New("card declined"))
	}, nil)

	if err := bus.Publish(ctx, &relaybus.Event{Type: "order.placed", Key: "customer-42", Payload: []byte("order 1")}); err != nil {
		panic(err)
	}
	res, err := bus.Work(ctx, nil)
	if err != nil {
		panic(err)
	}
	for _, w := range res.Worked {
		if w.HandlerErr != nil {
			fmt.Printf("%s: %s (%v)\n", w.Delivery.Handler, w.Outcome, w.HandlerErr)
		}
	}
	// Output:
	// receipt for order 1
	// charge-card: buried (permanent: card declined)
}
