package mongo

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Fenced writes. A lease is (delivery ID, token lane:epoch:claims); it
// is current while the token's lane has the token's epoch and lists the
// delivery in inFlight, and the delivery is pending with the token's
// claims count. A write under a lease that is not current changes
// nothing and reports false. A token that is not lane:epoch:claims is an
// ErrInvalid error (checked for every lease of a call before anything is
// sent); a delivery ID this store cannot have issued reports false
// without a round trip.

// ---------------------------------------------------------------------
// Completion: delete, do not write the lane.

// DeliveryComplete deletes the delivery if its lease is current: one
// transaction, as DeliveryCompleteMany.
func (s *Store) DeliveryComplete(ctx context.Context, params *driver.DeliveryCompleteParams) (bool, error) {
	if err := params.Validate(); err != nil {
		return false, err
	}
	ok, err := s.completeMany(ctx, []relaytype.Lease{params.Lease}, params.Now)
	if err != nil {
		return false, err
	}
	return ok[0], nil
}

// DeliveryCompleteMany deletes the deliveries whose leases are current,
// in one transaction of its own (completeIn), run again from the start
// when it meets a write conflict (runTx). One result per lease, in
// order; a lease named twice is completed once (the second is false).
func (s *Store) DeliveryCompleteMany(ctx context.Context, params *driver.DeliveryCompleteManyParams) ([]bool, error) {
	if err := params.Validate(); err != nil {
		return nil, err
	}
	return s.completeMany(ctx, params.Leases, params.Now)
}

