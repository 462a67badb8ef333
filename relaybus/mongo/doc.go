// Package mongo is the relaybus store on MongoDB (mongo-driver/v2): the
// 0.1.0 "row lease" design, where a delivery document says who holds it.
//
// # Status: not run against a server
//
// This code is tested only where a replica set is reachable: this code has
// not been run against a server in its own CI. It was written on a machine
// without MongoDB (a Docker engine was there, but no mongo image and no
// registry to pull one from), against the driver's documentation and
// source. What has run there: unit tests of every pure part (option and
// name validation, document builders and BSON round trips, filters and
// update documents, lease tokens, IDs and cursors, error mapping), and the
// paths that end before any round trip, against a client whose server does
// not exist: the transaction lifecycle on the client side, validation,
// foreign leases and IDs. What has not run: every query, update, insert,
// aggregation and transaction on a server, Setup's index creation, and
// the conformance suite (relaybus/storetest) in mongo_test.go, which skips
// without RELAYBUS_TEST_MONGO_URI or a usable mongo image. Treat the store
// as unverified until TestConformance has passed against a replica set.
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
// sharded cluster; Setup refuses a standalone server.
//
// # Collections
//
//   - <prefix>events: _id = event ID, type, key, sequence, payload,
//     headers, createdAt.
//   - <prefix>deliveries: _id = ObjectID, eventId, handler, status,
//     attempts, maxAttempts, dueAt, lease fields (only while processing),
//     lastError, createdAt, updatedAt, completedAt, and a copy of the
//     event's type, key, sequence, payload, headers and createdAt, so a
//     claim returns a whole delivery from one round trip and a delivery
//     does not depend on its event document.
//   - <prefix>keys: _id = ordering key, seq = its last sequence.
//
// Deliveries carry seven indexes besides _id: claim (status, dueAt),
// lease expiry (status, leaseExpiresAt), per-key order (handler, key,
// sequence; keyed only), unique (eventId, handler), listing (status, _id)
// and (handler, _id), purge (status, completedAt).
//
// # Costs (0.1.0, the baseline 0.2.0 is measured against)
//
//   - Publish: per call one read of existing events, one counter update
//     per distinct key, one insertMany of events and one of deliveries.
//   - Claim: one candidate query per call, then per delivery one
//     conditional findOneAndUpdate (plus, for a keyed delivery, one read
//     for an unfinished predecessor).
//   - Renewal: one updateOne per lease. Completion: one updateOne per
//     delivery, also in DeliveryCompleteMany.
//
// Every claim, renewal and completion rewrites indexed fields (status,
// dueAt, lease fields) of the delivery document: several index entries
// and one oplog entry per write. That is the write amplification the 0.2.0
// lane-lease store removes; it is kept here on purpose.
//
// # Ordering and transactions
//
// A key's sequence comes from its counter document, incremented inside
// the publishing transaction. MongoDB does not queue a second transaction
// behind the first: the second fails with a write conflict labelled
// TransientTransactionError and must run again, and by then the first has
// ended, so sequences follow commit order. EventPublish retries by
// itself; callers of PublishTx retry their transaction on
// TransientTransactionError(err). (This is a third behaviour next to
// PostgreSQL's "the second publish blocks until the first ends": the
// second publish fails at once and the caller runs it again.)
//
// A keyed delivery is claimed only after a read finds no pending or
// processing delivery of its handler and key with a lower sequence; the
// conditional update then decides between racing claimers. See
// DeliveryClaim for the race window that remains.
//
// # Times
//
// BSON dates hold milliseconds: every time the store writes is cut to the
// millisecond, and the times it returns are UTC.
package mongo
