package otel_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/berkcansavur/relaybus/relaybus"
	"github.com/berkcansavur/relaybus/relaybus/driver"
	relaybusotel "github.com/berkcansavur/relaybus/relaybus/otel"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

// wakerPart and healthPart give a stub the driver.Waker and
// driver.HealthReporter capabilities, recording their calls.
type wakerPart struct{ s *stubStore }

func (w wakerPart) WakeListen(_ context.Context, p *driver.WakeListenParams) error {
	w.s.rec("WakeListen", p)
	return w.s.err
}

func (w wakerPart) WakeSend(_ context.Context, p *driver.WakeSendParams) error {
	w.s.rec("WakeSend", p)
	return w.s.err
}

type healthPart struct {
	s *stubStore
	h *relaytype.StoreHealth
}

func (h healthPart) StoreHealth(_ context.Context, p *driver.StoreHealthParams) (*relaytype.StoreHealth, error) {
	h.s.rec("StoreHealth", p)
	return h.h, h.s.err
}

// TestWrapStoreCapabilities: for each combination of the optional
// capabilities (EventPublisher, Waker, HealthReporter), the wrapper has
// exactly those the wrapped store has, each reaches the store with the
// same arguments and returns its results and error as they are, and
// Unwrap gives the store back.
func TestWrapStoreCapabilities(t *testing.T) {
	t.Parallel()
	in, err := relaybusotel.New(&relaybusotel.Options{MeterProvider: noop.NewMeterProvider()})
	require.NoError(t, err)
	ctx := context.Background()
	for mask := range 8 {
		storeErr := errors.New("the store's own error")
		stub := newStub(storeErr)
		pub, wk, hr := publisherStub{stub}, wakerPart{stub}, healthPart{stub, &relaytype.StoreHealth{DeliveriesDeadRows: 3}}
		var s driver.Store[int]
		switch mask {
		case 0:
			s = stub
		case 1:
			s = pub
		case 2:
			s = struct {
				*stubStore
				wakerPart
			}{stub, wk}
		case 3:
			s = struct {
				publisherStub
				wakerPart
			}{pub, wk}
		case 4:
			s = struct {
				*stubStore
				healthPart
			}{stub, hr}
		case 5:
			s = struct {
				publisherStub
				healthPart
			}{pub, hr}
		case 6:
			s = struct {
				*stubStore
				wakerPart
				healthPart
			}{stub, wk, hr}
		case 7:
			s = struct {
				publisherStub
				wakerPart
				healthPart
			}{pub, wk, hr}
		}
		w := relaybusotel.WrapStore(s, in)
		require.Equal(t, s, relaybusotel.Unwrap(w), "mask %d", mask)

		p, isP := w.(driver.EventPublisher)
		require.Equal(t, mask&1 != 0, isP, "mask %d: EventPublisher", mask)
		if isP {
			params := &driver.EventPublishParams{}
			res, err := p.EventPublish(ctx, params)
			require.Same(t, storeErr, err)
			require.Same(t, stub.published, res)
			require.Same(t, params, stub.args[len(stub.args)-1])
		}
		k, isW := w.(driver.Waker)
		require.Equal(t, mask&2 != 0, isW, "mask %d: Waker", mask)
		if isW {
			lp := &driver.WakeListenParams{}
			require.Same(t, storeErr, k.WakeListen(ctx, lp))
			require.Same(t, lp, stub.args[len(stub.args)-1])
			sp := &driver.WakeSendParams{}
			require.Same(t, storeErr, k.WakeSend(ctx, sp))
			require.Same(t, sp, stub.args[len(stub.args)-1])
		}
		h, isH := w.(driver.HealthReporter)
		require.Equal(t, mask&4 != 0, isH, "mask %d: HealthReporter", mask)
		if isH {
			hp := &driver.StoreHealthParams{}
			got, err := h.StoreHealth(ctx, hp)
			require.Same(t, storeErr, err)
			require.Same(t, hr.h, got)
			require.Same(t, hp, stub.args[len(stub.args)-1])
		}
		// The methods every store has still reach it.
		st, err := w.Statistics(ctx, &driver.StatisticsParams{})
		require.Same(t, storeErr, err)
		require.Same(t, stub.stats, st)
	}
	plain := newStub(nil)
	require.Same(t, plain, relaybusotel.Unwrap[int](plain), "not a wrapper: itself")
}