func (s *Store) completeMany(ctx context.Context, leases []relaytype.Lease, now time.Time) ([]bool, error) {
	refs, usable, err := parseLeases(leases)
	if err != nil {
		return nil, err
	}
	if !slices.Contains(usable, true) {
		return make([]bool, len(leases)), nil
	}
	var out []bool
	err = s.runTx(ctx, "complete", func(sctx context.Context) error {
		var err error
		out, err = s.completeIn(sctx, refs, usable, bsonTime(now))
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// DeliveryCompleteTx deletes the delivery inside tx (from TxBegin), with
// the handler's own writes. If tx rolls back, the delivery is still in
// flight under the same lease.
//
// A takeover and this completion cannot both win. The takeover charges
// the delivery (an update of the very document this deletes) after it
// raised the lane's epoch. If the charge committed before tx's snapshot,
// tx reads the new epoch and reports false. If it commits after, tx's
// delete (or, if tx deleted first, the charge) is a write conflict: the
// operation in tx fails with an error labelled TransientTransactionError
// and tx must be rolled back (the handler's writes with it); the charge,
// being a transaction of the store's own, runs again and finds the
// delivery, or finds it deleted if tx committed.
func (s *Store) DeliveryCompleteTx(ctx context.Context, tx context.Context, params *driver.DeliveryCompleteParams) (bool, error) {
	if err := params.Validate(); err != nil {
		return false, err
	}
	refs, usable, err := parseLeases([]relaytype.Lease{params.Lease})
	if err != nil {
		return false, err
	}
	sctx, err := inTx(ctx, tx)
	if err != nil {
		return false, err
	}
	if !usable[0] {
		return false, nil
	}
	ok, err := s.completeIn(sctx, refs, usable, bsonTime(params.Now))
	if err != nil {
		return false, errorFrom("complete in transaction", err)
	}
	return ok[0], nil
}

// completeIn does a completion's work in the transaction of sctx, whose
// reads see one snapshot:
//
//  1. find the lanes of the leases, with which of the leases' deliveries
//     they list in flight (fenceProjection);
//  2. find the deliveries;
//  3. deleteMany the deliveries whose fence holds (completeFences);
//  4. with completion history on, insertMany their history documents.
//
// The lanes are read, never written: completions of one lane touch
// disjoint delivery documents and do not conflict with each other, nor
// with the holder's claims and renewals (which write only the lane). A
// takeover conflicts with a completion through the delivery documents
// (see chargeLost).
func (s *Store) completeIn(sctx context.Context, refs []leaseRef, usable []bool, now time.Time) ([]bool, error) {
	var laneIDs []int32
	var ids []bson.ObjectID
	for i, r := range refs {
		if !usable[i] {
			continue
		}
		if !slices.Contains(laneIDs, int32(r.tok.Lane)) {
			laneIDs = append(laneIDs, int32(r.tok.Lane))
		}
		if !slices.Contains(ids, r.id) {
			ids = append(ids, r.id)
		}
	}
	lanes, err := s.readFenceLanes(sctx, laneIDs, ids)
	if err != nil {
		return nil, err
	}
	docs, err := s.readFenceDeliveries(sctx, ids)
	if err != nil {
		return nil, err
	}
	out, del := completeFences(refs, usable, lanes, docs)
	if len(del) == 0 {
		return out, nil
	}
	res, err := s.deliveries.DeleteMany(sctx, idsFilter(del))
	if err != nil {
		return nil, err
	}
	if res.DeletedCount != int64(len(del)) {
		// Within one snapshot the documents just read are there, and one
		// deleted meanwhile by another writer is a write conflict, not a
		// smaller count. Anything else is a server or driver surprise, and
		// the transaction must not commit on it.
		return nil, fmt.Errorf("deleted %d of the %d deliveries the transaction read", res.DeletedCount, len(del))
	}
	if s.cfg.history {
		hist := make([]any, len(del))
		for i, id := range del {
			hist[i] = newHistoryDoc(docs[id], now)
		}
		if _, err := s.history.InsertMany(sctx, hist); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// completeFences decides which leases of a completion hold, from the
// lanes and deliveries one snapshot read, and returns the IDs to delete
// (each once, in lease order).
func completeFences(refs []leaseRef, usable []bool, lanes map[int32]laneDoc, docs map[bson.ObjectID]*deliveryDoc) ([]bool, []bson.ObjectID) {
	out := make([]bool, len(refs))
	var del []bson.ObjectID
	for i, r := range refs {
		if !usable[i] || slices.Contains(del, r.id) {
			continue
		}
		l, ok := lanes[int32(r.tok.Lane)]
		if !ok || !fenceHolds(r, &l, docs[r.id]) {
			continue
		}
		out[i] = true
		del = append(del, r.id)
	}
	return out, del
}

// fenceHolds is the fence of one lease against a lane and a delivery as
// read: the lane at the token's epoch, listing the delivery in flight;
// the delivery pending in that lane with the token's claims.
func fenceHolds(r leaseRef, l *laneDoc, d *deliveryDoc) bool {
	return l.Epoch == r.tok.Epoch && slices.Contains(l.InFlight, r.id) &&
		d != nil && d.Status == statusPending && d.LaneID == int32(r.tok.Lane) && d.Claims == r.tok.Claims
}

// readFenceLanes reads lanes with the ids among their inFlight
// (fenceProjection): a plain find, in a transaction when sctx carries
// one.
func (s *Store) readFenceLanes(ctx context.Context, lanes []int32, ids []bson.ObjectID) (map[int32]laneDoc, error) {
	cur, err := s.lanes.Find(ctx, lanesFilter(lanes), options.Find().SetProjection(fenceProjection(ids)))
	if err != nil {
		return nil, err
	}
	var docs []laneDoc
	if err := cur.All(ctx, &docs); err != nil {
		return nil, err
	}
	out := make(map[int32]laneDoc, len(docs))
	for _, d := range docs {
		out[d.ID] = d
	}
	return out, nil
}

// readFenceDeliveries reads deliveries by ID, whole (a history document
// is made from them).
func (s *Store) readFenceDeliveries(ctx context.Context, ids []bson.ObjectID) (map[bson.ObjectID]*deliveryDoc, error) {
	opts := options.Find()
	if !s.cfg.history {
		opts.SetProjection(bson.D{{Key: fLaneID, Value: 1}, {Key: fClaims, Value: 1}, {Key: fStatus, Value: 1}})
	} else {
		opts.SetProjection(bson.D{{Key: fPayload, Value: 0}, {Key: fHeaders, Value: 0}})
	}
	cur, err := s.deliveries.Find(ctx, idsFilter(ids), opts)
	if err != nil {
		return nil, err
	}
	var docs []deliveryDoc
	if err := cur.All(ctx, &docs); err != nil {
		return nil, err
	}
	out := make(map[bson.ObjectID]*deliveryDoc, len(docs))
	for i := range docs {
		out[docs[i].ID] = &docs[i]
	}
	return out, nil
}

// ---------------------------------------------------------------------
// Ending a claim without completing: reschedule, bury, release.

// DeliveryReschedule records a failed attempt and makes the delivery due
// again at params.AvailableAt (endClaim).
func (s *Store) DeliveryReschedule(ctx context.Context, params *driver.DeliveryRescheduleParams) (bool, error) {
	if err := params.Validate(); err != nil {
		return false, err
	}
	return s.endClaim(ctx, "reschedule", params.Lease,
		rescheduleUpdate(params.Error, bsonTime(params.AvailableAt), bsonTime(params.Now)))
}

// DeliveryBury records a failed attempt and makes the delivery dead
// (endClaim).
func (s *Store) DeliveryBury(ctx context.Context, params *driver.DeliveryBuryParams) (bool, error) {
	if err := params.Validate(); err != nil {
		return false, err
	}
	return s.endClaim(ctx, "bury", params.Lease, buryUpdate(params.Error, bsonTime(params.Now)))
}

// DeliveryRelease gives the delivery back without spending an attempt
// (endClaim).
func (s *Store) DeliveryRelease(ctx context.Context, params *driver.DeliveryReleaseParams) (bool, error) {
	if err := params.Validate(); err != nil {
		return false, err
	}
	return s.endClaim(ctx, "release", params.Lease, releaseUpdate(bsonTime(params.Now), params.AvailableAt))
}

// endClaim ends a claim with update, in one transaction:
//
//   - updateOne on the lane: {_id: lane, epoch, inFlight: id} $pull id
//     (fenceLaneFilter, pullInFlightUpdate);
//   - updateOne on the delivery: {_id, laneId, claims, status pending}
//     with update, which raises claims (fencedDeliveryFilter).
//
// If either matches nothing, the lease is not current: errFenceLost
// aborts the transaction (the lane's $pull with it) and endClaim reports
// false. Both writes or neither: a delivery never leaves inFlight
// without its claim ending, nor the reverse. The lane write is what
// orders this against a takeover (which writes the lane too): the second
// of the two writers conflicts, and this transaction, run again, finds
// the new epoch.
func (s *Store) endClaim(ctx context.Context, op string, lease relaytype.Lease, update bson.D) (bool, error) {
	ref, ok, err := parseLease(lease)
	if err != nil || !ok {
		return false, err
	}
	err = s.runTx(ctx, op, func(sctx context.Context) error {
		res, err := s.lanes.UpdateOne(sctx, fenceLaneFilter(ref), pullInFlightUpdate(ref.id))
		if err != nil {
			return err
		}
		if res.MatchedCount == 0 {
			return errFenceLost
		}
		res, err = s.deliveries.UpdateOne(sctx, fencedDeliveryFilter(ref), update)
		if err != nil {
			return err
		}
		if res.MatchedCount == 0 {
			return errFenceLost
		}
		return nil
	})
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, errFenceLost):
		return false, nil
	}
	return false, err
}

// ---------------------------------------------------------------------
// Renewal and relinquish: lanes only.

// LeaseExtend pushes the expiry of the lanes of the leases to at least
// params.ExpiresAt: one updateMany on the lane documents (renewFilter,
// renewUpdate), conditional per lane on (owner, holder) and the token's
// epoch, then one read of those lanes. A lease is renewed when its lane
// is held by (owner, this instance) at the token's epoch after the write
// and lists the delivery in flight. Each lane document is updated
// atomically; the updateMany as a whole is not atomic and need not be:
// each lane's result is read back.
func (s *Store) LeaseExtend(ctx context.Context, params *driver.LeaseExtendParams) ([]bool, error) {
	if err := params.Validate(); err != nil {
		return nil, err
	}
	refs, usable, err := parseLeases(params.Leases)
	if err != nil {
		return nil, err
	}
	var lanes []laneEpoch
	var laneIDs []int32
	var ids []bson.ObjectID
	for i, r := range refs {
		if !usable[i] {
			continue
		}
		le := laneEpoch{lane: int32(r.tok.Lane), epoch: r.tok.Epoch}
		if !slices.Contains(lanes, le) {
			lanes = append(lanes, le)
		}
		if !slices.Contains(laneIDs, le.lane) {
			laneIDs = append(laneIDs, le.lane)
		}
		ids = append(ids, r.id)
	}
	out := make([]bool, len(refs))
	if len(lanes) == 0 {
		return out, nil
	}
	if _, err := s.lanes.UpdateMany(ctx, renewFilter(params.Owner, s.holder, lanes), renewUpdate(bsonTime(params.ExpiresAt))); err != nil {
		return nil, errorFrom("extend", err)
	}
	docs, err := s.readFenceLanes(ctx, laneIDs, ids)
	if err != nil {
		return nil, errorFrom("extend: read lanes", err)
	}
	for i, r := range refs {
		if !usable[i] {
			continue
		}
		l, ok := docs[int32(r.tok.Lane)]
		out[i] = ok && leaseRenewed(r, &l, params.Owner, s.holder, bsonTime(params.ExpiresAt))
	}
	return out, nil
}

// leaseRenewed decides one lease of a renewal from its lane as read after
// the write.
func leaseRenewed(r leaseRef, l *laneDoc, owner, holder string, expiresAt time.Time) bool {
	return l.Epoch == r.tok.Epoch && l.Owner != nil && *l.Owner == owner && l.Holder != nil && *l.Holder == holder &&
		l.LeaseExpiresAt != nil && !l.LeaseExpiresAt.Before(expiresAt) && slices.Contains(l.InFlight, r.id)
}

// OwnerRelinquish hands back every lane this instance holds for
// params.Owner (live or expired, as long as nobody took it) and releases
// what they have in flight, in one transaction:
//
//   - find the lanes (ownedLanesFilter);
//   - updateMany the deliveries in their inFlight lists that still exist
//     and are pending: claims + 1, no attempt spent (releaseManyFilter,
//     releaseUpdate);
//   - one bulkWrite of updateOne models, one per lane, conditional on
//     this holder at the epoch read (laneOfHolderFilter,
//     relinquishLaneUpdate).
//
// A lane that another writer changed after the transaction's snapshot
// makes the lane write a write conflict, and the whole transaction runs
// again. Returns how many deliveries it released.
func (s *Store) OwnerRelinquish(ctx context.Context, params *driver.OwnerRelinquishParams) (int, error) {
	if err := params.Validate(); err != nil {
		return 0, err
	}
	now := bsonTime(params.Now)
	var released int
	err := s.runTx(ctx, "relinquish", func(sctx context.Context) error {
		released = 0
		cur, err := s.lanes.Find(sctx, ownedLanesFilter(params.Owner, s.holder))
		if err != nil {
			return err
		}
		var lanes []laneDoc
		if err := cur.All(sctx, &lanes); err != nil {
			return err
		}
		if len(lanes) == 0 {
			return nil
		}
		var ids []bson.ObjectID
		models := make([]mongo.WriteModel, len(lanes))
		for i, l := range lanes {
			ids = append(ids, l.InFlight...)
			models[i] = mongo.NewUpdateOneModel().SetFilter(laneOfHolderFilter(l.ID, l.Epoch, s.holder)).SetUpdate(relinquishLaneUpdate)
		}
		if len(ids) > 0 {
			res, err := s.deliveries.UpdateMany(sctx, releaseManyFilter(ids), releaseUpdate(now, time.Time{}))
			if err != nil {
				return err
			}
			released = int(res.ModifiedCount)
		}
		res, err := s.lanes.BulkWrite(sctx, models, options.BulkWrite().SetOrdered(true))
		if err != nil {
			return err
		}
		if res.MatchedCount != int64(len(models)) {
			return fmt.Errorf("handed back %d of the %d lanes the transaction read", res.MatchedCount, len(models))
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return released, nil
}
