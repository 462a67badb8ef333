package mongo

import (
	"strconv"
	"time"

	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// Filters, update documents and pipelines, built by pure functions so
// they are tested without a server (filters_test.go renders each one as
// the Extended JSON of MongoDB's manual). Every time in them has been
// through bsonTime. A string that comes from a caller (an owner name, an
// error text) goes into an aggregation pipeline only inside $literal: a
// pipeline reads a string that starts with "$" as a field path. They
// stand in this one file, past 500 lines, on purpose: each filter is
// read beside the others that must select the same documents (a claim's
// and its recheck's, a purge's read and its delete) and beside the
// indexes of setup.go that serve them.

var (
	statusPending    = string(relaytype.StatusPending)
	statusProcessing = string(relaytype.StatusProcessing) // stored only by 0.1.0
	statusCompleted  = string(relaytype.StatusCompleted)  // stored only by 0.1.0
	statusDead       = string(relaytype.StatusDead)
)

// takeoverBuryError is the LastError of a delivery buried because the
// attempt a takeover charged was its last one.
const takeoverBuryError = "lease expired after the final attempt"

func in(values any) bson.D  { return bson.D{{Key: "$in", Value: values}} }
func nin(values any) bson.D { return bson.D{{Key: "$nin", Value: values}} }
func lte(v any) bson.D      { return bson.D{{Key: "$lte", Value: v}} }
func literal(v any) bson.D  { return bson.D{{Key: "$literal", Value: v}} }
func field(name string) string {
	return "$" + name
}

// withoutIDs adds {_id: {$nin: ids}} to f when ids is not empty.
func withoutIDs(f bson.D, ids []bson.ObjectID) bson.D {
	if len(ids) == 0 {
		return f
	}
	return append(f, bson.E{Key: fID, Value: nin(ids)})
}

// ---------------------------------------------------------------------
// Deliveries: what a claim reads.

// candidateFilter selects the due, ready deliveries of handlers in lanes,
// leaving out exclude (the deliveries already in flight or lost in those
// lanes). Its equality on queue and laneId and its range on dueAt are the
// claim index (queue, laneId, dueAt, _id), partial on status pending; the
// handler is checked on the fetched document. exclude is checked on the
// index key (_id is in it), so an in-flight delivery costs an index entry
// read and no document fetch.
func candidateFilter(lanes []int32, handlers []string, now time.Time, exclude []bson.ObjectID) bson.D {
	f := bson.D{
		{Key: fQueue, Value: queueReady},
		{Key: fLaneID, Value: in(lanes)},
		{Key: fStatus, Value: statusPending},
		{Key: fDueAt, Value: lte(now)},
		{Key: fHandler, Value: in(handlers)},
	}
	return withoutIDs(f, exclude)
}

// candidateSort is the claim order: due time, then ID. With equality on
// queue and at most MaxLanesPerSortedQuery lanes in the $in, the server
// reads the claim index as one sorted scan per lane merged in this order
// (the ESR rule: an $in of up to 200 values counts as equality for a
// sort), so a limit stops the scan early instead of sorting every due
// delivery.
var candidateSort = bson.D{{Key: fDueAt, Value: 1}, {Key: fID, Value: 1}}

// candidateProjection is what a claim decides on; the picked documents
// are then read whole (picksFilter).
var candidateProjection = bson.D{
	{Key: fID, Value: 1}, {Key: fLaneID, Value: 1}, {Key: fHandler, Value: 1}, {Key: fKey, Value: 1},
	{Key: fSequence, Value: 1}, {Key: fDueAt, Value: 1}, {Key: fAttempts, Value: 1}, {Key: fMaxAttempts, Value: 1},
	{Key: fClaims, Value: 1}, {Key: fSuspect, Value: 1},
}

// probeFilter finds due ready deliveries of handlers in lanes that nobody
// holds: which free lanes have work worth taking. Same index and order
// as candidateFilter.
func probeFilter(lanes []int32, handlers []string, now time.Time) bson.D {
	return bson.D{
		{Key: fQueue, Value: queueReady},
		{Key: fLaneID, Value: in(lanes)},
		{Key: fStatus, Value: statusPending},
		{Key: fDueAt, Value: lte(now)},
		{Key: fHandler, Value: in(handlers)},
	}
}

// probeProjection is what a probe needs: the lane, in claim order.
var probeProjection = bson.D{{Key: fID, Value: 1}, {Key: fLaneID, Value: 1}, {Key: fDueAt, Value: 1}}

// keyHeadFilter selects the pending deliveries of one handler and key;
// sorted by keyHeadSort and limited to one, it reads the key's lowest
// pending sequence through the per-key index, parked or not.
func keyHeadFilter(handler, key string) bson.D {
	return bson.D{{Key: fHandler, Value: handler}, {Key: fKey, Value: key}, {Key: fStatus, Value: statusPending}}
}

var keyHeadSort = bson.D{{Key: fSequence, Value: 1}}

// keyHead is one (handler, key) whose head a claim considers: the
// delivery with sequence seq.
type keyHead struct {
	handler, key string
	seq          int64
}

// predecessorPipeline returns, for each head, its (handler, key) if a
// pending delivery of that handler and key has a lower sequence: the head
// must then wait. Each $or branch is an equality on handler and key and a
// range on sequence, served by the partial per-key index (keyed and
// pending only), so only the predecessors themselves are read.
func predecessorPipeline(heads []keyHead) bson.A {
	or := make(bson.A, len(heads))
	for i, h := range heads {
		or[i] = bson.D{
			{Key: fHandler, Value: h.handler},
			{Key: fKey, Value: h.key},
			{Key: fSequence, Value: bson.D{{Key: "$lt", Value: h.seq}}},
			{Key: fStatus, Value: statusPending},
		}
	}
	return bson.A{
		bson.D{{Key: "$match", Value: bson.D{{Key: "$or", Value: or}}}},
		bson.D{{Key: "$group", Value: bson.D{{Key: fID, Value: bson.D{{Key: "h", Value: field(fHandler)}, {Key: "k", Value: field(fKey)}}}}}},
	}
}

// idsFilter selects deliveries by ID.
func idsFilter(ids []bson.ObjectID) bson.D { return bson.D{{Key: fID, Value: in(ids)}} }

// inFlightProjection is what a claim needs to know of the deliveries its
// lanes list as in flight: whether each still exists as a pending
// delivery, and its key (a key with a delivery in flight runs nothing
// else).
var inFlightProjection = bson.D{{Key: fID, Value: 1}, {Key: fStatus, Value: 1}, {Key: fHandler, Value: 1}, {Key: fKey, Value: 1}}

// picksFilter reads the picked deliveries whole, still pending.
func picksFilter(ids []bson.ObjectID) bson.D {
	return bson.D{{Key: fID, Value: in(ids)}, {Key: fStatus, Value: statusPending}}
}

// ---------------------------------------------------------------------
// Deliveries: the writes of the rare paths (no happy-path write changes a
// delivery: a claim writes lanes, a completion deletes).

// chargeFilter selects the lost deliveries of lane that still exist and
// are pending: a completion may have deleted some, a takeover charges
// only what is left.
func chargeFilter(ids []bson.ObjectID, lane int32) bson.D {
	return bson.D{{Key: fID, Value: in(ids)}, {Key: fLaneID, Value: lane}, {Key: fStatus, Value: statusPending}}
}

// chargePipeline charges a lost delivery the attempt its crashed holder
// spent: attempts + 1, claims + 1 (every token of the lost claim is now
// stale), suspect, and, when that spends its budget and it was a suspect
// already, dead with takeoverBuryError (one that was not may only have run
// beside the delivery that crashed the process: its next attempt, alone,
// decides; docs/lane-protocol.md, variant BURY_ANY). An update pipeline,
// so the budget test reads the document being updated (atomic per
// document); the expressions of one $set stage read the document as it
// was before the stage, so $suspect is the old mark.
func chargePipeline(now time.Time) bson.A {
	spent := bson.D{{Key: "$and", Value: bson.A{
		bson.D{{Key: "$eq", Value: bson.A{field(fSuspect), true}}},
		bson.D{{Key: "$gte", Value: bson.A{bson.D{{Key: "$add", Value: bson.A{field(fAttempts), 1}}}, field(fMaxAttempts)}}},
	}}}
	return bson.A{bson.D{{Key: "$set", Value: bson.D{
		{Key: fAttempts, Value: bson.D{{Key: "$add", Value: bson.A{field(fAttempts), 1}}}},
		{Key: fClaims, Value: bson.D{{Key: "$add", Value: bson.A{field(fClaims), 1}}}},
		{Key: fSuspect, Value: true},
		{Key: fStatus, Value: bson.D{{Key: "$cond", Value: bson.A{spent, literal(statusDead), field(fStatus)}}}},
		{Key: fLastError, Value: bson.D{{Key: "$cond", Value: bson.A{spent, literal(takeoverBuryError), field(fLastError)}}}},
		{Key: fUpdatedAt, Value: now},
	}}}}
}

// fencedDeliveryFilter is the delivery half of a fence: the delivery of
// the token's lane, still pending, whose claims counter still equals the
// token's. Every write that ends a claim raises claims, so a token of an
// older claim matches nothing.
func fencedDeliveryFilter(ref leaseRef) bson.D {
	return bson.D{
		{Key: fID, Value: ref.id},
		{Key: fLaneID, Value: int32(ref.tok.Lane)},
		{Key: fClaims, Value: ref.tok.Claims},
		{Key: fStatus, Value: statusPending},
	}
}

// rescheduleUpdate ends a failed attempt: counted, the claim ended, due
// again at availableAt, no longer suspect (it failed by itself).
func rescheduleUpdate(lastError string, availableAt, now time.Time) bson.D {
	return bson.D{
		{Key: "$inc", Value: bson.D{{Key: fAttempts, Value: int64(1)}, {Key: fClaims, Value: int64(1)}}},
		{Key: "$set", Value: bson.D{
			{Key: fDueAt, Value: availableAt},
			{Key: fLastError, Value: driver.TruncateError(lastError)},
			{Key: fSuspect, Value: false},
			{Key: fUpdatedAt, Value: now},
		}},
	}
}

// buryUpdate ends a failed attempt and the delivery: dead.
func buryUpdate(lastError string, now time.Time) bson.D {
	return bson.D{
		{Key: "$inc", Value: bson.D{{Key: fAttempts, Value: int64(1)}, {Key: fClaims, Value: int64(1)}}},
		{Key: "$set", Value: bson.D{
			{Key: fStatus, Value: statusDead},
			{Key: fLastError, Value: driver.TruncateError(lastError)},
			{Key: fSuspect, Value: false},
			{Key: fUpdatedAt, Value: now},
		}},
	}
}

// releaseUpdate ends a claim without spending an attempt: only claims
// moves. Due time and suspect are kept, so the delivery keeps its place.
func releaseUpdate(now, availableAt time.Time) bson.D {
	u := bson.D{
		{Key: "$inc", Value: bson.D{{Key: fClaims, Value: int64(1)}}},
		{Key: "$set", Value: bson.D{{Key: fUpdatedAt, Value: now}}},
	}
	if !availableAt.IsZero() {
		// Due again no sooner than availableAt (a batch held back to
		// fill); never sooner than it was.
		u = append(u, bson.E{Key: "$max", Value: bson.D{{Key: fDueAt, Value: bsonTime(availableAt)}}})
	}
	return u
}

// releaseManyFilter selects the deliveries a relinquish releases: those
// of the lanes' inFlight lists that still exist and are pending.
func releaseManyFilter(ids []bson.ObjectID) bson.D {
	return bson.D{{Key: fID, Value: in(ids)}, {Key: fStatus, Value: statusPending}}
}

func requeueFilter(id bson.ObjectID) bson.D {
	return bson.D{{Key: fID, Value: id}, {Key: fStatus, Value: statusDead}}
}

// requeueUpdate makes a dead delivery pending, due now, in the claim
// index, with a fresh attempt budget; claims + 1 so that no token of a
// claim before its death opens it. LastError is kept: it says why it died.
func requeueUpdate(now time.Time) bson.D {
	return bson.D{
		{Key: "$set", Value: bson.D{
			{Key: fStatus, Value: statusPending},
			{Key: fAttempts, Value: int64(0)},
			{Key: fDueAt, Value: now},
			{Key: fSuspect, Value: false},
			{Key: fQueue, Value: queueReady},
			{Key: fUpdatedAt, Value: now},
		}},
		{Key: "$inc", Value: bson.D{{Key: fClaims, Value: int64(1)}}},
	}
}

// parkFilter selects the ready pending deliveries of one handler and key
// in lane with a sequence above afterSeq: the backlog behind the key's
// head, which cannot run before the head has finished.
func parkFilter(lane int32, handler, key string, afterSeq int64) bson.D {
	return bson.D{
		{Key: fLaneID, Value: lane},
		{Key: fHandler, Value: handler},
		{Key: fKey, Value: key},
		{Key: fStatus, Value: statusPending},
		{Key: fQueue, Value: queueReady},
		{Key: fSequence, Value: bson.D{{Key: "$gt", Value: afterSeq}}},
	}
}

// parkUpdate moves a delivery out of the claim index's ready range.
var parkUpdate = bson.D{{Key: "$set", Value: bson.D{{Key: fQueue, Value: queueParked}}}}

// ---------------------------------------------------------------------
// Lanes.

// seedLaneUpdate creates a lane document that does not exist and leaves
// an existing one alone ($setOnInsert applies only when the upsert
// inserts).
var seedLaneUpdate = bson.D{{Key: "$setOnInsert", Value: bson.D{
	{Key: fEpoch, Value: int64(0)},
	{Key: fOwner, Value: nil},
	{Key: fHolder, Value: nil},
	{Key: fLeaseExpiresAt, Value: nil},
	{Key: fInFlight, Value: bson.A{}},
	{Key: fLost, Value: bson.A{}},
	{Key: fParkedKeys, Value: bson.A{}},
}}}

// heldLanesFilter selects the lanes (owner, holder) holds under a live
// lease. A lane of the same owner but another holder (the process before
// a restart) is not held: it is taken over when its lease expires.
func heldLanesFilter(owner, holder string, now time.Time) bson.D {
	return bson.D{
		{Key: fOwner, Value: owner},
		{Key: fHolder, Value: holder},
		{Key: fLeaseExpiresAt, Value: bson.D{{Key: "$gt", Value: now}}},
	}
}

// freeOrExpired is the condition of a lane anyone may take: no owner, or
// a lease that has expired (its holder stopped renewing: a takeover).
func freeOrExpired(now time.Time) bson.D {
	return bson.D{{Key: "$or", Value: bson.A{
		bson.D{{Key: fOwner, Value: nil}},
		bson.D{{Key: fLeaseExpiresAt, Value: lte(now)}},
	}}}
}

// freeLanesProjection: a claim deciding which lanes to take needs their
// epoch (the take is conditional on it) and whether keys are parked
// there; not their inFlight lists, which the take moves on the server.
var freeLanesProjection = bson.D{{Key: fID, Value: 1}, {Key: fEpoch, Value: 1}, {Key: fParkedKeys, Value: 1}}

// takeLaneFilter matches the lane only if it is still free or expired and
// still at the epoch the claim read: of two claimers taking the same
// lane, the second finds the epoch raised and matches nothing.
func takeLaneFilter(lane int32, epoch int64, now time.Time) bson.D {
	return append(bson.D{{Key: fID, Value: lane}, {Key: fEpoch, Value: epoch}}, freeOrExpired(now)...)
}

// takeLanePipeline takes a lane: epoch + 1, the new owner, holder and
// expiry, and the lane's inFlight ids moved into lost in this same write
// (an update pipeline reads the document it updates, atomically), so no
// delivery of the previous holder is forgotten between the take and its
// charge. A lane that was free has an empty inFlight and lost stays as
// it was.
func takeLanePipeline(owner, holder string, expiresAt time.Time) bson.A {
	return bson.A{bson.D{{Key: "$set", Value: bson.D{
		{Key: fEpoch, Value: bson.D{{Key: "$add", Value: bson.A{field(fEpoch), int64(1)}}}},
		{Key: fOwner, Value: literal(owner)},
		{Key: fHolder, Value: literal(holder)},
		{Key: fLeaseExpiresAt, Value: expiresAt},
		{Key: fLost, Value: bson.D{{Key: "$concatArrays", Value: bson.A{
			bson.D{{Key: "$ifNull", Value: bson.A{field(fLost), bson.A{}}}},
			bson.D{{Key: "$ifNull", Value: bson.A{field(fInFlight), bson.A{}}}},
		}}}},
		{Key: fInFlight, Value: literal(bson.A{})},
	}}}}
}

// laneOfHolderFilter matches lane only while holder holds it at epoch.
func laneOfHolderFilter(lane int32, epoch int64, holder string) bson.D {
	return bson.D{{Key: fID, Value: lane}, {Key: fEpoch, Value: epoch}, {Key: fHolder, Value: holder}}
}

// clearLostUpdate removes charged ids from lost.
func clearLostUpdate(ids []bson.ObjectID) bson.D {
	return bson.D{{Key: "$pullAll", Value: bson.D{{Key: fLost, Value: ids}}}}
}

// recordLaneFilter matches a lane only while (owner, holder) holds it at
// the epoch the claim read.
func recordLaneFilter(lane int32, epoch int64, owner, holder string) bson.D {
	return bson.D{{Key: fID, Value: lane}, {Key: fEpoch, Value: epoch}, {Key: fOwner, Value: owner}, {Key: fHolder, Value: holder}}
}

// withoutValues is an expression: the elements of the array field name
// that are not in drop.
func withoutValues(name string, drop any) bson.D {
	return bson.D{{Key: "$filter", Value: bson.D{
		{Key: "input", Value: bson.D{{Key: "$ifNull", Value: bson.A{field(name), bson.A{}}}}},
		{Key: "as", Value: "v"},
		{Key: "cond", Value: bson.D{{Key: "$not", Value: bson.A{bson.D{{Key: "$in", Value: bson.A{"$$v", literal(drop)}}}}}}},
	}}}
}

// recordLanePipeline records a claim in one lane: inFlight loses the
// dropped ids (deliveries that are gone) and gains the picks, the expiry
// is pushed to at least expiresAt ($max: a renewal that went further is
// kept), and the keys found drained leave parkedKeys. One pipeline, so
// dropping and adding ids of the same array is one atomic write (the
// $pull and $push operators may not name the same field in one update).
// Ids another write removed meanwhile (a reschedule's $pull) are not
// brought back: the pipeline filters the array as it is at the write.
func recordLanePipeline(dropped, picks []bson.ObjectID, drained []parkedKey, expiresAt time.Time) bson.A {
	return bson.A{bson.D{{Key: "$set", Value: bson.D{
		{Key: fInFlight, Value: bson.D{{Key: "$concatArrays", Value: bson.A{withoutValues(fInFlight, nonNil(dropped)), literal(nonNil(picks))}}}},
		{Key: fLeaseExpiresAt, Value: bson.D{{Key: "$max", Value: bson.A{field(fLeaseExpiresAt), expiresAt}}}},
		{Key: fParkedKeys, Value: withoutValues(fParkedKeys, nonNilKeys(drained))},
	}}}}
}

// handBackFilter matches a held lane that has nothing in flight any more
// (every id it lists is one the claim found gone) and nothing lost.
func handBackFilter(lane int32, epoch int64, owner, holder string, gone []bson.ObjectID) bson.D {
	return append(recordLaneFilter(lane, epoch, owner, holder),
		bson.E{Key: fLost, Value: bson.D{{Key: "$size", Value: 0}}},
		bson.E{Key: "$expr", Value: bson.D{{Key: "$setIsSubset", Value: bson.A{
			bson.D{{Key: "$ifNull", Value: bson.A{field(fInFlight), bson.A{}}}}, literal(nonNil(gone)),
		}}}},
	)
}

// handBackPipeline gives a lane back: no owner, holder or expiry, nothing
// in flight, the epoch kept (the next taker raises it), drained keys out
// of parkedKeys.
func handBackPipeline(drained []parkedKey) bson.A {
	return bson.A{bson.D{{Key: "$set", Value: bson.D{
		{Key: fOwner, Value: nil},
		{Key: fHolder, Value: nil},
		{Key: fLeaseExpiresAt, Value: nil},
		{Key: fInFlight, Value: literal(bson.A{})},
		{Key: fParkedKeys, Value: withoutValues(fParkedKeys, nonNilKeys(drained))},
	}}}}
}

// giveBackUpdate removes ids from a lane's inFlight: a claim that could
// not return them hands them back.
func giveBackUpdate(ids []bson.ObjectID) bson.D {
	return bson.D{{Key: "$pullAll", Value: bson.D{{Key: fInFlight, Value: ids}}}}
}

// laneEpoch is one lane at one epoch.
type laneEpoch struct {
	lane  int32
	epoch int64
}

// renewFilter matches the lanes (owner, holder) holds at the epochs of
// the leases being renewed.
func renewFilter(owner, holder string, lanes []laneEpoch) bson.D {
	or := make(bson.A, len(lanes))
	for i, l := range lanes {
		or[i] = bson.D{{Key: fID, Value: l.lane}, {Key: fEpoch, Value: l.epoch}}
	}
	return bson.D{{Key: fOwner, Value: owner}, {Key: fHolder, Value: holder}, {Key: "$or", Value: or}}
}

// renewUpdate pushes a lane's expiry to at least expiresAt. $max, so
// renewing some leases of a lane never shortens the lease that a later
// claim in the same lane set.
func renewUpdate(expiresAt time.Time) bson.D {
	return bson.D{{Key: "$max", Value: bson.D{{Key: fLeaseExpiresAt, Value: expiresAt}}}}
}

// lanesFilter selects lanes by number.
func lanesFilter(lanes []int32) bson.D { return bson.D{{Key: fID, Value: in(lanes)}} }

// fenceProjection reads what a fence checks of a lane: epoch, owner,
// holder, expiry, and which of ids it lists in flight (a find projection
// with an aggregation expression, so a long inFlight list is not sent
// back whole).
func fenceProjection(ids []bson.ObjectID) bson.D {
	return bson.D{
		{Key: fEpoch, Value: 1}, {Key: fOwner, Value: 1}, {Key: fHolder, Value: 1}, {Key: fLeaseExpiresAt, Value: 1},
		{Key: fInFlight, Value: bson.D{{Key: "$filter", Value: bson.D{
			{Key: "input", Value: bson.D{{Key: "$ifNull", Value: bson.A{field(fInFlight), bson.A{}}}}},
			{Key: "as", Value: "v"},
			{Key: "cond", Value: bson.D{{Key: "$in", Value: bson.A{"$$v", literal(nonNil(ids))}}}},
		}}}},
	}
}

// fenceLaneFilter is the lane half of a fence, as a write's filter: the
// token's lane at the token's epoch, still listing the delivery in
// flight.
func fenceLaneFilter(ref leaseRef) bson.D {
	return bson.D{{Key: fID, Value: int32(ref.tok.Lane)}, {Key: fEpoch, Value: ref.tok.Epoch}, {Key: fInFlight, Value: ref.id}}
}

// pullInFlightUpdate ends a delivery's claim in its lane.
func pullInFlightUpdate(id bson.ObjectID) bson.D {
	return bson.D{{Key: "$pull", Value: bson.D{{Key: fInFlight, Value: id}}}}
}

// ownedLanesFilter selects every lane (owner, holder) holds, expired or
// not: a relinquish gives back even a lane whose lease ran out, as long
// as nobody took it.
func ownedLanesFilter(owner, holder string) bson.D {
	return bson.D{{Key: fOwner, Value: owner}, {Key: fHolder, Value: holder}}
}

// relinquishLaneUpdate gives a lane back with nothing in flight. lost
// and parkedKeys stay: they belong to the lane, not to its holder.
var relinquishLaneUpdate = bson.D{{Key: "$set", Value: bson.D{
	{Key: fOwner, Value: nil},
	{Key: fHolder, Value: nil},
	{Key: fLeaseExpiresAt, Value: nil},
	{Key: fInFlight, Value: bson.A{}},
}}}

// parkLaneFilter matches the lane while holder holds it at epoch and
// parkedKeys either lists key already or has room for it (fewer than
// MaxParkedKeysPerLane entries: the element at index Max-1 is absent).
func parkLaneFilter(lane int32, epoch int64, holder string, key parkedKey) bson.D {
	return append(laneOfHolderFilter(lane, epoch, holder), bson.E{Key: "$or", Value: bson.A{
		bson.D{{Key: fParkedKeys, Value: key}},
		bson.D{{Key: fParkedKeys + "." + strconv.Itoa(MaxParkedKeysPerLane-1), Value: bson.D{{Key: "$exists", Value: false}}}},
	}})
}

// parkLaneUpdate lists key among the lane's parked keys.
func parkLaneUpdate(key parkedKey) bson.D {
	return bson.D{{Key: "$addToSet", Value: bson.D{{Key: fParkedKeys, Value: key}}}}
}

// ownedLanesProjection: what listings and statistics need of the lanes
// that have an owner, to show their in-flight deliveries as processing.
var ownedLanesProjection = bson.D{
	{Key: fEpoch, Value: 1}, {Key: fOwner, Value: 1}, {Key: fLeaseExpiresAt, Value: 1}, {Key: fInFlight, Value: 1},
}

// ownedFilter selects the lanes that have an owner.
var ownedFilter = bson.D{{Key: fOwner, Value: bson.D{{Key: "$ne", Value: nil}}}}

// ---------------------------------------------------------------------
// Listing, statistics, purge.

// listFilter turns DeliveryList's filters into a query of the deliveries
// or the history collection (status is applied by the caller, who knows
// which collection holds which status); after is the decoded cursor.
func listFilter(p *driver.DeliveryListParams, after *bson.ObjectID) bson.D {
	f := bson.D{}
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

// purgeCompletedFilter selects deliveries completed under 0.1.0 (0.2.0
// deletes them) before a time.
func purgeCompletedFilter(before time.Time) bson.D {
	return bson.D{{Key: fStatus, Value: statusCompleted}, {Key: fCompletedAt, Value: bson.D{{Key: "$lt", Value: before}}}}
}

// purgeHistoryFilter selects history documents completed before a time.
func purgeHistoryFilter(before time.Time) bson.D {
	return bson.D{{Key: fCompletedAt, Value: bson.D{{Key: "$lt", Value: before}}}}
}

func purgeDeadFilter(before time.Time) bson.D {
	return bson.D{{Key: fStatus, Value: statusDead}, {Key: fUpdatedAt, Value: bson.D{{Key: "$lt", Value: before}}}}
}

// purgeDeleteFilter names the IDs a purge read and repeats its condition.
func purgeDeleteFilter(ids bson.A, filter bson.D) bson.D {
	return append(bson.D{{Key: fID, Value: in(ids)}}, filter...)
}

// sweepEventsFilter pages through events created before a time, in
// (createdAt, _id) order, after the last one of the previous page.
func sweepEventsFilter(before time.Time, afterCreated *time.Time, afterID string) bson.D {
	f := bson.D{{Key: fCreatedAt, Value: bson.D{{Key: "$lt", Value: before}}}}
	if afterCreated != nil {
		f = append(f, bson.E{Key: "$or", Value: bson.A{
			bson.D{{Key: fCreatedAt, Value: bson.D{{Key: "$gt", Value: *afterCreated}}}},
			bson.D{{Key: fCreatedAt, Value: *afterCreated}, {Key: fID, Value: bson.D{{Key: "$gt", Value: afterID}}}},
		}})
	}
	return f
}

var sweepEventsSort = bson.D{{Key: fCreatedAt, Value: 1}, {Key: fID, Value: 1}}

// oldestDueFilter selects due pending deliveries that are not in flight.
func oldestDueFilter(now time.Time, inFlight []bson.ObjectID) bson.D {
	return withoutIDs(bson.D{{Key: fStatus, Value: statusPending}, {Key: fDueAt, Value: lte(now)}}, inFlight)
}

// oldestDuePipeline finds each handler's oldest due pending delivery that
// is not in flight (oldestDueFilter): its due time.
func oldestDuePipeline(now time.Time, inFlight []bson.ObjectID) bson.A {
	return bson.A{
		bson.D{{Key: "$match", Value: oldestDueFilter(now, inFlight)}},
		bson.D{{Key: "$group", Value: bson.D{
			{Key: fID, Value: field(fHandler)},
			{Key: "due", Value: bson.D{{Key: "$min", Value: field(fDueAt)}}},
		}}},
	}
}

// statisticsPipeline counts deliveries (or history documents) per
// handler and status.
func statisticsPipeline() bson.A {
	return bson.A{
		bson.D{{Key: "$group", Value: bson.D{
			{Key: fID, Value: bson.D{{Key: "h", Value: field(fHandler)}, {Key: "s", Value: bson.D{{Key: "$ifNull", Value: bson.A{field(fStatus), statusCompleted}}}}}},
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

// addHandlersUpdate lists more handlers on an existing event.
func addHandlersUpdate(handlers []string) bson.D {
	return bson.D{{Key: "$addToSet", Value: bson.D{{Key: fHandlers, Value: bson.D{{Key: "$each", Value: handlers}}}}}}
}

// nonNil returns ids, or an empty slice for nil: a nil slice encodes as
// BSON null, which $in, $setIsSubset and $concatArrays refuse.
func nonNil(ids []bson.ObjectID) []bson.ObjectID {
	if ids == nil {
		return []bson.ObjectID{}
	}
	return ids
}

func nonNilKeys(keys []parkedKey) []parkedKey {
	if keys == nil {
		return []parkedKey{}
	}
	return keys
}
