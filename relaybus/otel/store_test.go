package otel_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/berkcansavur/relaybus/relaybus"
	"github.com/berkcansavur/relaybus/relaybus/driver"
	relaybusotel "github.com/berkcansavur/relaybus/relaybus/otel"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

// stubStore returns fixed results, or err from every method, and records
// the arguments it got.
type stubStore struct {
	err   error
	tx    int
	calls []string
	args  []any

	published  *driver.EventPublishResult
	claimed    []*relaytype.Delivery
	oks        []bool
	list       *driver.DeliveryListResult
	stats      *relaytype.Statistics
	purged     *driver.PurgeResult
	pausedList []relaytype.PausedHandler
}

func newStub(err error) *stubStore {
	return &stubStore{
		err: err, tx: 7,
		published:  &driver.EventPublishResult{Inserted: []bool{true}},
		claimed:    []*relaytype.Delivery{{ID: "d1"}, {ID: "d2"}},
		pausedList: []relaytype.PausedHandler{{Handler: "h", Reason: "stub"}},
		oks:        []bool{true, false, true},
		list:       &driver.DeliveryListResult{Next: "n"},
		stats:      &relaytype.Statistics{},
		purged:     &driver.PurgeResult{Events: 3},
	}
}

func (s *stubStore) rec(name string, arg any) {
	s.calls = append(s.calls, name)
	s.args = append(s.args, arg)
}

func (s *stubStore) Setup(context.Context) error { s.rec("Setup", nil); return s.err }
func (s *stubStore) TxBegin(context.Context) (int, error) {
	s.rec("TxBegin", nil)
	return s.tx, s.err
}
func (s *stubStore) TxCommit(_ context.Context, tx int) error { s.rec("TxCommit", tx); return s.err }
func (s *stubStore) TxRollback(_ context.Context, tx int) error {
	s.rec("TxRollback", tx)
	return s.err
}
func (s *stubStore) EventPublishTx(_ context.Context, _ int, p *driver.EventPublishParams) (*driver.EventPublishResult, error) {
	s.rec("EventPublishTx", p)
	return s.published, s.err
}
func (s *stubStore) DeliveryClaim(_ context.Context, p *driver.DeliveryClaimParams) ([]*relaytype.Delivery, error) {
	s.rec("DeliveryClaim", p)
	return s.claimed, s.err // a partial claim: deliveries and an error
}
func (s *stubStore) LeaseExtend(_ context.Context, p *driver.LeaseExtendParams) ([]bool, error) {
	s.rec("LeaseExtend", p)
	return s.oks, s.err
}
func (s *stubStore) DeliveryComplete(_ context.Context, p *driver.DeliveryCompleteParams) (bool, error) {
	s.rec("DeliveryComplete", p)
	return true, s.err
}
func (s *stubStore) DeliveryCompleteMany(_ context.Context, p *driver.DeliveryCompleteManyParams) ([]bool, error) {
	s.rec("DeliveryCompleteMany", p)
	return s.oks, s.err
}
func (s *stubStore) DeliveryCompleteTx(_ context.Context, _ int, p *driver.DeliveryCompleteParams) (bool, error) {
	s.rec("DeliveryCompleteTx", p)
	return true, s.err
}
func (s *stubStore) DeliveryReschedule(_ context.Context, p *driver.DeliveryRescheduleParams) (bool, error) {
	s.rec("DeliveryReschedule", p)
	return true, s.err
}
func (s *stubStore) DeliveryBury(_ context.Context, p *driver.DeliveryBuryParams) (bool, error) {
	s.rec("DeliveryBury", p)
	return true, s.err
}
func (s *stubStore) DeliveryRelease(_ context.Context, p *driver.DeliveryReleaseParams) (bool, error) {
	s.rec("DeliveryRelease", p)
	return true, s.err
}
func (s *stubStore) OwnerRelinquish(_ context.Context, p *driver.OwnerRelinquishParams) (int, error) {
	s.rec("OwnerRelinquish", p)
	return 5, s.err
}
func (s *stubStore) DeliveryRequeue(_ context.Context, p *driver.DeliveryRequeueParams) error {
	s.rec("DeliveryRequeue", p)
	return s.err
}
func (s *stubStore) DeliveryList(_ context.Context, p *driver.DeliveryListParams) (*driver.DeliveryListResult, error) {
	s.rec("DeliveryList", p)
	return s.list, s.err
}
func (s *stubStore) Statistics(_ context.Context, p *driver.StatisticsParams) (*relaytype.Statistics, error) {
	s.rec("Statistics", p)
	return s.stats, s.err
}
func (s *stubStore) Purge(_ context.Context, p *driver.PurgeParams) (*driver.PurgeResult, error) {
	s.rec("Purge", p)
	return s.purged, s.err
}
func (s *stubStore) HandlerPause(_ context.Context, p *driver.HandlerPauseParams) error {
	s.rec("HandlerPause", p)
	return s.err
}
func (s *stubStore) HandlerResume(_ context.Context, p *driver.HandlerResumeParams) (bool, error) {
	s.rec("HandlerResume", p)
	return true, s.err
}
func (s *stubStore) HandlersPaused(_ context.Context, p *driver.HandlersPausedParams) ([]relaytype.PausedHandler, error) {
	s.rec("HandlersPaused", p)
	return s.pausedList, s.err
}

