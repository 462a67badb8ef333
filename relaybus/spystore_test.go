package relaybus

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

// spyStore wraps a Store, counts the calls the dispatcher makes and lets a
// test inject failures. Hooks run before the wrapped call; a non-nil error
// from a hook is returned instead of calling the store.
type spyStore[TTx any] struct {
	Store[TTx]

	mu             sync.Mutex
	claimCalls     int
	completeCalls  int
	completeMany   []int // sizes of DeliveryCompleteMany calls
	completeMCalls []completeCall
	extendCalls    int
	extended       [][]relaytype.Lease // the leases of each LeaseExtend call
	reschedules    []driver.DeliveryRescheduleParams
	releases       int
	relinquishes   int
	claimHook      func(n int) error // n: 1-based claim call number
	afterClaim     func(ds []*Delivery)
	// claimCtxErrs: the claim context's Err when each claim reached the
	// store (after claimHook).
	claimCtxErrs   []error
	completeMHook  func(n int) error // n: 1-based DeliveryCompleteMany call number
	completeTxHook func()
}

// completeCall is one DeliveryCompleteMany call: when it began, and with
// which leases.
type completeCall struct {
	at     time.Time
	leases []relaytype.Lease
	// deadline is the call's context's (zero: none).
	deadline time.Time
}

func spy[TTx any](s Store[TTx]) *spyStore[TTx] { return &spyStore[TTx]{Store: s} }

func (s *spyStore[TTx]) DeliveryClaim(ctx context.Context, p *driver.DeliveryClaimParams) ([]*Delivery, error) {
	s.mu.Lock()
	s.claimCalls++
	n, hook, after := s.claimCalls, s.claimHook, s.afterClaim
	s.mu.Unlock()
	if hook != nil {
		if err := hook(n); err != nil {
			return nil, err
		}
	}
	s.mu.Lock()
	s.claimCtxErrs = append(s.claimCtxErrs, ctx.Err())
	s.mu.Unlock()
	ds, err := s.Store.DeliveryClaim(ctx, p)
	if err == nil && after != nil && len(ds) > 0 {
		after(ds)
	}
	return ds, err
}

func (s *spyStore[TTx]) DeliveryComplete(ctx context.Context, p *driver.DeliveryCompleteParams) (bool, error) {
	s.mu.Lock()
	s.completeCalls++
	s.mu.Unlock()
	return s.Store.DeliveryComplete(ctx, p)
}

func (s *spyStore[TTx]) DeliveryCompleteMany(ctx context.Context, p *driver.DeliveryCompleteManyParams) ([]bool, error) {
	s.mu.Lock()
	s.completeMany = append(s.completeMany, len(p.Leases))
	dl, _ := ctx.Deadline()
	s.completeMCalls = append(s.completeMCalls, completeCall{at: time.Now(), leases: slices.Clone(p.Leases), deadline: dl})
	n, hook := len(s.completeMany), s.completeMHook
	s.mu.Unlock()
	if hook != nil {
		if err := hook(n); err != nil {
			return nil, err
		}
	}
	return s.Store.DeliveryCompleteMany(ctx, p)
}

func (s *spyStore[TTx]) DeliveryCompleteTx(ctx context.Context, tx TTx, p *driver.DeliveryCompleteParams) (bool, error) {
	s.mu.Lock()
	hook := s.completeTxHook
	s.mu.Unlock()
	if hook != nil {
		hook()
	}
	return s.Store.DeliveryCompleteTx(ctx, tx, p)
}

func (s *spyStore[TTx]) LeaseExtend(ctx context.Context, p *driver.LeaseExtendParams) ([]bool, error) {
	s.mu.Lock()
	s.extendCalls++
	s.extended = append(s.extended, slices.Clone(p.Leases))
	s.mu.Unlock()
	return s.Store.LeaseExtend(ctx, p)
}

func (s *spyStore[TTx]) DeliveryReschedule(ctx context.Context, p *driver.DeliveryRescheduleParams) (bool, error) {
	s.mu.Lock()
	s.reschedules = append(s.reschedules, *p)
	s.mu.Unlock()
	return s.Store.DeliveryReschedule(ctx, p)
}

func (s *spyStore[TTx]) DeliveryRelease(ctx context.Context, p *driver.DeliveryReleaseParams) (bool, error) {
	s.mu.Lock()
	s.releases++
	s.mu.Unlock()
	return s.Store.DeliveryRelease(ctx, p)
}

func (s *spyStore[TTx]) OwnerRelinquish(ctx context.Context, p *driver.OwnerRelinquishParams) (int, error) {
	s.mu.Lock()
	s.relinquishes++
	s.mu.Unlock()
	return s.Store.OwnerRelinquish(ctx, p)
}

// with runs f under the spy's lock, to read its counters.
func (s *spyStore[TTx]) with(f func(s *spyStore[TTx])) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s)
}
