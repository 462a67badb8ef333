package mongo

import (
	"context"
	"time"

	"github.com/berkcansavur/relaybus/relaybus"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// Fenced writes. Each is one updateOne whose filter names the delivery
// and the token of the claim (fencedFilter): it matches only while that
// claim is current, so a write under a lease that was taken over,
// released or finished changes nothing and reports false. A lease whose
// ID or token this store cannot have issued reports false without a
// round trip.

// fencedUpdate runs one fenced updateOne and reports whether it matched.
func (s *Store) fencedUpdate(ctx context.Context, op string, filter, update bson.D) (bool, error) {
	res, err := s.deliveries.UpdateOne(ctx, filter, update)
	if err != nil {
		return false, errorFrom(op, err)
	}
	return res.MatchedCount == 1, nil
}

// leaseFilter is fencedFilter for lease, or ok false when lease cannot be
// current (malformed ID or token).
func leaseFilter(lease relaybus.Lease) (bson.D, bool) {
	id, ok := parseDeliveryID(lease.DeliveryID)
	if !ok || !validLeaseToken(lease.Token) {
		return nil, false
	}
	return fencedFilter(id, lease.Token), true
}

// LeaseExtend moves each lease's expiry, one updateOne per lease (0.1.0
// writes the delivery document at every renewal).
func (s *Store) LeaseExtend(ctx context.Context, params *relaybus.LeaseExtendParams) ([]bool, error) {
	if err := params.Validate(); err != nil {
		return nil, err
	}
	now, expiresAt := bsonTime(params.Now), bsonTime(params.ExpiresAt)
	out := make([]bool, len(params.Leases))
	for i, lease := range params.Leases {
		id, ok := parseDeliveryID(lease.DeliveryID)
		if !ok || !validLeaseToken(lease.Token) {
			continue
		}
		held, err := s.fencedUpdate(ctx, "extend", extendFilter(id, lease.Token, params.Owner), extendUpdate(expiresAt, now))
		if err != nil {
			return nil, err
		}
		out[i] = held
	}
	return out, nil
}

// DeliveryComplete marks the delivery completed: one updateOne.
func (s *Store) DeliveryComplete(ctx context.Context, params *relaybus.DeliveryCompleteParams) (bool, error) {
	if err := params.Validate(); err != nil {
		return false, err
	}
	return s.complete(ctx, params.Lease, bsonTime(params.Now))
}

// DeliveryCompleteMany completes each lease with its own updateOne: that
// per-delivery write is 0.1.0's completion cost, kept on purpose (a
// single updateMany could not say which leases were current).
func (s *Store) DeliveryCompleteMany(ctx context.Context, params *relaybus.DeliveryCompleteManyParams) ([]bool, error) {
	if err := params.Validate(); err != nil {
		return nil, err
	}
	now := bsonTime(params.Now)
	out := make([]bool, len(params.Leases))
	for i, lease := range params.Leases {
		ok, err := s.complete(ctx, lease, now)
		if err != nil {
			return nil, err
		}
		out[i] = ok
	}
	return out, nil
}

// DeliveryCompleteTx completes the delivery inside tx (from TxBegin). If
// tx rolls back, the delivery stays processing under the same lease.
//
// A takeover and a transactional completion cannot both win: if the
// takeover's write comes first, the transaction's update of the same
// document is a write conflict (the transaction is aborted and its
// handler's writes with it); if the transaction's write comes first, the
// takeover's update waits for the transaction to end and then no longer
// matches a completed delivery.
func (s *Store) DeliveryCompleteTx(ctx context.Context, tx context.Context, params *relaybus.DeliveryCompleteParams) (bool, error) {
	if err := params.Validate(); err != nil {
		return false, err
	}
	sctx, err := inTx(ctx, tx)
	if err != nil {
		return false, err
	}
	return s.complete(sctx, params.Lease, bsonTime(params.Now))
}

func (s *Store) complete(ctx context.Context, lease relaybus.Lease, now time.Time) (bool, error) {
	filter, ok := leaseFilter(lease)
	if !ok {
		return false, nil
	}
	return s.fencedUpdate(ctx, "complete", filter, completeUpdate(now))
}

// DeliveryReschedule makes the delivery pending at params.AvailableAt with
// params.Error as LastError. The failed attempt was counted by its claim.
func (s *Store) DeliveryReschedule(ctx context.Context, params *relaybus.DeliveryRescheduleParams) (bool, error) {
	if err := params.Validate(); err != nil {
		return false, err
	}
	filter, ok := leaseFilter(params.Lease)
	if !ok {
		return false, nil
	}
	return s.fencedUpdate(ctx, "reschedule", filter,
		rescheduleUpdate(params.Error, bsonTime(params.AvailableAt), bsonTime(params.Now)))
}

// DeliveryBury makes the delivery dead with params.Error as LastError.
func (s *Store) DeliveryBury(ctx context.Context, params *relaybus.DeliveryBuryParams) (bool, error) {
	if err := params.Validate(); err != nil {
		return false, err
	}
	filter, ok := leaseFilter(params.Lease)
	if !ok {
		return false, nil
	}
	return s.fencedUpdate(ctx, "bury", filter, buryUpdate(params.Error, bsonTime(params.Now)))
}

// DeliveryRelease makes the delivery pending again and takes back the
// attempt its claim counted.
func (s *Store) DeliveryRelease(ctx context.Context, params *relaybus.DeliveryReleaseParams) (bool, error) {
	if err := params.Validate(); err != nil {
		return false, err
	}
	filter, ok := leaseFilter(params.Lease)
	if !ok {
		return false, nil
	}
	return s.fencedUpdate(ctx, "release", filter, releaseUpdate(bsonTime(params.Now)))
}

// OwnerRelinquish releases everything params.Owner holds, expired leases
// included (nobody took them over yet): one updateMany.
func (s *Store) OwnerRelinquish(ctx context.Context, params *relaybus.OwnerRelinquishParams) (int, error) {
	if err := params.Validate(); err != nil {
		return 0, err
	}
	res, err := s.deliveries.UpdateMany(ctx, relinquishFilter(params.Owner), releaseUpdate(bsonTime(params.Now)))
	if err != nil {
		return 0, errorFrom("relinquish", err)
	}
	return int(res.ModifiedCount), nil
}
