package mongo

import (
	"context"
	"errors"
	"slices"

	"github.com/berkcansavur/relaybus/relaybus/driver"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// UpgradeBatchSize bounds the documents one step of the 0.1.0 upgrade
// reads and rewrites at once (one find and one bulkWrite per batch), so
// the upgrade of a large collection is many short commands, each of which
// can fail and be resumed by running Setup again.
const UpgradeBatchSize = 1000

// Setup checks that the server is a replica set member, creates the
// collections, seeds the 256 lane documents, upgrades a 0.1.0 database in
// place (see upgrade) and drops its indexes, and creates the 0.2.0
// indexes. It is idempotent and safe to run from several processes at once:
// an existing collection is not an error, a lane that exists is left
// alone ($setOnInsert), every upgrade write is conditional on the
// document still being in its 0.1.0 shape, createIndexes with an
// identical specification does nothing, and an index already dropped is
// not an error.
//
// MongoDB has no advisory lock to serialise this; it needs none, because
// no step depends on another process not running the same step.
func (s *Store) Setup(ctx context.Context) error {
	if err := s.checkReplicaSet(ctx); err != nil {
		return err
	}
	for _, name := range []string{s.events.Name(), s.deliveries.Name(), s.keys.Name(), s.lanes.Name(), s.history.Name(), s.paused.Name()} {
		// Collections are created here, not implicitly by the first insert:
		// MongoDB cannot always create a collection inside a transaction
		// (before 4.4, or with a non-local read concern), and publish and
		// completion are always inside one.
		if err := s.db.CreateCollection(ctx, name); err != nil && !namespaceExists(err) {
			return errorFrom("setup: create collection "+name, err)
		}
	}
	if err := s.seedLanes(ctx); err != nil {
		return err
	}
	names, err := s.deliveryIndexNames(ctx)
	if err != nil {
		return err
	}
	from010 := upgradeNeeded(names)
	if from010 {
		if err := s.upgrade(ctx); err != nil {
			return err
		}
		// Before the new indexes: the 0.2.0 per-key index has the key
		// pattern of 0.1.0's, and a server before 5.0 refuses a second
		// index on one key pattern even with another partial filter.
		for _, name := range obsoleteIndexes[:len(obsoleteIndexes)-1] {
			if err := s.dropIndex(ctx, name); err != nil {
				return err
			}
		}
	}
	if _, err := s.deliveries.Indexes().CreateMany(ctx, deliveryIndexes()); err != nil {
		return errorFrom("setup: create indexes of "+s.deliveries.Name(), err)
	}
	if _, err := s.events.Indexes().CreateMany(ctx, eventIndexes()); err != nil {
		return errorFrom("setup: create indexes of "+s.events.Name(), err)
	}
	if _, err := s.history.Indexes().CreateMany(ctx, historyIndexes()); err != nil {
		return errorFrom("setup: create indexes of "+s.history.Name(), err)
	}
	if from010 {
		// The 0.1.0 marker last of all: an upgrade that stops before this
		// point runs again, whole, at the next Setup.
		if err := s.dropIndex(ctx, indexLeaseExpiry010); err != nil {
			return err
		}
	}
	return nil
}

// helloReply is the part of the hello command's reply Setup reads.
type helloReply struct {
	SetName string `bson:"setName"`
	Msg     string `bson:"msg"` // "isdbgrid" on mongos
}

// checkReplicaSet runs hello: transactions (atomic publish, completion,
// the fences) need a replica set member or a mongos in front of one.
func (s *Store) checkReplicaSet(ctx context.Context) error {
	var reply helloReply
	if err := s.db.RunCommand(ctx, bson.D{{Key: "hello", Value: 1}}).Decode(&reply); err != nil {
		return errorFrom("setup: hello", err)
	}
	return replicaSetError(reply)
}

// errStandalone is returned by Setup on a standalone server.
var errStandalone = errors.New(errPrefix + "transactions need a replica set or a sharded cluster, and this server is a standalone; " +
	"start mongod with --replSet and run rs.initiate() (a single-member replica set is enough)")

func replicaSetError(reply helloReply) error {
	if reply.SetName == "" && reply.Msg != "isdbgrid" {
		return errStandalone
	}
	return nil
}

// namespaceExists reports the server's NamespaceExists error (code 48),
// which createCollection returns for a collection that exists.
func namespaceExists(err error) bool { return hasCode(err, codeNamespaceExists) }

const codeNamespaceExists = 48

// seedLanes makes sure the 256 lane documents exist: one bulkWrite of
// upserts, unordered (a lane another Setup created meanwhile does not
// stop the rest). An upsert whose filter is an equality on _id is retried
// by the server when a concurrent upsert inserted the same _id first
// (MongoDB 4.2+, "upsert with duplicate values"), and $setOnInsert leaves
// an existing lane untouched, so a running dispatcher's lanes are safe.
func (s *Store) seedLanes(ctx context.Context) error {
	_, err := s.lanes.BulkWrite(ctx, seedLaneModels(), options.BulkWrite().SetOrdered(false))
	return errorFrom("setup: seed lanes", err)
}

// seedLaneModels is one upsert per lane.
func seedLaneModels() []mongo.WriteModel {
	models := make([]mongo.WriteModel, driver.LaneCount)
	for lane := range driver.LaneCount {
		models[lane] = mongo.NewUpdateOneModel().
			SetFilter(bson.D{{Key: fID, Value: int32(lane)}}).
			SetUpdate(seedLaneUpdate).
			SetUpsert(true)
	}
	return models
}

// Index names. They are part of the schema: the upgrade drops the 0.1.0
// ones by name.
const (
	// 0.2.0.
	indexClaimLane        = "claim_queue_laneId_dueAt_id"
	indexKeyOrderPending  = "order_pending_handler_key_sequence"
	indexEventHandler     = "event_handler_unique" // also 0.1.0's, kept
	indexPurgeDead        = "purge_dead_updatedAt_id"
	indexEventsCreated    = "sweep_createdAt_id"
	indexHistoryCompleted = "purge_completedAt"

	// 0.1.0, dropped by the upgrade.
	indexClaim010       = "claim_status_dueAt"
	indexLeaseExpiry010 = "lease_status_leaseExpiresAt"
	indexKeyOrder010    = "order_handler_key_sequence"
	indexListStatus010  = "list_status_id"
	indexListHandler010 = "list_handler_id"
	indexPurge010       = "purge_status_completedAt"
)

// obsoleteIndexes are dropped by the upgrade, in this order: the lease
// expiry index is the marker of a 0.1.0 database (upgradeNeeded) and
// goes last.
var obsoleteIndexes = []string{
	indexClaim010, indexKeyOrder010, indexListStatus010, indexListHandler010, indexPurge010, indexLeaseExpiry010,
}

// upgradeNeeded reports a 0.1.0 deliveries collection: its lease expiry
// index exists. Only 0.1.0 creates it and the upgrade drops it last, so a
// fresh or upgraded database skips the upgrade's collection scans.
func upgradeNeeded(indexNames []string) bool {
	return slices.Contains(indexNames, indexLeaseExpiry010)
}

// deliveryIndexes is 0.2.0's index set on deliveries. Besides _id there
// are four, and no happy-path write changes a field in any of them: a
// claim writes only lanes, a completion deletes.
//
//   - claim (queue, laneId, dueAt, _id), partial on status pending: the
//     candidate read and the free-lane probe. queue leads so that a
//     parked backlog is a separate range the claim never reads; laneId
//     next so that the claim reads only the lanes it holds.
//   - per-key order (handler, key, sequence), partial on keyed pending
//     deliveries: the predecessor check and a parked key's head.
//   - (eventId, handler) unique: idempotent publish.
//   - dead-letter purge (updatedAt, _id), partial on status dead.
//
// Listing has no index: it is an admin scan in _id order (see
// DeliveryList).
func deliveryIndexes() []mongo.IndexModel {
	pending := bson.D{{Key: fStatus, Value: statusPending}}
	return []mongo.IndexModel{
		{
			Keys:    bson.D{{Key: fQueue, Value: 1}, {Key: fLaneID, Value: 1}, {Key: fDueAt, Value: 1}, {Key: fID, Value: 1}},
			Options: options.Index().SetName(indexClaimLane).SetPartialFilterExpression(pending),
		},
		{
			Keys: bson.D{{Key: fHandler, Value: 1}, {Key: fKey, Value: 1}, {Key: fSequence, Value: 1}},
			Options: options.Index().SetName(indexKeyOrderPending).SetPartialFilterExpression(bson.D{
				{Key: fKey, Value: bson.D{{Key: "$exists", Value: true}}},
				{Key: fStatus, Value: statusPending},
			}),
		},
		{
			Keys:    bson.D{{Key: fEventID, Value: 1}, {Key: fHandler, Value: 1}},
			Options: options.Index().SetName(indexEventHandler).SetUnique(true),
		},
		{
			Keys:    bson.D{{Key: fUpdatedAt, Value: 1}, {Key: fID, Value: 1}},
			Options: options.Index().SetName(indexPurgeDead).SetPartialFilterExpression(bson.D{{Key: fStatus, Value: statusDead}}),
		},
	}
}

// eventIndexes: the orphan sweep of Purge pages through old events in
// (createdAt, _id) order.
func eventIndexes() []mongo.IndexModel {
	return []mongo.IndexModel{{
		Keys:    bson.D{{Key: fCreatedAt, Value: 1}, {Key: fID, Value: 1}},
		Options: options.Index().SetName(indexEventsCreated),
	}}
}

// historyIndexes: Purge deletes history documents by completion time.
func historyIndexes() []mongo.IndexModel {
	return []mongo.IndexModel{{
		Keys:    bson.D{{Key: fCompletedAt, Value: 1}},
		Options: options.Index().SetName(indexHistoryCompleted),
	}}
}

// deliveryIndexNames lists the names of the deliveries indexes.
func (s *Store) deliveryIndexNames(ctx context.Context) ([]string, error) {
	specs, err := s.deliveries.Indexes().ListSpecifications(ctx)
	if err != nil {
		return nil, errorFrom("setup: list indexes", err)
	}
	names := make([]string, len(specs))
	for i, spec := range specs {
		names[i] = spec.Name
	}
	return names, nil
}

// dropIndex drops one index by name; one that is gone already (another
// Setup dropped it) is not an error.
func (s *Store) dropIndex(ctx context.Context, name string) error {
	err := s.deliveries.Indexes().DropOne(ctx, name)
	if err != nil && !indexNotFound(err) {
		return errorFrom("setup: drop index "+name, err)
	}
	return nil
}

// upgrade converts 0.1.0 documents in place, in this order:
//
//  1. processing deliveries become pending suspects, with their attempts
//     kept: 0.1.0 counted the running attempt at claim, and 0.2.0 counts
//     an attempt lost to a crash, so the count is the same. None is
//     buried, even on its final attempt: 0.1.0 had no suspects, so none
//     of them is known to be what stopped its process, and a takeover
//     buries only a delivery that was a suspect already (the PostgreSQL
//     upgrade does the same); its next attempt, alone, decides. Their
//     lease fields are removed.
//  2. lease fields left on any other delivery are removed.
//  3. every delivery without laneId gets laneId (driver.LaneOf, the
//     function publish uses), claims 0, suspect as step 1 left it (false
//     when unset), queue ready: in batches in _id order.
//  4. every event without handlers gets the handlers of all its
//     deliveries, completed ones included, so no handler that completed
//     under 0.1.0 runs again: in batches in _id order.
//
// Completed deliveries stay as they are: listed, counted and purged as
// completed until retention removes them. Each step is conditional on
// the 0.1.0 shape, so running it again after a failure (or at once from
// another process) redoes only what is left. Steps 1 and 2 are one
// updateMany each; they touch few documents (what was in flight) and
// were not worth batching.
func (s *Store) upgrade(ctx context.Context) error {
	if _, err := s.deliveries.UpdateMany(ctx, upgradeProcessingFilter, upgradePendingPipeline()); err != nil {
		return errorFrom("setup: upgrade: processing deliveries to pending suspects", err)
	}
	if _, err := s.deliveries.UpdateMany(ctx, upgradeLeaseFieldsFilter, upgradeUnsetLease); err != nil {
		return errorFrom("setup: upgrade: remove lease fields", err)
	}
	if err := s.backfillLanes(ctx); err != nil {
		return err
	}
	return s.backfillHandlers(ctx)
}

// The 0.1.0 lease fields of a delivery.
var leaseFields010 = bson.A{fLeaseOwner, fLeaseToken, fLeaseExpiresAt}

var upgradeProcessingFilter = bson.D{{Key: fStatus, Value: statusProcessing}}

// upgradePendingPipeline: pending and a suspect (due time kept, so it
// runs at once, alone), no lease. ($$NOW: the server's clock; Setup has
// no Now and the store reads no clock of its own.)
func upgradePendingPipeline() bson.A {
	return bson.A{
		bson.D{{Key: "$set", Value: bson.D{
			{Key: fStatus, Value: literal(statusPending)},
			{Key: fSuspect, Value: true},
			{Key: fUpdatedAt, Value: "$$NOW"},
		}}},
		bson.D{{Key: "$unset", Value: leaseFields010}},
	}
}

var upgradeLeaseFieldsFilter = bson.D{{Key: "$or", Value: bson.A{
	bson.D{{Key: fLeaseOwner, Value: bson.D{{Key: "$exists", Value: true}}}},
	bson.D{{Key: fLeaseToken, Value: bson.D{{Key: "$exists", Value: true}}}},
	bson.D{{Key: fLeaseExpiresAt, Value: bson.D{{Key: "$exists", Value: true}}}},
}}}

var upgradeUnsetLease = bson.D{{Key: "$unset", Value: bson.D{
	{Key: fLeaseOwner, Value: ""}, {Key: fLeaseToken, Value: ""}, {Key: fLeaseExpiresAt, Value: ""},
}}}

// missing is {$exists: false}.
var missing = bson.D{{Key: "$exists", Value: false}}

// laneBackfillPage selects the next batch of deliveries without laneId,
// after the last _id of the previous batch (nil: from the start), so
// each batch reads forward on the _id index instead of scanning again
// past the documents already done.
func laneBackfillPage(after *bson.ObjectID) bson.D {
	f := bson.D{{Key: fLaneID, Value: missing}}
	if after != nil {
		f = append(bson.D{{Key: fID, Value: bson.D{{Key: "$gt", Value: *after}}}}, f...)
	}
	return f
}

// laneBackfillRow is what the lane backfill reads of a delivery.
type laneBackfillRow struct {
	ID      bson.ObjectID `bson:"_id"`
	EventID string        `bson:"eventId"`
	Key     string        `bson:"key"`
}

// laneBackfillModels sets the 0.2.0 fields of each row, conditional on
// laneId still being absent (a second Setup writes nothing twice).
func laneBackfillModels(rows []laneBackfillRow) []mongo.WriteModel {
	models := make([]mongo.WriteModel, len(rows))
	for i, r := range rows {
		models[i] = mongo.NewUpdateOneModel().
			SetFilter(bson.D{{Key: fID, Value: r.ID}, {Key: fLaneID, Value: missing}}).
			// A pipeline, so that a suspect set by step 1 stays one.
			SetUpdate(bson.A{bson.D{{Key: "$set", Value: bson.D{
				{Key: fLaneID, Value: int32(driver.LaneOf(r.Key, r.EventID))},
				{Key: fClaims, Value: int64(0)},
				{Key: fSuspect, Value: bson.D{{Key: "$ifNull", Value: bson.A{field(fSuspect), false}}}},
				{Key: fQueue, Value: literal(queueReady)},
			}}}})
	}
	return models
}

// backfillLanes gives every 0.1.0 delivery its lane, UpgradeBatchSize at
// a time: one find and one unordered bulkWrite per batch.
func (s *Store) backfillLanes(ctx context.Context) error {
	var after *bson.ObjectID
	for {
		cur, err := s.deliveries.Find(ctx, laneBackfillPage(after), options.Find().
			SetSort(bson.D{{Key: fID, Value: 1}}).
			SetLimit(int64(s.upgradeBatch)).
			SetProjection(bson.D{{Key: fID, Value: 1}, {Key: fEventID, Value: 1}, {Key: fKey, Value: 1}}))
		if err != nil {
			return errorFrom("setup: upgrade: read deliveries without a lane", err)
		}
		var rows []laneBackfillRow
		if err := cur.All(ctx, &rows); err != nil {
			return errorFrom("setup: upgrade: read deliveries without a lane", err)
		}
		if len(rows) == 0 {
			return nil
		}
		if _, err := s.deliveries.BulkWrite(ctx, laneBackfillModels(rows), options.BulkWrite().SetOrdered(false)); err != nil {
			return errorFrom("setup: upgrade: set lanes", err)
		}
		if len(rows) < s.upgradeBatch {
			return nil
		}
		after = &rows[len(rows)-1].ID
	}
}

// handlersBackfillPage selects the next batch of events without
// handlers, in _id order after the last one done.
func handlersBackfillPage(after string, first bool) bson.D {
	f := bson.D{{Key: fHandlers, Value: missing}}
	if !first {
		f = append(bson.D{{Key: fID, Value: bson.D{{Key: "$gt", Value: after}}}}, f...)
	}
	return f
}

// handlersOfEventsPipeline collects the handlers of the deliveries of
// events (all statuses: a completed handler must be remembered). Served
// by the (eventId, handler) unique index.
func handlersOfEventsPipeline(events []string) bson.A {
	return bson.A{
		bson.D{{Key: "$match", Value: bson.D{{Key: fEventID, Value: in(events)}}}},
		bson.D{{Key: "$group", Value: bson.D{
			{Key: fID, Value: field(fEventID)},
			{Key: fHandlers, Value: bson.D{{Key: "$addToSet", Value: field(fHandler)}}},
		}}},
	}
}

// handlersBackfillModels sets each event's handlers (sorted, so the same
// data makes the same document; an event with no delivery left gets an
// empty list), conditional on handlers still being absent: an event that
// a 0.2.0 publish gave handlers meanwhile keeps them.
func handlersBackfillModels(events []string, found map[string][]string) []mongo.WriteModel {
	models := make([]mongo.WriteModel, len(events))
	for i, id := range events {
		hs := append([]string{}, found[id]...)
		slices.Sort(hs)
		models[i] = mongo.NewUpdateOneModel().
			SetFilter(bson.D{{Key: fID, Value: id}, {Key: fHandlers, Value: missing}}).
			SetUpdate(bson.D{{Key: "$set", Value: bson.D{{Key: fHandlers, Value: hs}}}})
	}
	return models
}

// backfillHandlers gives every 0.1.0 event its handlers, UpgradeBatchSize
// at a time: one find of events, one aggregation of their deliveries and
// one unordered bulkWrite per batch.
func (s *Store) backfillHandlers(ctx context.Context) error {
	after, first := "", true
	for {
		cur, err := s.events.Find(ctx, handlersBackfillPage(after, first), options.Find().
			SetSort(bson.D{{Key: fID, Value: 1}}).
			SetLimit(int64(s.upgradeBatch)).
			SetProjection(bson.D{{Key: fID, Value: 1}}))
		if err != nil {
			return errorFrom("setup: upgrade: read events without handlers", err)
		}
		var rows []struct {
			ID string `bson:"_id"`
		}
		if err := cur.All(ctx, &rows); err != nil {
			return errorFrom("setup: upgrade: read events without handlers", err)
		}
		if len(rows) == 0 {
			return nil
		}
		ids := make([]string, len(rows))
		for i, r := range rows {
			ids[i] = r.ID
		}
		found, err := s.handlersOf(ctx, ids)
		if err != nil {
			return err
		}
		if _, err := s.events.BulkWrite(ctx, handlersBackfillModels(ids, found), options.BulkWrite().SetOrdered(false)); err != nil {
			return errorFrom("setup: upgrade: set handlers", err)
		}
		if len(rows) < s.upgradeBatch {
			return nil
		}
		after, first = ids[len(ids)-1], false
	}
}

// handlersOf reads the handlers of the deliveries of events.
func (s *Store) handlersOf(ctx context.Context, events []string) (map[string][]string, error) {
	cur, err := s.deliveries.Aggregate(ctx, handlersOfEventsPipeline(events))
	if err != nil {
		return nil, errorFrom("setup: upgrade: read handlers of events", err)
	}
	var rows []struct {
		ID       string   `bson:"_id"`
		Handlers []string `bson:"handlers"`
	}
	if err := cur.All(ctx, &rows); err != nil {
		return nil, errorFrom("setup: upgrade: read handlers of events", err)
	}
	out := make(map[string][]string, len(rows))
	for _, r := range rows {
		out[r.ID] = r.Handlers
	}
	return out, nil
}
