package mongo

import (
	"context"
	"errors"
	"time"

	"github.com/berkcansavur/relaybus/relaybus"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Limits on the claim scan.
const (
	// ClaimScanFactor: a claim of Limit deliveries reads up to
	// Limit*ClaimScanFactor + ClaimScanSlack candidates. Candidates are
	// skipped when another claimer wins them or when an earlier delivery
	// of their key is unfinished, so a claim reads more than it takes.
	ClaimScanFactor = 4
	// ClaimScanSlack is added to every scan, so that small claims can
	// pass over a run of blocked keyed deliveries.
	ClaimScanSlack = 100
	// MaxClaimScan bounds the candidates of one claim whatever its limit.
	MaxClaimScan = 20_000
)

// claimScanLimit is the number of candidates a claim of limit reads.
func claimScanLimit(limit int) int64 {
	return int64(min(limit*ClaimScanFactor+ClaimScanSlack, MaxClaimScan))
}

// candidate is the projection of a delivery the claim decides on.
type candidate struct {
	ID          bson.ObjectID `bson:"_id"`
	Handler     string        `bson:"handler"`
	Key         string        `bson:"key"`
	Sequence    int64         `bson:"sequence"`
	Status      string        `bson:"status"`
	Attempts    int64         `bson:"attempts"`
	MaxAttempts int64         `bson:"maxAttempts"`
	LeaseToken  string        `bson:"leaseToken"`
}

// orderKey names one ordering lane: a handler and a key.
type orderKey struct{ handler, key string }

// DeliveryClaim is 0.1.0's claim: one read of candidates, then for each
// candidate, in (dueAt, _id) order until Limit are taken:
//
//   - keyed: one read for an unfinished delivery of the same handler and
//     key with a lower sequence; if there is one, the candidate waits, and
//     so does every later candidate of that key in this scan (no more
//     reads for it);
//   - a takeover whose attempt budget is spent: one updateOne that buries
//     it (LastError "lease expired after the final attempt");
//   - otherwise one conditional findOneAndUpdate that takes it if it is
//     still claimable, returning the whole document.
//
// So a claimed delivery costs one write and up to two reads, and every
// claim rewrites status and the lease fields, which four indexes contain.
//
// Races. Two claimers that pick the same candidate both send the
// conditional update and exactly one matches: a delivery is never
// returned twice. Per-key order rests on two facts: a delivery of a key
// with a lower sequence is always published (committed) before one with a
// higher sequence, and a delivery that is unfinished (pending or
// processing) only moves on to completed or dead or back to pending, never
// from finished to unfinished, except by DeliveryRequeue. So once the
// read finds no unfinished predecessor, none can appear before the
// update, and two claimers can only race for the head itself. The
// window that remains: a DeliveryRequeue of a dead predecessor that lands
// between the read and the update lets the later delivery run alongside
// it (a dead predecessor does not block, by contract, so this is the
// requeue of a skipped delivery overtaking nothing new).
//
// If a command fails midway, the deliveries claimed so far are returned
// with the error: they are processing under their new leases, and a
// caller that drops them leaves them to expire (an attempt spent).
func (s *Store) DeliveryClaim(ctx context.Context, params *relaybus.DeliveryClaimParams) ([]*relaybus.Delivery, error) {
	if err := params.Validate(); err != nil {
		return nil, err
	}
	now := bsonTime(params.Now)
	expiresAt := bsonTime(params.Now.Add(params.LeaseDuration))
	scan := claimScanLimit(params.Limit)
	cur, err := s.deliveries.Find(ctx, candidateFilter(params.Handlers, now),
		options.Find().
			SetSort(candidateSort).
			SetProjection(candidateProjection).
			SetLimit(scan).
			SetBatchSize(int32(min(scan, int64(params.Limit)*2+ClaimScanSlack))))
	if err != nil {
		return nil, errorFrom("claim: find candidates", err)
	}
	defer cur.Close(context.WithoutCancel(ctx))

	var claimed []*relaybus.Delivery
	waiting := map[orderKey]bool{} // keys whose next delivery cannot run now
	for len(claimed) < params.Limit && cur.Next(ctx) {
		var c candidate
		if err := cur.Decode(&c); err != nil {
			return claimed, errorFrom("claim: decode candidate", err)
		}
		ok := orderKey{c.Handler, c.Key}
		if c.Key != "" {
			if waiting[ok] {
				continue
			}
			blocked, err := s.hasPredecessor(ctx, c)
			if err != nil {
				return claimed, err
			}
			if blocked {
				waiting[ok] = true
				continue
			}
		}
		if c.Status == statusProcessing && c.Attempts >= c.MaxAttempts {
			if err := s.buryExpired(ctx, c, now); err != nil {
				return claimed, err
			}
			continue
		}
		d, err := s.claimOne(ctx, c.ID, params.Owner, expiresAt, now)
		if err != nil {
			return claimed, err
		}
		if d == nil {
			continue // another claimer took it first
		}
		claimed = append(claimed, d)
		if c.Key != "" {
			// The delivery just claimed is now the unfinished
			// predecessor of the rest of its key.
			waiting[ok] = true
		}
	}
	if err := cur.Err(); err != nil {
		return claimed, errorFrom("claim: read candidates", err)
	}
	return claimed, nil
}

// hasPredecessor reads whether an earlier delivery of c's handler and key
// is unfinished.
func (s *Store) hasPredecessor(ctx context.Context, c candidate) (bool, error) {
	err := s.deliveries.FindOne(ctx, predecessorFilter(c.Handler, c.Key, c.Sequence),
		options.FindOne().SetProjection(bson.D{{Key: fID, Value: 1}})).Err()
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, mongo.ErrNoDocuments):
		return false, nil
	}
	return false, errorFrom("claim: read predecessors", err)
}

// buryExpired buries a delivery whose lease expired on its final
// attempt. It is conditional on the lease the scan saw, so of several
// claimers at most one writes.
func (s *Store) buryExpired(ctx context.Context, c candidate, now time.Time) error {
	_, err := s.deliveries.UpdateOne(ctx, takeoverBuryFilter(c.ID, c.LeaseToken, now), buryUpdate(takeoverBuryError, now))
	return errorFrom("claim: bury expired delivery", err)
}

// claimOne takes one delivery if it is still claimable: nil when another
// claimer was first.
func (s *Store) claimOne(ctx context.Context, id bson.ObjectID, owner string, expiresAt, now time.Time) (*relaybus.Delivery, error) {
	var doc deliveryDoc
	err := s.deliveries.FindOneAndUpdate(ctx, claimFilter(id, now), claimUpdate(owner, newLeaseToken(), expiresAt, now),
		options.FindOneAndUpdate().SetReturnDocument(options.After)).Decode(&doc)
	switch {
	case err == nil:
		return doc.toDelivery(), nil
	case errors.Is(err, mongo.ErrNoDocuments):
		return nil, nil
	}
	return nil, errorFrom("claim: update", err)
}