// publisherStub is a stubStore with EventPublisher.
type publisherStub struct{ *stubStore }

func (s publisherStub) EventPublish(_ context.Context, p *driver.EventPublishParams) (*driver.EventPublishResult, error) {
	s.rec("EventPublish", p)
	return s.published, s.err
}

// TestWrapStoreTransparent: every method reaches the wrapped store with
// the same arguments and returns its results and its error as they are,
// with or without an error.
func TestWrapStoreTransparent(t *testing.T) {
	t.Parallel()
	for _, storeErr := range []error{nil, errors.New("database on fire")} {
		in, err := relaybusotel.New(&relaybusotel.Options{MeterProvider: noop.NewMeterProvider()})
		require.NoError(t, err)
		stub := newStub(storeErr)
		w := relaybusotel.WrapStore[int](stub, in)
		ctx := context.Background()
		same := func(gotErr error) {
			t.Helper()
			require.Equal(t, storeErr, gotErr) // the very error, not wrapped
		}

		same(w.Setup(ctx))
		tx, err := w.TxBegin(ctx)
		same(err)
		require.Equal(t, 7, tx)
		same(w.TxCommit(ctx, 8))
		same(w.TxRollback(ctx, 9))
		pp := &driver.EventPublishParams{}
		pr, err := w.EventPublishTx(ctx, 3, pp)
		same(err)
		require.Same(t, stub.published, pr)
		cp := &driver.DeliveryClaimParams{Owner: "o"}
		ds, err := w.DeliveryClaim(ctx, cp)
		same(err)
		require.Equal(t, stub.claimed, ds)
		lp := &driver.LeaseExtendParams{}
		oks, err := w.LeaseExtend(ctx, lp)
		same(err)
		require.Equal(t, stub.oks, oks)
		completeP := &driver.DeliveryCompleteParams{}
		ok, err := w.DeliveryComplete(ctx, completeP)
		same(err)
		require.True(t, ok)
		manyP := &driver.DeliveryCompleteManyParams{}
		oks, err = w.DeliveryCompleteMany(ctx, manyP)
		same(err)
		require.Equal(t, stub.oks, oks)
		ok, err = w.DeliveryCompleteTx(ctx, 4, completeP)
		same(err)
		require.True(t, ok)
		rp := &driver.DeliveryRescheduleParams{}
		ok, err = w.DeliveryReschedule(ctx, rp)
		same(err)
		require.True(t, ok)
		bp := &driver.DeliveryBuryParams{}
		ok, err = w.DeliveryBury(ctx, bp)
		same(err)
		require.True(t, ok)
		relP := &driver.DeliveryReleaseParams{}
		ok, err = w.DeliveryRelease(ctx, relP)
		same(err)
		require.True(t, ok)
		op := &driver.OwnerRelinquishParams{}
		n, err := w.OwnerRelinquish(ctx, op)
		same(err)
		require.Equal(t, 5, n)
		qp := &driver.DeliveryRequeueParams{}
		same(w.DeliveryRequeue(ctx, qp))
		listP := &driver.DeliveryListParams{}
		lr, err := w.DeliveryList(ctx, listP)
		same(err)
		require.Same(t, stub.list, lr)
		sp := &driver.StatisticsParams{}
		st, err := w.Statistics(ctx, sp)
		same(err)
		require.Same(t, stub.stats, st)
		purgeP := &driver.PurgeParams{}
		pur, err := w.Purge(ctx, purgeP)
		same(err)
		require.Same(t, stub.purged, pur)
		pauseP := &driver.HandlerPauseParams{}
		same(w.HandlerPause(ctx, pauseP))
		resumeP := &driver.HandlerResumeParams{}
		ok, err = w.HandlerResume(ctx, resumeP)
		same(err)
		require.True(t, ok)
		pausedP := &driver.HandlersPausedParams{}
		pl, err := w.HandlersPaused(ctx, pausedP)
		same(err)
		require.Equal(t, stub.pausedList, pl)

		require.Equal(t, []string{"Setup", "TxBegin", "TxCommit", "TxRollback", "EventPublishTx", "DeliveryClaim",
			"LeaseExtend", "DeliveryComplete", "DeliveryCompleteMany", "DeliveryCompleteTx", "DeliveryReschedule",
			"DeliveryBury", "DeliveryRelease", "OwnerRelinquish", "DeliveryRequeue", "DeliveryList", "Statistics", "Purge",
			"HandlerPause", "HandlerResume", "HandlersPaused"}, stub.calls)
		require.Equal(t, []any{nil, nil, 8, 9, pp, cp, lp, completeP, manyP, completeP, rp, bp, relP, op, qp, listP, sp, purgeP,
			pauseP, resumeP, pausedP}, stub.args,
			"the same arguments, the same pointers")
		require.Same(t, stub, relaybusotel.Unwrap(w))
	}
}

