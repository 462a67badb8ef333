package memory

// The lease writes: renewal, the final writes of an attempt, relinquish.

import (
	"context"
	"fmt"
	"time"

	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/internal/decimal"
	"github.com/berkcansavur/relaybus/relaybus/internal/decimallease"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

// leave takes d out of its lane's in-flight list.
func (s *Store) leave(d *delivery) {
	delete(s.lanes[d.lane].inFlight, d.id)
	s.setInFlight(d, false)
}

// LeaseExtend implements driver.Store: it moves the expiry of the lanes
// of the leases that are current (the delivery is in flight in the
// token's lane, at its epoch, under its claims) and whose lane
// (params.Owner, this store) holds. A lease that is not current extends
// nothing, not even a lane its owner holds.
func (s *Store) LeaseExtend(ctx context.Context, params *driver.LeaseExtendParams) ([]bool, error) {
	if err := params.Validate(); err != nil {
		return nil, err
	}
	ls, err := parseLeases("extend", params.Leases)
	if err != nil {
		return nil, err
	}
	expiresAt := params.ExpiresAt.Round(0)
	return s.writeCurrent(ctx, ls, func(pl lease, _ *delivery) bool {
		l := &s.lanes[pl.Token.Lane]
		if l.owner != params.Owner || l.holder != s.holder {
			return false
		}
		l.expiresAt = expiresAt
		return true
	})
}

// DeliveryComplete implements driver.Store.
func (s *Store) DeliveryComplete(ctx context.Context, params *driver.DeliveryCompleteParams) (bool, error) {
	if err := params.Validate(); err != nil {
		return false, err
	}
	return s.fenced(ctx, "complete", params.Lease, func(d *delivery) { s.complete(d, params.Now.Round(0)) })
}

// DeliveryCompleteMany implements driver.Store. Every lease is parsed
// before anything is written.
func (s *Store) DeliveryCompleteMany(ctx context.Context, params *driver.DeliveryCompleteManyParams) ([]bool, error) {
	if err := params.Validate(); err != nil {
		return nil, err
	}
	ls, err := parseLeases("complete", params.Leases)
	if err != nil {
		return nil, err
	}
	now := params.Now.Round(0)
	return s.writeCurrent(ctx, ls, func(_ lease, d *delivery) bool { s.complete(d, now); return true })
}

// DeliveryReschedule implements driver.Store. The failed attempt is
// charged here, when it ends.
func (s *Store) DeliveryReschedule(ctx context.Context, params *driver.DeliveryRescheduleParams) (bool, error) {
	if err := params.Validate(); err != nil {
		return false, err
	}
	return s.fenced(ctx, "reschedule", params.Lease, func(d *delivery) {
		s.leave(d)
		d.attempts++
		d.claims++
		d.suspect = false
		d.availableAt = params.AvailableAt.Round(0)
		d.lastError = driver.TruncateError(params.Error)
		d.updatedAt = params.Now.Round(0)
		s.place(d)
	})
}

// DeliveryBury implements driver.Store.
func (s *Store) DeliveryBury(ctx context.Context, params *driver.DeliveryBuryParams) (bool, error) {
	if err := params.Validate(); err != nil {
		return false, err
	}
	return s.fenced(ctx, "bury", params.Lease, func(d *delivery) {
		s.leave(d)
		d.attempts++
		d.claims++
		d.suspect = false
		d.lastError = driver.TruncateError(params.Error)
		d.updatedAt = params.Now.Round(0)
		s.setStatus(d, relaytype.StatusDead)
	})
}

// DeliveryRelease implements driver.Store: no attempt is spent, and a
// suspect stays one.
func (s *Store) DeliveryRelease(ctx context.Context, params *driver.DeliveryReleaseParams) (bool, error) {
	if err := params.Validate(); err != nil {
		return false, err
	}
	return s.fenced(ctx, "release", params.Lease, func(d *delivery) {
		if at := params.AvailableAt.Round(0); at.After(d.availableAt) {
			d.availableAt = at // placed again by release
		}
		s.release(d, params.Now.Round(0))
	})
}

// fenced is the shape of every single-lease write (validated already):
// parse the lease, then writeCurrent.
func (s *Store) fenced(ctx context.Context, op string, l relaytype.Lease, write func(*delivery)) (bool, error) {
	pl, err := parseLease(op, l)
	if err != nil {
		return false, err
	}
	out, err := s.writeCurrent(ctx, []lease{pl}, func(_ lease, d *delivery) bool { write(d); return true })
	if err != nil {
		return false, err
	}
	return out[0], nil
}

// writeCurrent is the shape of every lease write, once its leases are
// parsed: honour a cancelled ctx, then under the lock call write for each
// lease that is still current (in its order), reporting per lease
// whether it was current and write took it.
func (s *Store) writeCurrent(ctx context.Context, ls []lease, write func(pl lease, d *delivery) bool) ([]bool, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]bool, len(ls))
	for i, pl := range ls {
		if d := s.current(pl); d != nil {
			out[i] = write(pl, d)
		}
	}
	return out, nil
}

