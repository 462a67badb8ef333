package otel

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

// WrapStore returns s with the store's side of the metrics: the round
// trip and size of every DeliveryClaim, the leases each LeaseExtend
// renewed or found lost, and the duration of EventPublishTx and
// EventPublish. It is transparent: every call goes to s with the same
// arguments, and returns s's results and errors unchanged (not wrapped).
// The result has each optional capability of the driver package
// (driver.EventPublisher, driver.Waker, driver.HealthReporter) exactly
// when s has it, so the Bus takes the same paths on either. Other methods
// of s's concrete type (a store's admin calls) are not on the result:
// call them on s. Give the result to relaybus.New.
func WrapStore[TTx any](s driver.Store[TTx], in *Instruments) driver.Store[TTx] {
	w := &store[TTx]{inner: s, in: in}
	p, isP := s.(driver.EventPublisher)
	k, isW := s.(driver.Waker)
	h, isH := s.(driver.HealthReporter)
	pub := &publisher{p: p, in: in}
	wk := &waker{k}
	hr := &healthReporter{h}
	// One type per combination: a type assertion on the result must find
	// a capability exactly when s has it.
	switch {
	case isP && isW && isH:
		return &struct {
			*store[TTx]
			*publisher
			*waker
			*healthReporter
		}{w, pub, wk, hr}
	case isP && isW:
		return &struct {
			*store[TTx]
			*publisher
			*waker
		}{w, pub, wk}
	case isP && isH:
		return &struct {
			*store[TTx]
			*publisher
			*healthReporter
		}{w, pub, hr}
	case isW && isH:
		return &struct {
			*store[TTx]
			*waker
			*healthReporter
		}{w, wk, hr}
	case isP:
		return &struct {
			*store[TTx]
			*publisher
		}{w, pub}
	case isW:
		return &struct {
			*store[TTx]
			*waker
		}{w, wk}
	case isH:
		return &struct {
			*store[TTx]
			*healthReporter
		}{w, hr}
	}
	return w
}

// Unwrap returns the store WrapStore wrapped, or s itself if it is not
// one of WrapStore's.
func Unwrap[TTx any](s driver.Store[TTx]) driver.Store[TTx] {
	if w, ok := s.(interface{ wrapped() driver.Store[TTx] }); ok {
		return w.wrapped()
	}
	return s
}

// errNoCompletingClaims is DeliveryCompleteClaim's error when the wrapped
// store has no such call (ClaimsCompletions reports false then, and a Bus
// never makes it).
var errNoCompletingClaims = fmt.Errorf("relaybus/otel: the wrapped store does not complete and claim in one call: %w", errors.ErrUnsupported)

// Compile-time checks of the parts the wrappers are made of.
var (
	_ driver.Store[int]        = (*store[int])(nil)
	_ driver.EventPublisher    = (*publisher)(nil)
	_ driver.Waker             = (*waker)(nil)
	_ driver.HealthReporter    = (*healthReporter)(nil)
	_ driver.CompletingClaimer = (*store[int])(nil)
)

// store wraps a Store: the methods every store has.
type store[TTx any] struct {
	inner driver.Store[TTx]
	in    *Instruments
}

// wrapped is what Unwrap returns (promoted to every combination).
func (s *store[TTx]) wrapped() driver.Store[TTx] { return s.inner }

// ClaimsKeyRuns reports whether the wrapped store honours
// driver.DeliveryClaimParams.KeyRuns (driver.KeyRunClaimer); the claim
// passes them through unchanged.
func (s *store[TTx]) ClaimsKeyRuns() bool { return driver.ClaimsKeyRuns(s.inner) }

// publisher is the driver.EventPublisher of a wrapped store that has it.
type publisher struct {
	p  driver.EventPublisher
	in *Instruments
}

// waker is the driver.Waker of a wrapped store that has it: passed
// through, unmeasured.
type waker struct{ w driver.Waker }

func (w *waker) WakeListen(ctx context.Context, params *driver.WakeListenParams) error {
	return w.w.WakeListen(ctx, params)
}

func (w *waker) WakeSend(ctx context.Context, params *driver.WakeSendParams) error {
	return w.w.WakeSend(ctx, params)
}

// healthReporter is the driver.HealthReporter of a wrapped store that
// has it: passed through (Instruments.RecordStoreHealth records what the
// Bus's watch reads).
type healthReporter struct{ h driver.HealthReporter }

func (h *healthReporter) StoreHealth(ctx context.Context, params *driver.StoreHealthParams) (*relaytype.StoreHealth, error) {
	return h.h.StoreHealth(ctx, params)
}

func (s *publisher) EventPublish(ctx context.Context, params *driver.EventPublishParams) (*driver.EventPublishResult, error) {
	start := time.Now()
	res, err := s.p.EventPublish(ctx, params)
	o := s.in.publishOK
	if err != nil {
		o = s.in.opts(attrKey{method: "EventPublish", errorType: errorType(err)})
	}
	s.in.publishDuration.Record(ctx, time.Since(start).Seconds(), o.rec...)
	return res, err
}

func (s *store[TTx]) Setup(ctx context.Context) error { return s.inner.Setup(ctx) }

func (s *store[TTx]) TxBegin(ctx context.Context) (TTx, error) { return s.inner.TxBegin(ctx) }

func (s *store[TTx]) TxCommit(ctx context.Context, tx TTx) error { return s.inner.TxCommit(ctx, tx) }

func (s *store[TTx]) TxRollback(ctx context.Context, tx TTx) error {
	return s.inner.TxRollback(ctx, tx)
}

