package postgres_test

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/berkcansavur/relaybus/internal/dbenv/dbtest"
	"github.com/berkcansavur/relaybus/relaybus"
	"github.com/berkcansavur/relaybus/relaybus/postgres"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

// This file holds the README's "Using the library" snippet as a whole
// program, compiled with the package's tests, so that the README cannot
// drift from the API. It uses only the public API.

// receiptsSent counts what sendReceipt sent.
var receiptsSent atomic.Int64

// sendReceipt stands for the service's own work.
func sendReceipt(_ context.Context, payload []byte) error {
	receiptsSent.Add(1)
	fmt.Printf("receipt for %s\n", payload)
	return nil
}

// The README's snippet: a store on a pgx pool, a bus with one handler, an
// event published in the same transaction as the service's own write, and
// the dispatcher run until the receipt is sent. It needs a PostgreSQL
// server (DATABASE_URL), so go test compiles it but does not run it as an
// example; TestReadmeExample runs it on a fresh database.
func Example_readme() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	store, err := postgres.New(pool, nil) // schema "public", tables "relaybus_*"
	if err != nil {
		panic(err)
	}
	// Defaults: concurrency 10, batch 10, poll 1s, lease 30s.
	bus, err := relaybus.New[pgx.Tx](store, relaybus.Config{})
	if err != nil {
		panic(err)
	}

	err = bus.Handle("order.placed", "send-receipt", func(ctx context.Context, d *relaytype.Delivery) error {
		defer cancel() // this example stops once the receipt is sent
		return sendReceipt(ctx, d.Payload)
	}, nil)
	if err != nil {
		panic(err)
	}
	if err := bus.Setup(ctx); err != nil { // idempotent: creates the schema
		panic(err)
	}

	// Publish atomically with your own writes.
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS orders (id bigint PRIMARY KEY, customer text NOT NULL)`); err != nil {
		panic(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		panic(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO orders (id, customer) VALUES (1, 'customer-42')`); err != nil {
		panic(err)
	}
	err = bus.PublishTx(ctx, tx, &relaytype.Event{Type: "order.placed", Key: "customer-42", Payload: []byte("order 1")})
	if err != nil {
		panic(err)
	}
	if err := tx.Commit(ctx); err != nil {
		panic(err)
	}

	// Dispatch until ctx is done, then shut down gracefully.
	if err := bus.Run(ctx); err != nil {
		panic(err)
	}
}

// TestReadmeExample runs the README's snippet on a fresh database of the
// test server, and skips, saying why, where no server can be had.
func TestReadmeExample(t *testing.T) {
	t.Setenv("DATABASE_URL", dbtest.TestDatabaseOrSkip(t))
	before := receiptsSent.Load()
	Example_readme()
	if sent := receiptsSent.Load() - before; sent != 1 {
		t.Fatalf("%d receipts sent; want 1", sent)
	}
}
