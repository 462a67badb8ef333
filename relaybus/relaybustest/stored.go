package relaybustest

import (
	"context"
	"testing"

	"github.com/berkcansavur/relaybus/relaybus"
)

// MaxStoredDeliveries bounds the deliveries Stored reads: a test's store
// holds far fewer; more is a test that forgot to use a fresh database.
const MaxStoredDeliveries = 100_000

// Lister is what Stored reads: a *relaybus.Bus, of any transaction type.
type Lister interface {
	ListDeliveries(ctx context.Context, params *relaybus.DeliveryListParams) (*relaybus.DeliveryListResult, error)
}

// Stored returns the events the store behind bus holds deliveries of, in
// the order of their first delivery's ID (the order the store inserted
// them), each with the handlers of its deliveries. That is what
// committed and has not completed: a store deletes a completed delivery
// unless it keeps a completion history (the PostgreSQL store's
// CompletionHistory, the memory store's RetainCompleted), so check what
// was published before the handlers run. Dead letters and deliveries
// waiting for a retry are there.
//
// It fails t if the store cannot be read, or holds more than
// MaxStoredDeliveries deliveries.
func Stored(ctx context.Context, t testing.TB, bus Lister) []*Published {
	t.Helper()
	var out []*Published
	byID := map[string]*Published{}
	params := &relaybus.DeliveryListParams{Limit: relaybus.MaxListLimit}
	read := 0
	for {
		page, err := bus.ListDeliveries(ctx, params)
		if err != nil {
			t.Fatalf("relaybustest: Stored: list deliveries: %v", err)
			return nil
		}
		for _, d := range page.Deliveries {
			p := byID[d.EventID]
			if p == nil {
				p = &Published{Event: relaybus.Event{
					ID: d.EventID, Type: d.EventType, Key: d.Key,
					Payload: d.Payload, Headers: d.Headers, CreatedAt: d.EventCreatedAt,
				}}
				byID[d.EventID] = p
				out = append(out, p)
			}
			p.Handlers = append(p.Handlers, d.Handler)
		}
		read += len(page.Deliveries)
		if read > MaxStoredDeliveries {
			t.Fatalf("relaybustest: Stored: the store holds more than MaxStoredDeliveries (%d) deliveries: does the test use a fresh store?", MaxStoredDeliveries)
			return nil
		}
		if page.Next == "" {
			return out
		}
		params.After = page.Next
	}
}
