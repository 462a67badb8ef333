package relaybus_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/berkcansavur/relaybus/relaybus"
	"github.com/berkcansavur/relaybus/relaybus/memory"
)

// Publish events, handle them, and stop once all are handled. Run returns
// after a graceful shutdown: the deliveries whose handlers succeeded are
// completed before it returns.
func Example() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	store := memory.New(&memory.Options{RetainCompleted: true})
	bus, err := relaybus.New[*memory.Tx](store, relaybus.Config{PollInterval: 5 * time.Millisecond})
	if err != nil {
		panic(err)
	}

	var mu sync.Mutex
	var sent []string
	var handled sync.WaitGroup
	handled.Add(3)
	err = bus.Handle("order.created", "mailer", func(ctx context.Context, d *relaybus.Delivery) error {
		mu.Lock()
		sent = append(sent, string(d.Payload))
		mu.Unlock()
		handled.Done()
		return nil
	}, nil)
	if err != nil {
		panic(err)
	}

	err = bus.Publish(ctx,
		&relaybus.Event{Type: "order.created", Payload: []byte("order 1")},
		&relaybus.Event{Type: "order.created", Payload: []byte("order 2")},
		&relaybus.Event{Type: "order.created", Payload: []byte("order 3")},
	)
	if err != nil {
		panic(err)
	}

	go func() { handled.Wait(); cancel() }()
	if err := bus.Run(ctx); err != nil {
		panic(err)
	}

	slices.Sort(sent) // handlers run concurrently
	fmt.Println(strings.Join(sent, ", "))
	stats, _ := bus.Statistics(context.Background())
	fmt.Println("completed:", stats.Completed, "pending:", stats.Pending)
	// Output:
	// order 1, order 2, order 3
	// completed: 3 pending: 0
}

// Events with the same Key are handled one at a time, in the order their
// transactions committed, even with many handlers running at once.
func Example_orderedKeys() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	bus, err := relaybus.New[*memory.Tx](memory.New(nil), relaybus.Config{
		Concurrency:  8,
		PollInterval: 5 * time.Millisecond,
	})
	if err != nil {
		panic(err)
	}

	var mu sync.Mutex
	seen := map[string][]string{}
	var handled sync.WaitGroup
	handled.Add(9)
	_ = bus.Handle("account.changed", "ledger", func(ctx context.Context, d *relaybus.Delivery) error {
		mu.Lock()
		seen[d.Key] = append(seen[d.Key], string(d.Payload))
		mu.Unlock()
		handled.Done()
		return nil
	}, nil)

	for _, change := range []string{"open", "deposit", "close"} {
		for _, account := range []string{"alice", "bob", "carol"} {
			err := bus.Publish(ctx, &relaybus.Event{Type: "account.changed", Key: account, Payload: []byte(change)})
			if err != nil {
				panic(err)
			}
		}
	}

	go func() { handled.Wait(); cancel() }()
	_ = bus.Run(ctx)
	for _, account := range []string{"alice", "bob", "carol"} {
		fmt.Println(account+":", strings.Join(seen[account], " -> "))
	}
	// Output:
	// alice: open -> deposit -> close
	// bob: open -> deposit -> close
	// carol: open -> deposit -> close
}

// A failing handler is retried with backoff until its attempt budget is
// spent; the delivery then becomes a dead letter, which Requeue brings
// back with a fresh budget once the cause is fixed.
func Example_deadLetter() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	store := memory.New(&memory.Options{RetainCompleted: true})
	bus, err := relaybus.New[*memory.Tx](store, relaybus.Config{
		PollInterval:   time.Millisecond,
		RetryBaseDelay: time.Millisecond, // tiny, for the example
		RetryMaxDelay:  10 * time.Millisecond,
	})
	if err != nil {
		panic(err)
	}

	var fixed atomic.Bool
	var attempts atomic.Int64
	done := make(chan struct{})
	_ = bus.Handle("invoice.issued", "billing", func(ctx context.Context, d *relaybus.Delivery) error {
		attempts.Add(1)
		if !fixed.Load() {
			return errors.New("payment provider unreachable")
		}
		close(done)
		return nil
	}, &relaybus.HandlerOptions{MaxAttempts: 3})
	_ = bus.Publish(ctx, &relaybus.Event{ID: "invoice-42", Type: "invoice.issued"})
	if err := bus.Start(ctx); err != nil {
		panic(err)
	}

	// Wait for the dead letter.
	var dead *relaybus.Delivery
	for dead == nil {
		page, err := bus.ListDeliveries(ctx, &relaybus.DeliveryListParams{Status: relaybus.StatusDead})
		if err != nil {
			panic(err)
		}
		if len(page.Deliveries) > 0 {
			dead = page.Deliveries[0]
		}
		time.Sleep(time.Millisecond)
	}
	fmt.Printf("dead: %s after %d attempts: %s\n", dead.EventID, dead.Attempts, dead.LastError)

	fixed.Store(true)
	if err := bus.Requeue(ctx, dead.ID); err != nil {
		panic(err)
	}
	<-done
	if err := bus.Stop(context.Background()); err != nil {
		panic(err)
	}
	stats, _ := bus.Statistics(context.Background())
	fmt.Println("handler calls:", attempts.Load(), "completed:", stats.Completed, "dead:", stats.Dead)
	// Output:
	// dead: invoice-42 after 3 attempts: payment provider unreachable
	// handler calls: 4 completed: 1 dead: 0
}

