package mongo

import (
	"time"

	"github.com/berkcansavur/relaybus/relaybus"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// Filters and update documents, built by pure functions so they are
// tested without a server. Every time in them has been through bsonTime.

var (
	statusPending    = string(relaybus.StatusPending)
	statusProcessing = string(relaybus.StatusProcessing)
	statusCompleted  = string(relaybus.StatusCompleted)
	statusDead       = string(relaybus.StatusDead)
)

// unsetLease removes the lease fields: they exist only while a delivery
// is processing.
var unsetLease = bson.D{{Key: fLeaseOwner, Value: ""}, {Key: fLeaseToken, Value: ""}, {Key: fLeaseExpiresAt, Value: ""}}

// claimableOr is the claim condition: pending and due, or processing
// under an expired lease (a takeover).
func claimableOr(now time.Time) bson.A {
	return bson.A{
		bson.D{{Key: fStatus, Value: statusPending}, {Key: fDueAt, Value: bson.D{{Key: "$lte", Value: now}}}},
		bson.D{{Key: fStatus, Value: statusProcessing}, {Key: fLeaseExpiresAt, Value: bson.D{{Key: "$lte", Value: now}}}},
	}
}

// candidateFilter selects claimable deliveries of handlers. Served by the
// (status, dueAt) and (status, leaseExpiresAt) indexes, one per branch.
func candidateFilter(handlers []string, now time.Time) bson.D {
	return bson.D{
		{Key: fHandler, Value: bson.D{{Key: "$in", Value: handlers}}},
		{Key: "$or", Value: claimableOr(now)},
	}
}

// candidateSort is the claim order: due time, then ID.
var candidateSort = bson.D{{Key: fDueAt, Value: 1}, {Key: fID, Value: 1}}

// candidateProjection is what a claim needs to decide about a candidate
// before it writes; the claimed document itself comes back from the
// conditional update.
var candidateProjection = bson.D{
	{Key: fID, Value: 1}, {Key: fHandler, Value: 1}, {Key: fKey, Value: 1}, {Key: fSequence, Value: 1},
	{Key: fStatus, Value: 1}, {Key: fAttempts, Value: 1}, {Key: fMaxAttempts, Value: 1}, {Key: fLeaseToken, Value: 1},
}

// claimFilter is the conditional part of a claim's findOneAndUpdate: the
// delivery is still claimable at the moment of the write, so of two
// claimers that picked the same candidate exactly one matches. A takeover
// also needs budget left (attempts < maxAttempts); one without is buried
// by takeoverBuryFilter's update instead.
func claimFilter(id bson.ObjectID, now time.Time) bson.D {
	return bson.D{
		{Key: fID, Value: id},
		{Key: "$or", Value: bson.A{
			bson.D{{Key: fStatus, Value: statusPending}, {Key: fDueAt, Value: bson.D{{Key: "$lte", Value: now}}}},
			bson.D{
				{Key: fStatus, Value: statusProcessing},
				{Key: fLeaseExpiresAt, Value: bson.D{{Key: "$lte", Value: now}}},
				{Key: "$expr", Value: bson.D{{Key: "$lt", Value: bson.A{"$" + fAttempts, "$" + fMaxAttempts}}}},
			},
		}},
	}
}

// claimUpdate takes the delivery: processing, one more attempt, the new
// lease. This is 0.1.0's cost: it rewrites status (in three indexes) and
// the lease fields (in one).
func claimUpdate(owner, token string, expiresAt, now time.Time) bson.D {
	return bson.D{
		{Key: "$set", Value: bson.D{
			{Key: fStatus, Value: statusProcessing},
			{Key: fLeaseOwner, Value: owner},
			{Key: fLeaseToken, Value: token},
			{Key: fLeaseExpiresAt, Value: expiresAt},
			{Key: fUpdatedAt, Value: now},
		}},
		{Key: "$inc", Value: bson.D{{Key: fAttempts, Value: int64(1)}}},
	}
}

// takeoverBuryFilter matches a delivery whose lease (token) expired after
// its final attempt, so a takeover must bury it rather than run it again.
func takeoverBuryFilter(id bson.ObjectID, token string, now time.Time) bson.D {
	return bson.D{
		{Key: fID, Value: id},
		{Key: fStatus, Value: statusProcessing},
		{Key: fLeaseToken, Value: token},
		{Key: fLeaseExpiresAt, Value: bson.D{{Key: "$lte", Value: now}}},
		{Key: "$expr", Value: bson.D{{Key: "$gte", Value: bson.A{"$" + fAttempts, "$" + fMaxAttempts}}}},
	}
}

// takeoverBuryError is the LastError of a delivery buried by a takeover.
const takeoverBuryError = "lease expired after the final attempt"

// predecessorFilter finds an unfinished delivery of handler and key that
// comes before sequence: while one exists, the delivery at sequence must
// wait. Served by the partial (handler, key, sequence) index.
func predecessorFilter(handler, key string, sequence int64) bson.D {
	return bson.D{
		{Key: fHandler, Value: handler},
		{Key: fKey, Value: key},
		{Key: fSequence, Value: bson.D{{Key: "$lt", Value: sequence}}},
		{Key: fStatus, Value: bson.D{{Key: "$in", Value: bson.A{statusPending, statusProcessing}}}},
	}
}

// fencedFilter matches the delivery only while the claim that issued
// token is current: processing under that token. A takeover, release,
// reschedule, burial or completion changes or removes the token.
func fencedFilter(id bson.ObjectID, token string) bson.D {
	return bson.D{{Key: fID, Value: id}, {Key: fStatus, Value: statusProcessing}, {Key: fLeaseToken, Value: token}}
}

// extendFilter is fencedFilter plus the owner the caller says it is.
func extendFilter(id bson.ObjectID, token, owner string) bson.D {
	return append(fencedFilter(id, token), bson.E{Key: fLeaseOwner, Value: owner})
}

func extendUpdate(expiresAt, now time.Time) bson.D {
	return bson.D{{Key: "$set", Value: bson.D{{Key: fLeaseExpiresAt, Value: expiresAt}, {Key: fUpdatedAt, Value: now}}}}
}

func completeUpdate(now time.Time) bson.D {
	return bson.D{
		{Key: "$set", Value: bson.D{
			{Key: fStatus, Value: statusCompleted},
			{Key: fCompletedAt, Value: now},
			{Key: fUpdatedAt, Value: now},
		}},
		{Key: "$unset", Value: unsetLease},
	}
}

// rescheduleUpdate makes the delivery pending at availableAt. The attempt
// was counted when it was claimed.
func rescheduleUpdate(lastError string, availableAt, now time.Time) bson.D {
	return bson.D{
		{Key: "$set", Value: bson.D{
			{Key: fStatus, Value: statusPending},
			{Key: fDueAt, Value: availableAt},
			{Key: fLastError, Value: relaybus.TruncateError(lastError)},
			{Key: fUpdatedAt, Value: now},
		}},
		{Key: "$unset", Value: unsetLease},
	}
}

func buryUpdate(lastError string, now time.Time) bson.D {
	return bson.D{
		{Key: "$set", Value: bson.D{
			{Key: fStatus, Value: statusDead},
			{Key: fLastError, Value: relaybus.TruncateError(lastError)},
			{Key: fUpdatedAt, Value: now},
		}},
		{Key: "$unset", Value: unsetLease},
	}
}

// releaseUpdate gives the delivery back without spending an attempt: the
// claim counted one, so it is taken back. Its due time is unchanged (it
// was due when it was claimed), so it keeps its place in claim order.
func releaseUpdate(now time.Time) bson.D {
	return bson.D{
		{Key: "$set", Value: bson.D{{Key: fStatus, Value: statusPending}, {Key: fUpdatedAt, Value: now}}},
		{Key: "$inc", Value: bson.D{{Key: fAttempts, Value: int64(-1)}}},
		{Key: "$unset", Value: unsetLease},
	}
}

// relinquishFilter matches everything owner holds.
func relinquishFilter(owner string) bson.D {
	return bson.D{{Key: fStatus, Value: statusProcessing}, {Key: fLeaseOwner, Value: owner}}
}

func requeueFilter(id bson.ObjectID) bson.D {
	return bson.D{{Key: fID, Value: id}, {Key: fStatus, Value: statusDead}}
}

// requeueUpdate makes a dead delivery pending, due now, with a fresh
// attempt budget. LastError is kept: it says why it died.
func requeueUpdate(now time.Time) bson.D {
	return bson.D{{Key: "$set", Value: bson.D{
		{Key: fStatus, Value: statusPending},
		{Key: fAttempts, Value: int64(0)},
		{Key: fDueAt, Value: now},
		{Key: fUpdatedAt, Value: now},
	}}}
}

// listFilter turns DeliveryList's filters into a query; after is the
// decoded cursor (nil for the first page).
func listFilter(p *relaybus.DeliveryListParams, after *bson.ObjectID) bson.D {
	f := bson.D{}
	if p.Status != "" {
		f = append(f, bson.E{Key: fStatus, Value: string(p.Status)})
	}
	if p.Handler != "" {
		f = append(f, bson.E{Key: fHandler, Value: p.Handler})
	}
	if p.Key != "" {
		f = append(f, bson.E{Key: fKey, Value: p.Key})
	}
	if p.EventID != "" {
		f = append(f, bson.E{Key: fEventID, Value: p.EventID})
	}
	if after != nil {
		f = append(f, bson.E{Key: fID, Value: bson.D{{Key: "$gt", Value: *after}}})
	}
	return f
}

// purgeCompletedFilter and purgeDeadFilter select what Purge deletes.
func purgeCompletedFilter(before time.Time) bson.D {
	return bson.D{{Key: fStatus, Value: statusCompleted}, {Key: fCompletedAt, Value: bson.D{{Key: "$lt", Value: before}}}}
}

func purgeDeadFilter(before time.Time) bson.D {
	return bson.D{{Key: fStatus, Value: statusDead}, {Key: fUpdatedAt, Value: bson.D{{Key: "$lt", Value: before}}}}
}

// oldestDueFilter selects due pending deliveries, for OldestDueAge.
func oldestDueFilter(now time.Time) bson.D {
	return bson.D{{Key: fStatus, Value: statusPending}, {Key: fDueAt, Value: bson.D{{Key: "$lte", Value: now}}}}
}

// statisticsPipeline counts deliveries per handler and status.
func statisticsPipeline() bson.A {
	return bson.A{
		bson.D{{Key: "$group", Value: bson.D{
			{Key: fID, Value: bson.D{{Key: "h", Value: "$" + fHandler}, {Key: "s", Value: "$" + fStatus}}},
			{Key: "n", Value: bson.D{{Key: "$sum", Value: 1}}},
		}}},
	}
}

// keyCounterUpdate reserves n sequences of a key: the counter document is
// created on first use and written inside the publishing transaction, so
// a second transaction publishing to the same key conflicts with it and
// retries after it ends. Sequences therefore follow commit order.
func keyCounterUpdate(n int) bson.D {
	return bson.D{{Key: "$inc", Value: bson.D{{Key: fSeq, Value: int64(n)}}}}
}