// TestWrapStoreEventPublisher: the wrapper is an EventPublisher exactly
// when the wrapped store is one, its EventPublish reaches the store's
// and is measured, and Bus.Publish takes the store's path either way.
func TestWrapStoreEventPublisher(t *testing.T) {
	t.Parallel()
	reader := sdkmetric.NewManualReader()
	in, err := relaybusotel.New(&relaybusotel.Options{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))})
	require.NoError(t, err)

	plain := relaybusotel.WrapStore[int](newStub(nil), in)
	_, isPublisher := plain.(driver.EventPublisher)
	require.False(t, isPublisher, "no EventPublisher added")

	failing := errors.New("write conflict")
	stub := newStub(failing)
	w := relaybusotel.WrapStore[int](publisherStub{stub}, in)
	p, isPublisher := w.(driver.EventPublisher)
	require.True(t, isPublisher, "EventPublisher kept")
	require.Equal(t, publisherStub{stub}, relaybusotel.Unwrap(w))
	params := &driver.EventPublishParams{}
	res, err := p.EventPublish(context.Background(), params)
	require.Same(t, failing, err)
	require.Same(t, stub.published, res)

	bus, err := relaybus.New(w, relaybus.Config{})
	require.NoError(t, err)
	require.NoError(t, bus.Declare("t", "h", nil))
	stub.calls = nil
	err = bus.Publish(context.Background(), &relaytype.Event{Type: "t"})
	require.ErrorIs(t, err, failing)
	require.Equal(t, []string{"EventPublish"}, stub.calls, "Bus.Publish used the store's EventPublish, no transaction of its own")

	tb := &bundle{reader: reader}
	ms := tb.metrics(t)
	other := attrs("relaybus.store.method", "EventPublish", "error.type", "_OTHER")
	require.Equal(t, map[attribute.Distinct]uint64{other: 2}, counts(t, ms["relaybus.publish.duration"]))
	require.NotContains(t, ms, "relaybus.claim.duration", "no claim made")
}

// completingStub is a stub that completes and claims in one call
// (driver.CompletingClaimer), when it says it does.
type completingStub struct {
	*stubStore
	claims bool
}

func (s completingStub) ClaimsCompletions() bool { return s.claims }

func (s completingStub) DeliveryCompleteClaim(_ context.Context, p *driver.DeliveryCompleteClaimParams) (*driver.DeliveryCompleteClaimResult, error) {
	s.rec("DeliveryCompleteClaim", p)
	return &driver.DeliveryCompleteClaimResult{Completed: s.oks, Claimed: s.claimed}, s.err
}

// TestWrapStoreCompletingClaimer: the wrapper reports the wrapped store's
// ClaimsCompletions, passes DeliveryCompleteClaim through with its
// results and error, and measures it as a claim; over a store without
// the call it reports false and the call fails as unsupported.
func TestWrapStoreCompletingClaimer(t *testing.T) {
	t.Parallel()
	reader := sdkmetric.NewManualReader()
	in, err := relaybusotel.New(&relaybusotel.Options{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))})
	require.NoError(t, err)

	plain := relaybusotel.WrapStore[int](newStub(nil), in)
	require.False(t, driver.ClaimsCompletions(plain), "a store without DeliveryCompleteClaim")
	_, err = plain.(driver.CompletingClaimer).DeliveryCompleteClaim(context.Background(), &driver.DeliveryCompleteClaimParams{})
	require.ErrorIs(t, err, errors.ErrUnsupported)
	require.False(t, driver.ClaimsCompletions(relaybusotel.WrapStore[int](completingStub{newStub(nil), false}, in)),
		"a store that has the call but says it cannot make it")

	failing := errors.New("claim failed after the completions")
	stub := newStub(failing)
	w := relaybusotel.WrapStore[int](completingStub{stub, true}, in)
	require.True(t, driver.ClaimsCompletions(w))
	params := &driver.DeliveryCompleteClaimParams{}
	res, err := w.(driver.CompletingClaimer).DeliveryCompleteClaim(context.Background(), params)
	require.Same(t, failing, err)
	require.Equal(t, stub.oks, res.Completed)
	require.Equal(t, stub.claimed, res.Claimed)
	require.Equal(t, []string{"DeliveryCompleteClaim"}, stub.calls)
	require.Equal(t, []any{params}, stub.args)

	tb := &bundle{reader: reader}
	ms := tb.metrics(t)
	require.Equal(t, map[attribute.Distinct]uint64{attrs("error.type", "_OTHER"): 1}, counts(t, ms["relaybus.claim.duration"]))
	size, ok := ms["relaybus.claim.size"].Data.(metricdata.Histogram[int64])
	require.True(t, ok)
	require.Len(t, size.DataPoints, 1)
	require.EqualValues(t, 1, size.DataPoints[0].Count)
	require.EqualValues(t, len(stub.claimed), size.DataPoints[0].Sum, "the claim's size: what it claimed")
}
