// Package mongo is the relaybus store on MongoDB (mongo-driver/v2): the
// 0.2.0 lane-lease design of docs/lane-protocol.md, in the form MongoDB's
// atomicity allows. Workers lease lanes, not deliveries; a claim writes
// only lane documents; a completion deletes the delivery and writes no
// lane.
//
// # Status: not run against a server
//
// This code was written on a machine without MongoDB (no server, no
// Docker engine, no image to pull), against MongoDB's documentation and
// the driver's source. Nothing in it that talks to a server has been
// executed. Treat the store as unverified until TestConformance and the
// TestIntegration* tests have passed against a replica set
// (RELAYBUS_TEST_MONGO_URI=mongodb://... go test ./relaybus/mongo).
//
// What has run (go test ./relaybus/mongo, no server):
//
//   - every filter, update document and update pipeline, rendered as
//     Extended JSON and compared with what the manual's operators mean;
//   - the claim's decisions: per-key heads, predecessor checks, the suspect
//     rule, per-lane room, lane ranking and chunking, the lane writes a
//     claim plans, park requests, which lanes a take won and a record
//     holds;
//   - completion fences, renewal results, listing sources and paging,
//     statistics folding, orphan events, handlers of republished events;
//   - the transaction runner's retry decisions (txDecision) and its loop
//     against a client whose server does not exist (starting, aborting
//     and committing a transaction that ran no operation sends nothing);
//   - the index set, the 0.1.0 marker and drop order, lane seeding, the
//     upgrade's documents and batch models, the 0.1.0 fixture's shape;
//   - documents and their BSON round trips, lease and token parsing,
//     option validation, and every path that ends before a round trip
//     (invalid params, malformed tokens, foreign IDs, ended transactions).
//
// What has not run (every one of these talks to a server):
//
//   - Setup: hello, createCollection, the lane seeding bulkWrite,
//     listIndexes, createIndexes, dropIndex, and the whole 0.1.0 upgrade
//     (updateMany with pipelines, the batched backfills, the handlers
//     aggregation);
//   - EventPublish and EventPublishTx (reads, the key counter, inserts,
//     the handlers bulkWrite) and the driver's WithTransaction around it;
//   - DeliveryClaim: every read (held and free lanes, in-flight
//     deliveries, candidates, parked heads, predecessors, probes, picks),
//     the take and record bulkWrites and their read-backs, the charge and
//     park transactions, the give-back bulkWrite;
//   - DeliveryComplete, DeliveryCompleteMany, DeliveryCompleteTx (the
//     snapshot transaction: lane and delivery reads, deleteMany, history
//     insertMany), and the write conflict it must meet against a takeover;
//   - DeliveryReschedule, DeliveryBury, DeliveryRelease (the two-write
//     transaction), LeaseExtend (updateMany and read-back),
//     OwnerRelinquish (its transaction);
//   - DeliveryRequeue, DeliveryList, Statistics, Purge (including the
//     orphan sweep's transactions);
//   - WakeListen's change stream (wake.go: Watch, Next, the replica-set
//     refusal on a standalone server);
//   - runTx with a real transaction: retries after a real write conflict,
//     a commit with an unknown result;
//   - the conformance suite (TestConformance) and the store's own
//     integration tests (TestIntegration*), which skip here and say why.
//
// # Usage
//
//	client, err := mongo.Connect(options.Client().ApplyURI(uri)) // the driver
//	store, err := rbmongo.New(client, &rbmongo.Options{Database: "app"})
//	err = store.Setup(ctx)
//
//	tx, err := store.TxBegin(ctx) // a session context in a transaction
//	_, err = orders.InsertOne(tx, order) // your writes, same transaction
//	err = bus.PublishTx(ctx, tx, event)
//	err = store.TxCommit(ctx, tx)
//
// Transactions need a replica set (a single member is enough) or a
// sharded cluster; Setup refuses a standalone server. The store needs
// MongoDB 4.4 or later: update pipelines ($set, $unset, $$NOW: 4.2) and
// aggregation expressions in find projections (4.4). Every collection is
// written with majority write concern (see New).
//
// # Collections
//
//   - <prefix>events: _id = event ID, type, key, sequence, payload,
//     headers, createdAt, and handlers: every handler the event ever had a
//     delivery for. A delivery is deleted when it completes; this list is
//     what keeps a republished or redelivered event from running a
//     completed handler again.
//   - <prefix>deliveries: _id = ObjectID, eventId, handler, status
//     (pending or dead; completed only on rows left by 0.1.0), attempts
//     (attempts that have ended), maxAttempts, dueAt, laneId
//     (driver.LaneOf of the key, or of the event ID), claims (raised by
//     every write that ends a claim), suspect, queue (claim-index
//     membership: ready, or parked), lastError, createdAt, updatedAt, and
//     a copy of the event's type, key, sequence, payload, headers and
//     createdAt.
//   - <prefix>lanes: 256 documents {_id: lane, epoch, owner, holder,
//     leaseExpiresAt, inFlight, lost, parkedKeys}, seeded by Setup.
//   - <prefix>keys: _id = ordering key, seq = its last sequence.
//   - <prefix>completed_deliveries: with Options.CompletionHistory, one
//     document per completion (no payload), inserted in the completion's
//     transaction.
//
// Deliveries carry four indexes besides _id, none of which a happy-path
// write changes: claim (queue, laneId, dueAt, _id) partial on pending;
// per-key order (handler, key, sequence) partial on keyed pending;
// (eventId, handler) unique; dead-letter purge (updatedAt, _id) partial
// on dead. Events have (createdAt, _id) for the orphan sweep; the history
// has (completedAt). Lanes have none. Listing is an admin scan.
//
// # The protocol in MongoDB
//
// docs/lane-protocol.md is the protocol every store implements; here is
// how each part is kept, and which MongoDB guarantee it rests on.
//
// Claim (DeliveryClaim). There is no SELECT ... FOR UPDATE SKIP LOCKED. A
// claim reads the lanes it holds, reads candidates of those lanes, and
// records its picks with one unordered bulkWrite of updateOne models on
// the lane documents, each conditional on the epoch it read and on
// (owner, holder): the atomicity of a single-document update makes each
// lane's write all or nothing, and a lane taken over in between is not
// matched (the picks of such a lane are dropped). Free lanes are taken by
// a conditional update that raises the epoch, so of two claimers the
// second finds the epoch raised and matches nothing. Claims of one Store
// instance are serialised by a mutex; instances never hold the same lane.
// No delivery document is written by a claim, except the charges of a
// takeover.
//
// Takeover and lost ids. MongoDB transactions use snapshot isolation: a
// completion that read the lane does not conflict with a takeover that
// wrote it, and two completions that both wrote the lane would conflict
// with each other (and transactional handlers would run again). So the
// lane is never written by a completion. Instead a takeover moves the
// lane's inFlight ids into lost in the very update (an update pipeline)
// that raises the epoch, then charges each lost delivery an attempt in a
// transaction that also removes them from lost (chargeLost). A completion
// deletes the same delivery documents the charge updates: whichever of
// the two writes a document second meets a write conflict (a transaction
// never overwrites a change committed after its snapshot; the server
// labels the error TransientTransactionError), so exactly one commits.
// The completion, run again, reads the new epoch and reports the lease
// lost; the charge, run again, finds the delivery deleted. Completions of
// one lane write disjoint documents and never conflict. A holder that
// dies between the take and the charge leaves the ids in lost; the next
// holder charges them first (the charge and the clearing of lost are one
// transaction, so an id is never charged twice).
//
// Fences. A lease is current while its lane has the token's epoch and
// lists the delivery in inFlight, and the delivery is pending with the
// token's claims. A completion checks it in its snapshot transaction;
// reschedule, bury and release check it with the filters of their two
// writes (the lane's $pull and the delivery's update) in one transaction,
// aborted when either matches nothing; a renewal checks it by reading the
// lane after its conditional update.
//
// Holders. A lane records the owner (the bus's Config.Owner) and the
// holder (a random ID of the Store instance). Held means both match and
// the lease is live, so a restarted process that reuses its owner name
// does not adopt the lanes of the process before it; it takes them over
// when their lease expires.
//
// Failure handling. A claim that fails before its record has leased
// nothing (lanes it took stay held until its next claim hands them back
// or their lease expires). If the record bulkWrite fails, the picks are
// given back to their lanes; if that fails too, the next claim of the
// instance gives them back. After the record, each keyed pick is checked
// again against predecessors requeued meanwhile and given back if it was
// overtaken. Parking is best effort: a failure is logged (Options.Logger)
// and costs only later reads.
//
// Parking. A key whose head cannot run (in flight, or waiting for its
// retry) keeps its due followers in the claim index, and every claim of
// the lane would read them again only to skip them. When a claim sees at
// least ParkBacklogMin of them, it moves them out of the ready range
// (queue parked) and lists the key in the lane's parkedKeys, in one
// transaction. Later claims read each parked key's head directly (one
// indexed read), and forget the key when nothing of it is pending.
//
// # What differs from docs/lane-protocol.md
//
//   - A claim is not one transaction: it is reads, then conditional
//     single-document writes (see above). A claim writes only the lanes
//     that change (picks, completed ids to drop, drained keys, hand-back);
//     an unchanged lane's lease is renewed by LeaseExtend, not by every
//     claim.
//   - Lane and delivery are not locked: the rare-path writes (reschedule,
//     bury, release, relinquish, charges, parking) are transactions whose
//     write conflicts order them, retried from the start by runTx within
//     MaxTransactionAttempts.
//   - lost and parkedKeys are lane fields the protocol does not have.
//   - A renewal never shortens a lane's lease ($max); it does not check
//     the delivery's claims (the protocol's renewal does not either).
//   - DeliveryList takes no Now: a delivery listed in flight by a lane
//     that has an owner is shown as processing even after the lease
//     expired, until a takeover. Statistics count the same way.
//   - Setup takes no lock: every step is idempotent and conditional.
//   - The claim-index membership field is named queue (ready or parked).
//     The seed calls it lane; 0.1.0 of this store had no such field, and
//     lane next to laneId would read as the lease partition.
//   - Key runs (driver.DeliveryClaimParams.KeyRuns) are not claimed: the
//     store is no driver.KeyRunClaimer and returns a key's head only, so
//     a batch handler (relaybus.Bus.HandleBatch) gets one delivery of a
//     key per batch. That keeps every rule (one batch of a key at a time,
//     in order); it does not make a hot key faster. Unkeyed deliveries
//     are batched as claimed.
//
// # Costs
//
// Counts of commands, from the code (not measured here):
//
//   - Publish: one read of existing events, one counter update per
//     distinct key, one insertMany of events, one of deliveries; one more
//     bulkWrite when an existing event gets new handlers.
//   - Claim from held lanes with a deep backlog: one read of held lanes,
//     one of their in-flight deliveries (when any), one candidate read per
//     MaxLanesPerSortedQuery lanes, one predecessor aggregation per
//     MaxPredecessorClauses keyed heads (keyed work only), one read of the picked documents, one bulkWrite on the
//     lanes that change, and one predecessor re-check (keyed picks only).
//     Writes: lane documents only.
//   - Taking lanes (shallow queue): per round one read of free lanes (the
//     first round), one probe per
//     MaxLanesPerSortedQuery free lanes, one read per parked key
//     of those lanes, one take bulkWrite and its read-back, a charge
//     transaction per lane taken over, then candidates as above.
//   - Completion of a batch: one transaction of two reads and one
//     deleteMany (plus one insertMany with history). No lane write, no
//     per-delivery update.
//   - Renewal: one updateMany on the lanes and one read of them.
//   - Reschedule, bury, release: one transaction of two updateOnes.
//
// # Upgrading from 0.1.0
//
// Setup upgrades a 0.1.0 database in place, and can run any number of
// times. It recognises 0.1.0 by its lease-expiry index, which it drops
// last. Processing deliveries become pending suspects (each runs alone
// next) with their attempts kept (0.1.0 counted the running attempt at
// claim; 0.2.0 counts an attempt lost to a crash: the same count), none
// buried, even on its last attempt (0.1.0 had no suspects, and a
// takeover buries only a delivery that was one already; the PostgreSQL
// upgrade does the same); lease fields are removed; laneId, claims, suspect and queue, and
// the events' handlers (from every delivery, completed ones included),
// are backfilled in batches of UpgradeBatchSize in _id order; the 0.1.0
// indexes are dropped and the 0.2.0 ones created. Completed rows stay and
// are listed, counted and purged as completed. Stop every 0.1.0 worker
// first: mixed versions are not supported. There is no down migration.
//
// # Ordering and transactions
//
// A key's sequence comes from its counter document, incremented inside
// the publishing transaction. MongoDB does not queue a second transaction
// behind the first: the second fails with a write conflict labelled
// TransientTransactionError and must run again, and by then the first has
// ended, so sequences follow commit order. EventPublish retries by
// itself; callers of PublishTx retry their transaction on
// TransientTransactionError(err). A keyed delivery is claimed only when
// it is its key's lowest candidate, no lower sequence of its handler and
// key is pending, and nothing of its key is in flight; a key lives in one
// lane, held by one holder at a time.
//
// # Times
//
// BSON dates hold milliseconds: every time the store writes is cut to the
// millisecond, and the times it returns are UTC. The store reads no
// clock, except the server's $$NOW in the upgrade (Setup has no Now).
package mongo
