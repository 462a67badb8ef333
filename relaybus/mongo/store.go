package mongo

import (
	"context"
	"fmt"
	"sync"

	"github.com/berkcansavur/relaybus/relaybus/driver"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"
)

// Store is the MongoDB store: driver.Store[context.Context], where the
// transaction is a session context (see TxBegin).
type Store struct {
	client     *mongo.Client
	cfg        config
	db         *mongo.Database
	events     *mongo.Collection
	deliveries *mongo.Collection
	keys       *mongo.Collection
	lanes      *mongo.Collection
	history    *mongo.Collection
	paused     *mongo.Collection // the paused handlers (pause.go)

	// holder identifies this instance in the lanes it holds (laneDoc):
	// new at every New, so a restarted process that reuses its owner
	// name is a different holder and does not adopt the lanes of the
	// process before it.
	holder string

	// claimMu serialises the claims of this instance. A claim reads the
	// lanes it holds and then writes them; two claims of one holder at
	// once could both pick the same delivery from the same lane. Claims
	// of different instances need no lock: they never hold the same lane.
	// It also guards orphans.
	claimMu sync.Mutex
	// orphans are picks a claim recorded in a lane but could not return
	// (an error after the record and a failed give-back). They are given
	// back at the start of the next claim; until then they stay in flight
	// in a lane this instance holds. At most MaxOrphanLanes lanes.
	orphans map[laneEpoch][]bson.ObjectID

	// upgradeBatch is UpgradeBatchSize; tests lower it to page through a
	// small 0.1.0 fixture in several batches.
	upgradeBatch int
}

var _ driver.Store[context.Context] = (*Store)(nil)

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
	// Majority writes on every collection, whatever the client's default
	// (w:1 before MongoDB 5.0). A completion's transaction reads a
	// snapshot of majority-committed data: a claim's lane write that was
	// acknowledged by the primary alone could be missing from the
	// snapshot of the completion of a handler that finished quickly, and
	// the completion would report a lease lost that was not. Outside
	// transactions the same rule keeps a takeover or a renewal from being
	// rolled back by a failover after it was acknowledged.
	coll := func(suffix string) *mongo.Collection {
		return db.Collection(cfg.prefix+suffix, options.Collection().SetWriteConcern(writeconcern.Majority()))
	}
	return &Store{
		client:       client,
		cfg:          cfg,
		db:           db,
		events:       coll(eventsSuffix),
		deliveries:   coll(deliveriesSuffix),
		keys:         coll(keysSuffix),
		lanes:        coll(lanesSuffix),
		history:      coll(historySuffix),
		paused:       coll(pausedSuffix),
		holder:       newHolderID(),
		orphans:      map[laneEpoch][]bson.ObjectID{},
		upgradeBatch: UpgradeBatchSize,
	}, nil
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
