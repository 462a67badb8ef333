package relaybustest_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/berkcansavur/relaybus/relaybus"
	"github.com/berkcansavur/relaybus/relaybus/memory"
	"github.com/berkcansavur/relaybus/relaybus/relaybustest"
)

// exampleT stands for the *testing.T of a service's test: an example has
// no test to fail, so it prints what would fail it.
type exampleT struct{ testing.TB }

func (exampleT) Helper() {}

func (exampleT) Fatalf(format string, args ...any) { fmt.Printf("FAIL: "+format+"\n", args...) }

// placeOrder is the service's code under test: its own writes and its
// event in one transaction.
func placeOrder(ctx context.Context, bus *relaybus.Bus[*memory.Tx], tx *memory.Tx, orderID, customer string) error {
	// ... the service's own writes in tx ...
	return bus.PublishTx(ctx, tx, &relaybus.Event{
		ID: "evt-" + orderID, Type: "order.placed", Key: customer,
		Payload: fmt.Appendf(nil, `{"order": %q, "total": 12}`, orderID),
	})
}

// newExampleBus is a bus on a Recorder of a memory store, with the
// service's handlers.
func newExampleBus() (*relaybus.Bus[*memory.Tx], *relaybustest.Recorder[*memory.Tx], *memory.Store) {
	store := memory.New(nil)
	rec := relaybustest.NewRecorder[*memory.Tx](store)
	bus, err := relaybus.New[*memory.Tx](rec, relaybus.Config{})
	if err != nil {
		panic(err)
	}
	_ = bus.Handle("order.placed", "send-receipt", func(_ context.Context, d *relaybus.Delivery) error {
		fmt.Printf("receipt for %s\n", d.Key)
		return nil
	}, nil)
	return bus, rec, store
}

// A Recorder in place of the store records what each transaction
// published, before it commits.
func ExampleNewRecorder() {
	t := exampleT{} // a test's *testing.T
	ctx := context.Background()
	bus, rec, store := newExampleBus()

	tx, _ := store.TxBegin(ctx)
	if err := placeOrder(ctx, bus, tx, "o-1", "customer-42"); err != nil {
		panic(err)
	}
	for _, p := range rec.PublishedTx(tx) {
		fmt.Println(p.Event.Type, p.Event.Key, p.Handlers)
	}
	relaybustest.RequirePublished(t, rec.PublishedTx(tx), relaybustest.Want{Type: "order.placed", Key: new("customer-42")})
	_ = store.TxCommit(ctx, tx)
	// Output:
	// order.placed customer-42 [send-receipt]
}

// RequirePublished wants exactly one event to match. When none does, the
// failure lists what was published and how each event differs.
func ExampleRequirePublished() {
	t := exampleT{}
	ctx := context.Background()
	bus, rec, store := newExampleBus()
	tx, _ := store.TxBegin(ctx)
	_ = placeOrder(ctx, bus, tx, "o-1", "customer-42")

	got := relaybustest.RequirePublished(t, rec.PublishedTx(tx), relaybustest.Want{
		Type:        "order.placed",
		Key:         new("customer-42"),
		PayloadJSON: map[string]any{"total": 12, "order": "o-1"},
	})
	fmt.Println("matched", got.Event.ID)

	// A wrong expectation fails the test, saying why:
	relaybustest.RequirePublished(t, rec.PublishedTx(tx), relaybustest.Want{Type: "order.placed", Key: new("customer-7")})
	// Output:
	// matched evt-o-1
	// FAIL: relaybustest: RequirePublished: no published event matches Want{Type: "order.placed", Key: "customer-7"}
	// 1 published:
	//   [0] order.placed key "customer-42" id "evt-o-1" handlers ["send-receipt"] payload "{\"order\": \"o-1\", \"total\": 12}"
	//       differs: key "customer-42", want "customer-7"
}

// RequirePublishedMany checks the whole list, in order.
func ExampleRequirePublishedMany() {
	t := exampleT{}
	ctx := context.Background()
	bus, rec, store := newExampleBus()
	tx, _ := store.TxBegin(ctx)
	_ = placeOrder(ctx, bus, tx, "o-1", "customer-42")
	_ = placeOrder(ctx, bus, tx, "o-2", "customer-42")

	got := relaybustest.RequirePublishedMany(t, rec.PublishedTx(tx), []relaybustest.Want{
		{Type: "order.placed", ID: "evt-o-1"},
		{Type: "order.placed", ID: "evt-o-2"},
	})
	fmt.Println(len(got), "events, in order")
	// Output:
	// 2 events, in order
}

// RequireNotPublished checks that nothing matches: here, that a failed
// order published no event.
func ExampleRequireNotPublished() {
	t := exampleT{}
	ctx := context.Background()
	_, rec, store := newExampleBus()
	tx, _ := store.TxBegin(ctx)
	// ... the service refused the order before publishing ...
	relaybustest.RequireNotPublished(t, rec.PublishedTx(tx), relaybustest.Want{Type: "order.placed"})
	fmt.Println("nothing published")
	// Output:
	// nothing published
}

// Stored reads what committed from the store itself, through the bus:
// no Recorder needed.
func ExampleStored() {
	t := exampleT{}
	ctx := context.Background()
	bus, _, store := newExampleBus()
	tx, _ := store.TxBegin(ctx)
	_ = placeOrder(ctx, bus, tx, "o-1", "customer-42")
	fmt.Println("before commit:", len(relaybustest.Stored(ctx, t, bus)))
	_ = store.TxCommit(ctx, tx)

	stored := relaybustest.Stored(ctx, t, bus)
	fmt.Println("after commit:", len(stored))
	relaybustest.RequirePublished(t, stored, relaybustest.Want{Type: "order.placed", Handlers: []string{"send-receipt"}})
	// Output:
	// before commit: 0
	// after commit: 1
}

// Work runs the handlers over what was published, on the test's
// goroutine, and fails the test if one of them failed.
func ExampleWork() {
	t := exampleT{}
	ctx := context.Background()
	bus, _, _ := newExampleBus()
	_ = bus.Handle("order.placed", "charge-card", func(context.Context, *relaybus.Delivery) error {
		return relaybus.Permanent(errors.New("card declined"))
	}, nil)
	_ = bus.Publish(ctx, &relaybus.Event{ID: "evt-o-1", Type: "order.placed", Key: "customer-42"})

	relaybustest.Work(ctx, t, bus, nil)
	// Output:
	// receipt for customer-42
	// FAIL: relaybustest: Work: 1 of 2 deliveries did not complete (WorkOptions.AllowFailures accepts that):
	// 2 ran:
	//   [0] handler "send-receipt", event order.placed key "customer-42" id "evt-o-1", attempt 1: completed
	//   [1] handler "charge-card", event order.placed key "customer-42" id "evt-o-1", attempt 1: buried: permanent: card declined
}
