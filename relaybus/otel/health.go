package otel

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/berkcansavur/relaybus/relaybus"
)

// Dispatcher is what ObserveDispatcher reads: a *relaybus.Bus, of any
// transaction type.
type Dispatcher interface {
	Owner() string
	DispatcherStats() relaybus.DispatcherStats
}

// ObserveDispatcher reports bus's DispatcherStats.InFlight as
// relaybus.dispatcher.in_flight, with the bus's owner as
// relaybus.owner, at every collection, until the registration it returns
// is unregistered. Call it once per bus (two registrations of buses with
// one owner would report the same series twice).
func (in *Instruments) ObserveDispatcher(bus Dispatcher) (metric.Registration, error) {
	opt := metric.WithAttributeSet(attribute.NewSet(AttrOwner.String(bus.Owner())))
	return in.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		o.ObserveInt64(in.inFlight, bus.DispatcherStats().InFlight, opt)
		return nil
	}, in.inFlight)
}

// RecordStoreHealth records a store health report: give it to
// relaybus.StoreHealthWatch.OnReport. Each gauge takes the report's
// value: the dead rows of the deliveries table, the time since it was
// last vacuumed (not recorded when it never was since the statistics
// began), the HOT share of the lane updates since the previous report
// (not recorded when there was none), and the age of the xmin holder's
// transaction (0 when nothing holds the horizon, or the holder has no
// transaction). Each warning adds one to relaybus.store.health.warnings
// with its check.
func (in *Instruments) RecordStoreHealth(ctx context.Context, r *relaybus.HealthReport) {
	if r == nil || r.Health == nil {
		return
	}
	h := r.Health
	none := in.none.rec
	in.storeDeadRows.Record(ctx, h.DeliveriesDeadRows, none...)
	last := h.DeliveriesLastAutovacuum
	if h.DeliveriesLastVacuum.After(last) {
		last = h.DeliveriesLastVacuum
	}
	if !last.IsZero() {
		in.storeVacuumAge.Record(ctx, max(h.At.Sub(last).Seconds(), 0), none...)
	}
	if r.LaneUpdates > 0 {
		in.storeLaneHOTShare.Record(ctx, r.LaneHOTShare, none...)
	}
	var xmin float64
	if h.XminHolder != nil {
		xmin = h.XminHolder.Age.Seconds()
	}
	in.storeXminAge.Record(ctx, xmin, none...)
	for _, w := range r.Warnings {
		in.storeHealthWarnings.Add(ctx, 1, metric.WithAttributeSet(attribute.NewSet(AttrHealthCheck.String(w.Check))))
	}
}
