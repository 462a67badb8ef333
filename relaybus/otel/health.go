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

// RecordStatistics records st (from relaybus.Bus.Statistics) as
// gauges: relaybus.queue.deliveries per handler and status (pending,
// processing, dead, completed) and relaybus.queue.oldest_due.age per
// handler. A handler recorded before that st no longer has (its
// deliveries are all gone) is recorded as 0, once. Call it from a
// goroutine of your own at the interval you want the gauges refreshed:
// on PostgreSQL a Statistics call scans the deliveries table unless the
// store's statistics counters are on (postgres.Store.EnableStatisticsCounters),
// so without them keep the interval long on a large backlog.
func (in *Instruments) RecordStatistics(ctx context.Context, st *relaybus.Statistics) {
	if st == nil {
		return
	}
	in.queueMu.Lock()
	defer in.queueMu.Unlock()
	record := func(h string, c relaybus.Counts) {
		for _, s := range []struct {
			status relaybus.Status
			n      int64
		}{{relaybus.StatusPending, c.Pending}, {relaybus.StatusProcessing, c.Processing},
			{relaybus.StatusDead, c.Dead}, {relaybus.StatusCompleted, c.Completed}} {
			in.queueDeliveries.Record(ctx, s.n, metric.WithAttributeSet(attribute.NewSet(AttrHandler.String(h), AttrStatus.String(string(s.status)))))
		}
		in.queueOldestDue.Record(ctx, c.OldestDueAge.Seconds(), metric.WithAttributeSet(attribute.NewSet(AttrHandler.String(h))))
	}
	seen := make(map[string]bool, len(st.Handlers))
	for h, c := range st.Handlers {
		record(h, c)
		seen[h] = true
	}
	for h := range in.queueSeen {
		if !seen[h] {
			record(h, relaybus.Counts{})
		}
	}
	in.queueSeen = seen
}

// RecordStoreHealth records a store health report: give it to
// relaybus.StoreHealthWatch.OnReport. Each gauge takes the report's
// value: the dead rows of the deliveries table, the time since it was
// last vacuumed (not recorded when it never was since the statistics
// began), the HOT share of the lane updates since the previous report
// (not recorded when there was none), and the age of the xmin holder's
// transaction (0 when nothing holds the horizon, or the holder has no
// transaction). Each warning adds one to relaybus.store.health.warnings
// with its check. A report with Statistics (StoreHealthWatch.Statistics)
// records them too, as RecordStatistics does.
func (in *Instruments) RecordStoreHealth(ctx context.Context, r *relaybus.HealthReport) {
	if r == nil || r.Health == nil {
		return
	}
	if r.Statistics != nil {
		in.RecordStatistics(ctx, r.Statistics)
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
