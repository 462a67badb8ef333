package relaybus_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/berkcansavur/relaybus/relaybus"
	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/memory"
)

// ledger stands for the downstream store a handler writes to: another
// database, a payment API, a file. It keeps, per key, the largest
// fencing token it has accepted, and refuses a write with a smaller one:
// the check and the write are one step, under its lock. In SQL that is a
// conditional update, with a fence column per row:
//
//	UPDATE accounts SET balance = $2, fence = $3 WHERE id = $1 AND fence <= $3
//	-- 0 rows: a newer holder has written; this one is stale
type ledger struct {
	mu      sync.Mutex
	fence   map[string]int64
	entries []string
}

func (l *ledger) write(key string, token int64, entry string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if token < l.fence[key] {
		return fmt.Errorf("refused %q: token %d is older than %d, the key's newest holder", entry, token, l.fence[key])
	}
	l.fence[key] = token // equal tokens are the same holder: accepted
	l.entries = append(l.entries, entry)
	return nil
}

// A handler makes its own writes conditional on Delivery.FencingToken,
// so that a process that lost its lease (paused past it: a long GC, a
// network partition) cannot overwrite what the process that took the
// delivery over has written. Here two dispatchers are played by hand on
// the memory store: A claims, stalls past its lease, B takes the lane
// over and handles the delivery; then A wakes up and tries to write.
func ExampleDelivery_fencingToken() {
	ctx := context.Background()
	store := memory.New(nil)
	bus, err := relaybus.New[*memory.Tx](store, relaybus.Config{})
	if err != nil {
		panic(err)
	}
	if err := bus.Declare("order.paid", "book-payment", nil); err != nil {
		panic(err)
	}
	if err := bus.Publish(ctx, &relaybus.Event{Type: "order.paid", Key: "order-7"}); err != nil {
		panic(err)
	}
	books := &ledger{fence: map[string]int64{}}
	handle := func(process string, d *relaybus.Delivery) error {
		return books.write(d.Key, d.FencingToken, process+" booked "+d.EventType)
	}

	claim := func(owner string, now time.Time) *relaybus.Delivery {
		ds, err := store.DeliveryClaim(ctx, &driver.DeliveryClaimParams{
			Owner: owner, Handlers: []string{"book-payment"}, Limit: 1, LeaseDuration: 30 * time.Second, Now: now})
		if err != nil || len(ds) != 1 {
			panic(fmt.Sprint(ds, err))
		}
		return ds[0]
	}
	now := time.Now()
	a := claim("process-a", now)
	// A stalls; its lease expires, and B takes the delivery over.
	b := claim("process-b", now.Add(time.Minute))
	fmt.Println("tokens: A", a.FencingToken, "B", b.FencingToken)

	fmt.Println("B:", handle("B", b))
	fmt.Println("A:", handle("A", a))
	fmt.Println(books.entries)
	// Output:
	// tokens: A 1 B 2
	// B: <nil>
	// A: refused "A booked order.paid": token 1 is older than 2, the key's newest holder
	// [B booked order.paid]
}