// A transactional handler's writes commit together with its delivery's
// completion. Here the handler publishes a follow-up event in its
// transaction: its first attempt fails after the publish, the transaction
// rolls back, and the retry publishes the receipt exactly once.
func Example_transactionalHandler() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	bus, err := relaybus.New[*memory.Tx](memory.New(&memory.Options{RetainCompleted: true}), relaybus.Config{
		PollInterval:   time.Millisecond,
		RetryBaseDelay: time.Millisecond,
	})
	if err != nil {
		panic(err)
	}

	_ = bus.HandleTx("order.paid", "receipts", func(ctx context.Context, tx *memory.Tx, d *relaybus.Delivery) error {
		// A new ID on every attempt: only the rollback keeps the failed
		// attempt's receipt from existing.
		receipt := &relaybus.Event{Type: "receipt.issued", Payload: []byte("receipt for " + d.EventID)}
		if err := bus.PublishTx(ctx, tx, receipt); err != nil {
			return err
		}
		if d.Attempts == 1 {
			return errors.New("printer jammed") // rolls the receipt back too
		}
		return nil
	}, nil)

	done := make(chan struct{})
	_ = bus.Handle("receipt.issued", "mailer", func(ctx context.Context, d *relaybus.Delivery) error {
		fmt.Println("mailing", string(d.Payload))
		close(done)
		return nil
	}, nil)

	_ = bus.Publish(ctx, &relaybus.Event{ID: "order-7", Type: "order.paid"})
	go func() { <-done; cancel() }()
	_ = bus.Run(ctx)
	stats, _ := bus.Statistics(context.Background())
	fmt.Printf("receipts: %+v\n", stats.Handlers["mailer"])
	fmt.Printf("orders: %+v\n", stats.Handlers["receipts"])
	// Output:
	// mailing receipt for order-7
	// receipts: {Pending:0 Processing:0 Completed:1 Dead:0 OldestDueAge:0s}
	// orders: {Pending:0 Processing:0 Completed:1 Dead:0 OldestDueAge:0s}
}

// Middleware wraps every handler of a bus: here it logs each attempt with
// the delivery's attributes and the handler's context, and turns an
// error a downstream marks as final into a dead letter at once.
func ExampleMiddleware() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var log strings.Builder
	var logMu sync.Mutex
	errRejected := errors.New("rejected downstream")
	logged := func(ctx context.Context, d *relaybus.Delivery, next func(context.Context) error) error {
		err := next(ctx)
		if errors.Is(err, errRejected) {
			err = relaybus.Permanent(err)
		}
		logMu.Lock()
		fmt.Fprintf(&log, "handler=%s key=%s attempt=%d error=%v\n", d.Handler, d.Key, d.Attempts, err)
		logMu.Unlock()
		return err
	}
	store := memory.New(nil)
	bus, err := relaybus.New[*memory.Tx](store, relaybus.Config{PollInterval: 5 * time.Millisecond, Middleware: []relaybus.Middleware{logged}})
	if err != nil {
		panic(err)
	}
	var done sync.WaitGroup
	done.Add(2)
	err = bus.Handle("invoice.sent", "ledger", func(_ context.Context, d *relaybus.Delivery) error {
		defer done.Done()
		if string(d.Payload) == "bad" {
			return errRejected
		}
		return nil
	}, nil)
	if err != nil {
		panic(err)
	}
	err = bus.Publish(ctx,
		&relaybus.Event{Type: "invoice.sent", Key: "customer-7", Payload: []byte("ok")},
		&relaybus.Event{Type: "invoice.sent", Key: "customer-7", Payload: []byte("bad")},
	)
	if err != nil {
		panic(err)
	}
	go func() { done.Wait(); cancel() }()
	if err := bus.Run(ctx); err != nil {
		panic(err)
	}
	fmt.Print(log.String())
	// Output:
	// handler=ledger key=customer-7 attempt=1 error=<nil>
	// handler=ledger key=customer-7 attempt=1 error=permanent: rejected downstream
}