func (s *store[TTx]) EventPublishTx(ctx context.Context, tx TTx, params *driver.EventPublishParams) (*driver.EventPublishResult, error) {
	start := time.Now()
	res, err := s.inner.EventPublishTx(ctx, tx, params)
	o := s.in.publishTxOK
	if err != nil {
		o = s.in.opts(attrKey{method: "EventPublishTx", errorType: errorType(err)})
	}
	s.in.publishDuration.Record(ctx, time.Since(start).Seconds(), o.rec...)
	return res, err
}

func (s *store[TTx]) DeliveryClaim(ctx context.Context, params *driver.DeliveryClaimParams) ([]*relaytype.Delivery, error) {
	start := time.Now()
	ds, err := s.inner.DeliveryClaim(ctx, params)
	o := s.in.none
	if err != nil {
		o = s.in.opts(attrKey{errorType: errorType(err)})
	}
	s.in.claimDuration.Record(ctx, time.Since(start).Seconds(), o.rec...)
	// A claim that failed part way returns what it did claim: counted too.
	s.in.claimSize.Record(ctx, int64(len(ds)), s.in.none.rec...)
	return ds, err
}

// ClaimsCompletions reports whether the wrapped store completes and
// claims in one transaction (driver.CompletingClaimer).
func (s *store[TTx]) ClaimsCompletions() bool { return driver.ClaimsCompletions(s.inner) }

// DeliveryCompleteClaim passes the call to the wrapped store, measured as
// a claim (its round trip and size).
func (s *store[TTx]) DeliveryCompleteClaim(ctx context.Context, params *driver.DeliveryCompleteClaimParams) (*driver.DeliveryCompleteClaimResult, error) {
	c, ok := s.inner.(driver.CompletingClaimer)
	if !ok {
		return nil, errNoCompletingClaims
	}
	start := time.Now()
	res, err := c.DeliveryCompleteClaim(ctx, params)
	o := s.in.none
	if err != nil {
		o = s.in.opts(attrKey{errorType: errorType(err)})
	}
	s.in.claimDuration.Record(ctx, time.Since(start).Seconds(), o.rec...)
	var n int
	if res != nil {
		n = len(res.Claimed)
	}
	s.in.claimSize.Record(ctx, int64(n), s.in.none.rec...)
	return res, err
}

func (s *store[TTx]) LeaseExtend(ctx context.Context, params *driver.LeaseExtendParams) ([]bool, error) {
	oks, err := s.inner.LeaseExtend(ctx, params)
	if err == nil {
		var held, lost int64
		for _, ok := range oks {
			if ok {
				held++
			} else {
				lost++
			}
		}
		if held > 0 {
			s.in.leaseRenewals.Add(ctx, held, s.in.none.add...)
		}
		if lost > 0 {
			s.in.leasesLost.Add(ctx, lost, s.in.none.add...)
		}
	}
	return oks, err
}

func (s *store[TTx]) DeliveryComplete(ctx context.Context, params *driver.DeliveryCompleteParams) (bool, error) {
	return s.inner.DeliveryComplete(ctx, params)
}

func (s *store[TTx]) DeliveryCompleteMany(ctx context.Context, params *driver.DeliveryCompleteManyParams) ([]bool, error) {
	return s.inner.DeliveryCompleteMany(ctx, params)
}

func (s *store[TTx]) DeliveryCompleteTx(ctx context.Context, tx TTx, params *driver.DeliveryCompleteParams) (bool, error) {
	return s.inner.DeliveryCompleteTx(ctx, tx, params)
}

func (s *store[TTx]) DeliveryReschedule(ctx context.Context, params *driver.DeliveryRescheduleParams) (bool, error) {
	return s.inner.DeliveryReschedule(ctx, params)
}

func (s *store[TTx]) DeliveryBury(ctx context.Context, params *driver.DeliveryBuryParams) (bool, error) {
	return s.inner.DeliveryBury(ctx, params)
}

func (s *store[TTx]) DeliveryRelease(ctx context.Context, params *driver.DeliveryReleaseParams) (bool, error) {
	return s.inner.DeliveryRelease(ctx, params)
}

func (s *store[TTx]) OwnerRelinquish(ctx context.Context, params *driver.OwnerRelinquishParams) (int, error) {
	return s.inner.OwnerRelinquish(ctx, params)
}

func (s *store[TTx]) DeliveryRequeue(ctx context.Context, params *driver.DeliveryRequeueParams) error {
	return s.inner.DeliveryRequeue(ctx, params)
}

func (s *store[TTx]) DeliveryList(ctx context.Context, params *driver.DeliveryListParams) (*driver.DeliveryListResult, error) {
	return s.inner.DeliveryList(ctx, params)
}

func (s *store[TTx]) Statistics(ctx context.Context, params *driver.StatisticsParams) (*relaytype.Statistics, error) {
	return s.inner.Statistics(ctx, params)
}

func (s *store[TTx]) Purge(ctx context.Context, params *driver.PurgeParams) (*driver.PurgeResult, error) {
	return s.inner.Purge(ctx, params)
}

func (s *store[TTx]) HandlerPause(ctx context.Context, params *driver.HandlerPauseParams) error {
	return s.inner.HandlerPause(ctx, params)
}

func (s *store[TTx]) HandlerResume(ctx context.Context, params *driver.HandlerResumeParams) (bool, error) {
	return s.inner.HandlerResume(ctx, params)
}

func (s *store[TTx]) HandlersPaused(ctx context.Context, params *driver.HandlersPausedParams) ([]relaytype.PausedHandler, error) {
	return s.inner.HandlersPaused(ctx, params)
}
