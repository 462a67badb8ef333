package otel

import (
	"context"
	"time"

	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

// WrapStore returns s with the store's side of the metrics: the round
// trip and size of every DeliveryClaim, the leases each LeaseExtend
// renewed or found lost, and the duration of EventPublishTx and
// EventPublish. It is transparent: every call goes to s with the same
// arguments, and returns s's results and errors unchanged (not wrapped).
// If s implements driver.EventPublisher the result does too, and
// otherwise it does not, so Bus.Publish takes the same path on either.
// Other methods of s's concrete type (a store's admin calls) are not on
// the result: call them on s. Give the result to relaybus.New.
func WrapStore[TTx any](s driver.Store[TTx], in *Instruments) driver.Store[TTx] {
	w := &store[TTx]{inner: s, in: in}
	if p, ok := s.(driver.EventPublisher); ok {
		return &publisherStore[TTx]{store: w, publisher: p}
	}
	return w
}

// Unwrap returns the store WrapStore wrapped, or s itself if it is not
// one of WrapStore's.
func Unwrap[TTx any](s driver.Store[TTx]) driver.Store[TTx] {
	switch w := s.(type) {
	case *store[TTx]:
		return w.inner
	case *publisherStore[TTx]:
		return w.inner
	}
	return s
}

// Compile-time checks of both wrappers.
var (
	_ driver.Store[int]     = (*store[int])(nil)
	_ driver.Store[int]     = (*publisherStore[int])(nil)
	_ driver.EventPublisher = (*publisherStore[int])(nil)
)

// store wraps a Store without EventPublisher.
type store[TTx any] struct {
	inner driver.Store[TTx]
	in    *Instruments
}

// publisherStore wraps a Store that is an EventPublisher too.
type publisherStore[TTx any] struct {
	*store[TTx]
	publisher driver.EventPublisher
}

func (s *publisherStore[TTx]) EventPublish(ctx context.Context, params *driver.EventPublishParams) (*driver.EventPublishResult, error) {
	start := time.Now()
	res, err := s.publisher.EventPublish(ctx, params)
	s.in.publishDuration.Record(ctx, time.Since(start).Seconds(), s.in.opt(attrKey{method: "EventPublish", errorType: errorType(err)}))
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
	s.in.publishDuration.Record(ctx, time.Since(start).Seconds(), s.in.opt(attrKey{method: "EventPublishTx", errorType: errorType(err)}))
	return res, err
}

func (s *store[TTx]) DeliveryClaim(ctx context.Context, params *driver.DeliveryClaimParams) ([]*relaytype.Delivery, error) {
	start := time.Now()
	ds, err := s.inner.DeliveryClaim(ctx, params)
	s.in.claimDuration.Record(ctx, time.Since(start).Seconds(), s.in.opt(attrKey{errorType: errorType(err)}))
	// A claim that failed part way returns what it did claim: counted too.
	s.in.claimSize.Record(ctx, int64(len(ds)), s.in.opt(attrKey{}))
	return ds, err
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
		opt := s.in.opt(attrKey{})
		if held > 0 {
			s.in.leaseRenewals.Add(ctx, held, opt)
		}
		if lost > 0 {
			s.in.leasesLost.Add(ctx, lost, opt)
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
