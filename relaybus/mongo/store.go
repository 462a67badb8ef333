package mongo

import (
	"context"
	"errors"
	"fmt"

	"github.com/berkcansavur/relaybus/relaybus"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readconcern"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"
)

// Store is the MongoDB store: relaybus.Store[context.Context], where the
// transaction is a session context (see TxBegin).
type Store struct {
	client     *mongo.Client
	cfg        config
	db         *mongo.Database
	events     *mongo.Collection
	deliveries *mongo.Collection
	keys       *mongo.Collection
}

var _ relaybus.Store[context.Context] = (*Store)(nil)

// New returns a store on client. It does not touch the server: call Setup
// once (it is idempotent) before using the store.
func New(client *mongo.Client, opts *Options) (*Store, error) {
	if client == nil {
		return nil, invalidf("client is nil")
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	db := client.Database(cfg.database)
	return &Store{
		client:     client,
		cfg:        cfg,
		db:         db,
		events:     db.Collection(cfg.prefix + eventsSuffix),
		deliveries: db.Collection(cfg.prefix + deliveriesSuffix),
		keys:       db.Collection(cfg.prefix + keysSuffix),
	}, nil
}

// transactionOptions are used by every transaction the store starts:
// snapshot reads and majority writes, so a committed publish survives a
// primary failover and a transaction reads one consistent state.
func transactionOptions() *options.TransactionOptionsBuilder {
	return options.Transaction().
		SetReadConcern(readconcern.Snapshot()).
		SetWriteConcern(writeconcern.Majority())
}

// Setup checks that the server is a replica set member and creates the
// collections and indexes. It is idempotent and safe to run from several
// processes at once: an existing collection is not an error, and
// createIndexes with an identical specification does nothing.
func (s *Store) Setup(ctx context.Context) error {
	if err := s.checkReplicaSet(ctx); err != nil {
		return err
	}
	for _, name := range []string{s.events.Name(), s.deliveries.Name(), s.keys.Name()} {
		// Collections are created here, not implicitly by the first insert:
		// MongoDB cannot always create a collection inside a transaction
		// (before 4.4, or with a non-local read concern), and publish is
		// always inside one.
		if err := s.db.CreateCollection(ctx, name); err != nil && !namespaceExists(err) {
			return errorFrom("setup: create collection "+name, err)
		}
	}
	if _, err := s.deliveries.Indexes().CreateMany(ctx, deliveryIndexes()); err != nil {
		return errorFrom("setup: create indexes of "+s.deliveries.Name(), err)
	}
	return nil
}

// helloReply is the part of the hello command's reply Setup reads.
type helloReply struct {
	SetName string `bson:"setName"`
	Msg     string `bson:"msg"` // "isdbgrid" on mongos
}

// checkReplicaSet runs hello: transactions (atomic publish) need a
// replica set member or a mongos in front of one.
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
func namespaceExists(err error) bool {
	var se mongo.ServerError
	return errors.As(err, &se) && se.HasErrorCode(codeNamespaceExists)
}

const codeNamespaceExists = 48

// Index names. They are part of the schema: the 0.2.0 upgrade drops the
// ones it no longer needs by name.
const (
	indexClaim        = "claim_status_dueAt"
	indexLeaseExpiry  = "lease_status_leaseExpiresAt"
	indexKeyOrder     = "order_handler_key_sequence"
	indexEventHandler = "event_handler_unique"
	indexListStatus   = "list_status_id"
	indexListHandler  = "list_handler_id"
	indexPurge        = "purge_status_completedAt"
)

// deliveryIndexes is 0.1.0's index set on deliveries. Besides _id there
// are seven, and four of them contain status: every claim, completion,
// reschedule and release rewrites entries in them. That is the cost the
// 0.2.0 store removes, kept here on purpose.
//
// The listing indexes are (status, _id) and (handler, _id) rather than
// (…, createdAt): DeliveryList returns deliveries in ID order, and an index
// in that order serves a filtered page without a sort. Their write cost is
// the same.
func deliveryIndexes() []mongo.IndexModel {
	idx := func(name string, keys bson.D) mongo.IndexModel {
		return mongo.IndexModel{Keys: keys, Options: options.Index().SetName(name)}
	}
	keyed := mongo.IndexModel{
		Keys: bson.D{{Key: fHandler, Value: 1}, {Key: fKey, Value: 1}, {Key: fSequence, Value: 1}},
		Options: options.Index().SetName(indexKeyOrder).
			SetPartialFilterExpression(bson.D{{Key: fKey, Value: bson.D{{Key: "$exists", Value: true}}}}),
	}
	unique := mongo.IndexModel{
		Keys:    bson.D{{Key: fEventID, Value: 1}, {Key: fHandler, Value: 1}},
		Options: options.Index().SetName(indexEventHandler).SetUnique(true),
	}
	return []mongo.IndexModel{
		idx(indexClaim, bson.D{{Key: fStatus, Value: 1}, {Key: fDueAt, Value: 1}}),
		idx(indexLeaseExpiry, bson.D{{Key: fStatus, Value: 1}, {Key: fLeaseExpiresAt, Value: 1}}),
		keyed,
		unique,
		idx(indexListStatus, bson.D{{Key: fStatus, Value: 1}, {Key: fID, Value: 1}}),
		idx(indexListHandler, bson.D{{Key: fHandler, Value: 1}, {Key: fID, Value: 1}}),
		idx(indexPurge, bson.D{{Key: fStatus, Value: 1}, {Key: fCompletedAt, Value: 1}}),
	}
}

// TxBegin starts a session and a transaction in it, and returns a context
// that carries the session. Pass it as tx to PublishTx and
// DeliveryCompleteTx, and use it as the context of your own operations
// (collection.InsertOne(tx, ...)) to make them part of the transaction.
// TxCommit or TxRollback ends the session.
//
// The transaction reads a snapshot and writes with majority concern. It
// can fail with a write conflict (two transactions publishing to the same
// ordering key, see EventPublishTx): MongoDB then aborts it and labels the
// error TransientTransactionError; run the whole transaction again (see
// TransientTransactionError).
func (s *Store) TxBegin(ctx context.Context) (context.Context, error) {
	sess, err := s.client.StartSession()
	if err != nil {
		return nil, errorFrom("begin: start session", err)
	}
	if err := sess.StartTransaction(transactionOptions()); err != nil {
		sess.EndSession(ctx)
		return nil, errorFrom("begin: start transaction", err)
	}
	return mongo.NewSessionContext(ctx, sess), nil
}

// TxCommit commits tx and ends its session.
func (s *Store) TxCommit(ctx context.Context, tx context.Context) error {
	sess, err := runningSession(tx)
	if err != nil {
		return err
	}
	defer sess.EndSession(ctx)
	return errorFrom("commit", sess.CommitTransaction(ctx))
}

// TxRollback aborts tx and ends its session.
func (s *Store) TxRollback(ctx context.Context, tx context.Context) error {
	sess, err := runningSession(tx)
	if err != nil {
		return err
	}
	defer sess.EndSession(ctx)
	return errorFrom("rollback", sess.AbortTransaction(ctx))
}

// sessionOf returns the session of a transaction context from TxBegin.
func sessionOf(tx context.Context) (*mongo.Session, error) {
	if tx == nil {
		return nil, invalidf("tx is nil: not a transaction (use TxBegin)")
	}
	sess := mongo.SessionFromContext(tx)
	if sess == nil {
		return nil, invalidf("tx carries no session: not a transaction (use TxBegin)")
	}
	return sess, nil
}

// inTx returns ctx with tx's session: operations then run in the
// transaction while ctx's deadline and cancellation apply to this call.
func inTx(ctx, tx context.Context) (context.Context, error) {
	sess, err := runningSession(tx)
	if err != nil {
		return nil, err
	}
	return mongo.NewSessionContext(ctx, sess), nil
}

// runningSession returns tx's session if a transaction runs in it: a tx
// that was committed or rolled back (its session ended) is refused before
// it reaches the server.
func runningSession(tx context.Context) (*mongo.Session, error) {
	sess, err := sessionOf(tx)
	if err != nil {
		return nil, err
	}
	if !sess.TransactionRunning() {
		return nil, invalidf("tx has no transaction running (committed, rolled back, or not from TxBegin)")
	}
	return sess, nil
}

// String names the store's collections, for logs.
func (s *Store) String() string {
	return fmt.Sprintf("relaybus/mongo store (database %q, collections %s*)", s.cfg.database, s.cfg.prefix)
}
