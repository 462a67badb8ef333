package relaybus_test

import (
	"context"
	"fmt"

	"github.com/berkcansavur/relaybus/relaybus"
	"github.com/berkcansavur/relaybus/relaybus/memory"
)

// PauseHandler stops every dispatcher claiming one handler's deliveries
// (a broken consumer, a downstream outage) while the others go on; they
// stay pending, their attempts unspent, until ResumeHandler.
func ExampleBus_PauseHandler() {
	ctx := context.Background()
	bus, err := relaybus.New[*memory.Tx](memory.New(nil), relaybus.Config{})
	if err != nil {
		panic(err)
	}
	for _, name := range []string{"send-receipt", "update-stats"} {
		_ = bus.Handle("order.placed", name, func(_ context.Context, d *relaybus.Delivery) error {
			fmt.Printf("%s: %s\n", d.Handler, d.Payload)
			return nil
		}, nil)
	}
	if err := bus.PauseHandler(ctx, "send-receipt", "SMTP outage, INC-7"); err != nil {
		panic(err)
	}
	_ = bus.Publish(ctx, &relaybus.Event{Type: "order.placed", Key: "customer-42", Payload: []byte("order 1")})
	_, _ = bus.Work(ctx, nil)
	paused, _ := bus.PausedHandlers(ctx)
	fmt.Printf("paused: %s (%s)\n", paused[0].Handler, paused[0].Reason)

	if _, err := bus.ResumeHandler(ctx, "send-receipt"); err != nil {
		panic(err)
	}
	_, _ = bus.Work(ctx, nil)
	// Output:
	// update-stats: order 1
	// paused: send-receipt (SMTP outage, INC-7)
	// send-receipt: order 1
}
