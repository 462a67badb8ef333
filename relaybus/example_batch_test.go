package relaybus_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/berkcansavur/relaybus/relaybus"
	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/memory"
)

// accounts stands for the database an entity lives in: each account is a
// row with a balance and a version, read and written back with a
// conditional write (UPDATE ... WHERE id = $1 AND version = $2). Every
// call is one round trip, which it counts; the round trip, not the
// arithmetic, is what an update costs.
type accounts struct {
	mu         sync.Mutex
	balance    map[string]int
	version    map[string]int
	roundTrips int
}

var errConflict = errors.New("conditional write refused: the row changed")

func (a *accounts) read(id string) (balance, version int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.roundTrips++
	return a.balance[id], a.version[id]
}

func (a *accounts) write(id string, balance, version int) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.roundTrips++
	if a.version[id] != version {
		return errConflict
	}
	a.balance[id], a.version[id] = balance, version+1
	return nil
}

// A batch handler updates an entity once for a batch of its events: it
// reads the account, applies every deposit of the batch in order, and
// writes the account back with one conditional write. Ten deposits cost
// two round trips instead of twenty, and since a key's batches never run
// side by side (one batch per key in flight, across every process), the
// conditional write is never refused for contention. A refused write
// fails the batch (its first deposit is retried, and the others run again
// after it, in order); a deposit that cannot apply fails alone, after the
// ones before it are written, and those after it run again after it.
func ExampleBus_HandleBatch() {
	ctx := context.Background()
	store := memory.New(nil)
	bus, err := relaybus.New[*memory.Tx](store, relaybus.Config{BatchSize: 100, PollInterval: 10 * time.Millisecond})
	if err != nil {
		panic(err)
	}
	db := &accounts{balance: map[string]int{}, version: map[string]int{}}
	var calls []string
	err = bus.HandleBatch("deposit", "balance", func(ctx context.Context, account string, ds []*relaybus.Delivery) []error {
		balance, version := db.read(account)
		for i, d := range ds {
			var dep struct{ Amount int }
			if err := json.Unmarshal(d.Payload, &dep); err != nil {
				// Stop at the key's first failure: write the deposits
				// before it, bury this one (Permanent); the ones after it
				// run again once it is out of the way.
				if err := db.write(account, balance, version); err != nil {
					return failAll(len(ds), err)
				}
				errs := make([]error, len(ds))
				errs[i] = relaybus.Permanent(err)
				return errs
			}
			balance += dep.Amount
		}
		if err := db.write(account, balance, version); err != nil {
			return failAll(len(ds), err)
		}
		calls = append(calls, fmt.Sprintf("%s: %d deposits, sequences %d to %d", account, len(ds), ds[0].Sequence, ds[len(ds)-1].Sequence))
		return nil
	}, &relaybus.BatchOptions{MaxSize: 50})
	if err != nil {
		panic(err)
	}
	for i := 1; i <= 10; i++ {
		payload := fmt.Appendf(nil, `{"Amount": %d}`, i*10)
		if err := bus.Publish(ctx, &relaybus.Event{Type: "deposit", Key: "acct-1", Payload: payload}); err != nil {
			panic(err)
		}
	}
	if err := bus.Start(ctx); err != nil {
		panic(err)
	}
	for {
		st, err := store.Statistics(ctx, &driver.StatisticsParams{Now: time.Now()})
		if err != nil {
			panic(err)
		}
		if st.Pending+st.Processing == 0 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if err := bus.Stop(ctx); err != nil {
		panic(err)
	}
	fmt.Println(calls)
	fmt.Println("balance", db.balance["acct-1"], "version", db.version["acct-1"], "round trips", db.roundTrips)
	// Output:
	// [acct-1: 10 deposits, sequences 1 to 10]
	// balance 550 version 1 round trips 2
}

// failAll is the result of a batch that failed as a whole.
func failAll(n int, err error) []error {
	errs := make([]error, n)
	for i := range errs {
		errs[i] = err
	}
	return errs
}
