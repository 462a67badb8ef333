package driver

import (
	"context"

	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

// HealthReporter is an optional capability of a Store: a report on the
// store's own upkeep (dead rows, vacuum, HOT updates, the transaction
// holding vacuum back), for metrics and warnings. Bus.StoreHealth and
// Bus.WatchStoreHealth use it; on a store without it they return an
// error wrapping errors.ErrUnsupported, and nothing else changes.
// relaybus/postgres has it; the memory and MongoDB stores do not (they
// have no counterpart of what it reports). A decorator of a Store (such
// as relaybus/otel's WrapStore) keeps it exactly when the store it wraps
// has it.
type HealthReporter interface {
	// StoreHealth reads the report. It writes nothing, takes no lock a
	// claim or completion waits for, and reads the database's statistics
	// views rather than the store's tables, so that it is cheap to call
	// every minute whatever the backlog.
	StoreHealth(ctx context.Context, params *StoreHealthParams) (*relaytype.StoreHealth, error)
}

// StoreHealthParams are the arguments of StoreHealth. It has no fields
// yet; the struct keeps new ones from breaking the interface. The
// report's times come from the database's clock, since it compares them
// with times the database recorded (a transaction's start, the last
// vacuum).
type StoreHealthParams struct{}

// Validate checks p.
func (p *StoreHealthParams) Validate() error {
	if p == nil {
		return invalidf("store health params are nil")
	}
	return nil
}
