package mongo

import (
	"context"
)

// Parking. A key whose head cannot run yet (a slow delivery in flight, a
// predecessor waiting for its retry) keeps its followers due, and every
// claim of its lane would read them again only to skip them. A claim
// that sees at least ParkBacklogMin such followers moves them out of the
// claim index's ready range (queue "parked") and lists the key in the
// lane's parkedKeys. Each later claim of the lane reads the head of each
// parked key directly (readKeyHead: the key's lowest pending sequence,
// parked or not, through the per-key index) instead of the backlog: a
// deep queue behind one slow delivery then costs one indexed read per
// claim, not a scan. Nothing unparks: a parked delivery is claimed as
// its key's head, and a key leaves parkedKeys when a claim finds it has
// no pending delivery left (recordLanePipeline, handBackPipeline).
// DeliveryRequeue puts a dead delivery back as ready.
//
// The invariant that keeps parked deliveries from being forgotten: every
// pending parked delivery's (handler, key) is listed in its lane's
// parkedKeys. parkKey adds the key and parks the deliveries in one
// transaction; a key is removed only by a claim of the lane's holder
// that read no pending delivery of it, and parkKey's lane write is
// conditional on the same holder and epoch, so a stale holder cannot
// park a backlog behind a removal (its lane write would not match, or
// would conflict with the new holder's).

// parkKey parks one key's backlog, in one transaction:
//
//   - updateOne on the lane: {_id, epoch, holder, parkedKeys lists the
//     key or has room} $addToSet the key (parkLaneFilter,
//     parkLaneUpdate). No match: the lane changed hands or is full, and
//     nothing is parked (errFenceLost aborts).
//   - updateMany on the deliveries: the ready pending deliveries of the
//     handler and key in the lane with a sequence above the head's
//     (parkFilter, parkUpdate).
//
// Both or neither, so a parked delivery's key is always listed. The lane
// write also makes this transaction conflict with any other writer of
// the lane (a takeover, a reschedule's $pull), which runTx answers by
// running it again. Returns how many deliveries it parked.
func (s *Store) parkKey(ctx context.Context, r parkRequest) (int64, error) {
	var parked int64
	err := s.runTx(ctx, "claim: park", func(sctx context.Context) error {
		parked = 0
		res, err := s.lanes.UpdateOne(sctx, parkLaneFilter(r.lane, r.epoch, s.holder, r.key), parkLaneUpdate(r.key))
		if err != nil {
			return err
		}
		if res.MatchedCount == 0 {
			return errFenceLost
		}
		upd, err := s.deliveries.UpdateMany(sctx, parkFilter(r.lane, r.key.Handler, r.key.Key, r.afterSeq), parkUpdate)
		if err != nil {
			return err
		}
		parked = upd.ModifiedCount
		return nil
	})
	return parked, err
}