// gauges returns a gauge's value per attribute set.
func gauges[N int64 | float64](t *testing.T, m metricdata.Metrics) map[attribute.Distinct]N {
	t.Helper()
	g, ok := m.Data.(metricdata.Gauge[N])
	require.True(t, ok, "%s is a %T", m.Name, m.Data)
	out := make(map[attribute.Distinct]N)
	for _, dp := range g.DataPoints {
		out[dp.Attributes.Equivalent()] = dp.Value
	}
	return out
}

// TestRecordStoreHealth: each gauge takes the last report's value, the
// vacuum age from the later of the two vacuums, nothing for a vacuum age
// or a HOT share the report does not have, 0 for no xmin holder, and a
// warning count per check.
func TestRecordStoreHealth(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	ctx := context.Background()
	at := time.Date(2031, 1, 1, 12, 0, 0, 0, time.UTC)
	bare := &relaybus.StoreHealth{At: at, DeliveriesDeadRows: 5}
	tb.in.RecordStoreHealth(ctx, &relaybus.HealthReport{Health: bare})
	ms := tb.metrics(t)
	none := attrs()
	require.Equal(t, map[attribute.Distinct]int64{none: 5}, gauges[int64](t, ms[relaybusotel.NameStoreDeadRows]))
	require.Equal(t, map[attribute.Distinct]float64{none: 0}, gauges[float64](t, ms[relaybusotel.NameStoreXminAge]))
	require.NotContains(t, ms, relaybusotel.NameStoreVacuumAge, "never vacuumed: no value")
	require.NotContains(t, ms, relaybusotel.NameStoreLaneHOTShare, "no lane update: no value")
	require.NotContains(t, ms, relaybusotel.NameStoreHealthWarnings)
	require.NotContains(t, ms, relaybusotel.NameQueueDeliveries, "a report without statistics")

	h := &relaybus.StoreHealth{
		At: at, DeliveriesDeadRows: 200_000, DeliveriesLiveRows: 10,
		DeliveriesLastAutovacuum: at.Add(-2 * time.Hour), DeliveriesLastVacuum: at.Add(-90 * time.Minute),
		XminHolder: &relaybus.XminHolder{Kind: relaytype.XminHolderSession, PID: 42, XactStart: at.Add(-time.Hour), Age: time.Hour},
	}
	r, err := relaybus.CheckStoreHealth(h, nil, nil)
	require.NoError(t, err)
	r.LaneUpdates, r.LaneHOTShare = 2_000, 0.5
	r.Statistics = &relaybus.Statistics{Handlers: map[string]relaybus.Counts{"h": {Dead: 3}}}
	tb.in.RecordStoreHealth(ctx, r)
	tb.in.RecordStoreHealth(ctx, nil) // ignored
	ms = tb.metrics(t)
	require.Equal(t, map[attribute.Distinct]int64{none: 200_000}, gauges[int64](t, ms[relaybusotel.NameStoreDeadRows]))
	require.Equal(t, map[attribute.Distinct]float64{none: 90 * 60}, gauges[float64](t, ms[relaybusotel.NameStoreVacuumAge]))
	require.Equal(t, map[attribute.Distinct]float64{none: 0.5}, gauges[float64](t, ms[relaybusotel.NameStoreLaneHOTShare]))
	require.Equal(t, map[attribute.Distinct]float64{none: 3600}, gauges[float64](t, ms[relaybusotel.NameStoreXminAge]))
	check := func(c string) attribute.Distinct { return attrs("relaybus.health.check", c) }
	require.Equal(t, map[attribute.Distinct]int64{
		check(relaybus.HealthCheckDeadRows): 1, check(relaybus.HealthCheckVacuum): 1, check(relaybus.HealthCheckXmin): 1,
	}, sums(t, ms[relaybusotel.NameStoreHealthWarnings]))
	require.EqualValues(t, 3, gauges[int64](t, ms[relaybusotel.NameQueueDeliveries])[attrs("relaybus.handler", "h", "relaybus.delivery.status", "dead")],
		"a report's statistics are recorded")
}