// OwnerRelinquish implements driver.Store: every lane (params.Owner,
// this store) holds, expired or not (nobody took it over, so what it has
// in flight did not end in a crash), has its deliveries released and is
// handed back.
func (s *Store) OwnerRelinquish(ctx context.Context, params *driver.OwnerRelinquishParams) (int, error) {
	if err := params.Validate(); err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	now := params.Now.Round(0)
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for i := range s.lanes {
		l := &s.lanes[i]
		if l.owner != params.Owner || l.holder != s.holder {
			continue
		}
		for _, d := range l.inFlight {
			s.release(d, now)
			n++
		}
		l.handBack()
	}
	return n, nil
}

// current returns the delivery l leases if the lease is current: the
// delivery exists, is pending, in flight in the token's lane at the
// token's epoch, and its claims counter is the token's. Otherwise nil.
func (s *Store) current(l lease) *delivery {
	d := s.deliveries[l.ID]
	if d == nil || d.status != relaytype.StatusPending || !d.inFlight || d.lane != l.Token.Lane ||
		d.claims != l.Token.Claims || s.lanes[d.lane].epoch != l.Token.Epoch {
		return nil
	}
	return d
}

func (s *Store) complete(d *delivery, now time.Time) {
	if !s.retainCompleted {
		s.remove(d)
		return
	}
	s.leave(d)
	d.attempts++ // the attempt that succeeded, as in the PostgreSQL history
	d.completedAt = now
	d.updatedAt = now
	s.setStatus(d, relaytype.StatusCompleted)
}

// release gives d back without spending an attempt.
func (s *Store) release(d *delivery, now time.Time) {
	s.leave(d)
	d.claims++
	d.updatedAt = now
	s.place(d)
}

func (s *Store) remove(d *delivery) {
	if d.inFlight {
		delete(s.lanes[d.lane].inFlight, d.id)
	}
	delete(s.deliveries, d.id)
	s.unindex(d)
	d.ev.deliveries--
}

// lease is a parsed relaytype.Lease of this store.
type lease = decimallease.Lease

// parseLease reads a lease this store handed out: an ID or token of
// another form is an ErrInvalid error and the call writes nothing (see
// decimallease.Parse).
func parseLease(op string, l relaytype.Lease) (lease, error) {
	pl, err := decimallease.Parse(l)
	if err != nil {
		return lease{}, fmt.Errorf("relaybus/memory: %s: %w", op, err)
	}
	return pl, nil
}

// parseLeases parses every lease of a call before anything is written.
func parseLeases(op string, ls []relaytype.Lease) ([]lease, error) {
	out, err := decimallease.ParseAll(ls)
	if err != nil {
		return nil, fmt.Errorf("relaybus/memory: %s: %w", op, err)
	}
	return out, nil
}

// parseID reads a delivery ID this store handed out (see
// decimal.ParseID).
func parseID(s string) (int64, bool) { return decimal.ParseID(s) }