// TestObserveDispatcher: relaybus.dispatcher.in_flight is the bus's
// DispatcherStats.InFlight at collection, with its owner, and stops
// being reported once unregistered.
func TestObserveDispatcher(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	gate := make(chan struct{})
	started := make(chan struct{}, 2)
	require.NoError(t, tb.bus.Handle("t", "h", func(context.Context, *relaybus.Delivery) error {
		started <- struct{}{}
		<-gate
		return nil
	}, nil))
	reg, err := tb.in.ObserveDispatcher(tb.bus)
	require.NoError(t, err)
	owner := attrs("relaybus.owner", "test-owner")
	require.Equal(t, map[attribute.Distinct]int64{owner: 0}, sums(t, tb.metrics(t)[relaybusotel.NameDispatcherInFlight]), "before Start")

	ctx := context.Background()
	require.NoError(t, tb.bus.Publish(ctx, &relaybus.Event{Type: "t"}, &relaybus.Event{Type: "t"}))
	require.NoError(t, tb.bus.Start(ctx))
	<-started
	<-started
	require.Equal(t, map[attribute.Distinct]int64{owner: 2}, sums(t, tb.metrics(t)[relaybusotel.NameDispatcherInFlight]))
	close(gate)
	require.Eventually(t, func() bool { return tb.bus.DispatcherStats().Completed == 2 }, 10*time.Second, time.Millisecond)
	stop, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, tb.bus.Stop(stop))
	require.Equal(t, map[attribute.Distinct]int64{owner: 0}, sums(t, tb.metrics(t)[relaybusotel.NameDispatcherInFlight]))

	require.NoError(t, reg.Unregister())
	require.NotContains(t, tb.metrics(t), relaybusotel.NameDispatcherInFlight)
}

// TestRecordStatistics: relaybus.queue.deliveries takes each handler's
// count per status, relaybus.queue.oldest_due.age its oldest due age,
// and a handler that left the statistics reads 0.
func TestRecordStatistics(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	ctx := context.Background()
	tb.in.RecordStatistics(ctx, &relaybus.Statistics{Handlers: map[string]relaybus.Counts{
		"a": {Pending: 7, Processing: 2, Dead: 1, OldestDueAge: 90 * time.Second},
		"b": {Completed: 4},
	}})
	tb.in.RecordStatistics(ctx, nil) // ignored
	ms := tb.metrics(t)
	st := func(h string, s relaybus.Status) attribute.Distinct {
		return attrs("relaybus.handler", h, "relaybus.delivery.status", string(s))
	}
	h := func(h string) attribute.Distinct { return attrs("relaybus.handler", h) }
	require.Equal(t, map[attribute.Distinct]int64{
		st("a", relaybus.StatusPending): 7, st("a", relaybus.StatusProcessing): 2, st("a", relaybus.StatusDead): 1, st("a", relaybus.StatusCompleted): 0,
		st("b", relaybus.StatusPending): 0, st("b", relaybus.StatusProcessing): 0, st("b", relaybus.StatusDead): 0, st("b", relaybus.StatusCompleted): 4,
	}, gauges[int64](t, ms[relaybusotel.NameQueueDeliveries]))
	require.Equal(t, map[attribute.Distinct]float64{h("a"): 90, h("b"): 0}, gauges[float64](t, ms[relaybusotel.NameQueueOldestDue]))

	tb.in.RecordStatistics(ctx, &relaybus.Statistics{Handlers: map[string]relaybus.Counts{"b": {Pending: 1}}})
	ms = tb.metrics(t)
	got := gauges[int64](t, ms[relaybusotel.NameQueueDeliveries])
	require.EqualValues(t, 0, got[st("a", relaybus.StatusPending)], "a handler that left reads 0")
	require.EqualValues(t, 0, got[st("a", relaybus.StatusDead)])
	require.EqualValues(t, 1, got[st("b", relaybus.StatusPending)])
	require.Equal(t, map[attribute.Distinct]float64{h("a"): 0, h("b"): 0}, gauges[float64](t, ms[relaybusotel.NameQueueOldestDue]))
}
