package mongo

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/berkcansavur/relaybus/internal/dbenv/dbtest"
	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

// Integration tests of what is particular to the MongoDB lane-lease
// store: the races between a completion and a takeover, holders, lost
// ids, parking, suspects, relinquish, completion history and the
// upgrade from 0.1.0. They need a replica set (RELAYBUS_TEST_MONGO_URI)
// and skip with the reason without one; the generic contract is
// TestConformance's.

// itT0 is the base time of these tests; the store reads no clock.
var itT0 = time.Date(2031, time.January, 1, 12, 0, 0, 0, time.UTC)

func itAt(d time.Duration) time.Time { return itT0.Add(d) }

// itEnv is one database on the test replica set.
type itEnv struct {
	t      *testing.T
	ctx    context.Context
	client *mongo.Client
	db     string
}

func newITEnv(t *testing.T) *itEnv {
	t.Helper()
	t.Parallel()
	uri := dbtest.TestMongoURI(t)
	client, err := mongo.Connect(options.Client().ApplyURI(uri))
	require.NoError(t, err)
	name, err := dbtest.MongoTestDatabaseName()
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := client.Database(name).Drop(ctx); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
		if err := client.Disconnect(ctx); err != nil {
			t.Errorf("disconnect: %v", err)
		}
	})
	return &itEnv{t: t, ctx: t.Context(), client: client, db: name}
}

// store returns a new Store instance (a new holder) on the env's
// database, set up.
func (e *itEnv) store(opts *Options) *Store {
	e.t.Helper()
	o := Options{}
	if opts != nil {
		o = *opts
	}
	o.Database = e.db
	s, err := New(e.client, &o)
	require.NoError(e.t, err)
	require.NoError(e.t, s.Setup(e.ctx))
	return s
}

func (e *itEnv) publish(s *Store, id, key string, maxAttempts int, now time.Time, handlers ...string) {
	e.t.Helper()
	ep := &driver.EventPublish{Event: &relaytype.Event{ID: id, Type: "t", Key: key, Payload: []byte(`{}`)}}
	for _, h := range handlers {
		ep.Deliveries = append(ep.Deliveries, driver.DeliverySpec{Handler: h, MaxAttempts: maxAttempts})
	}
	_, err := s.EventPublish(e.ctx, &driver.EventPublishParams{Events: []*driver.EventPublish{ep}, Now: now})
	require.NoError(e.t, err)
}

func (e *itEnv) claim(s *Store, owner string, limit int, lease time.Duration, now time.Time, handlers ...string) []*relaytype.Delivery {
	e.t.Helper()
	if len(handlers) == 0 {
		handlers = []string{"h1"}
	}
	ds, err := s.DeliveryClaim(e.ctx, &driver.DeliveryClaimParams{Owner: owner, Handlers: handlers, Limit: limit, LeaseDuration: lease, Now: now})
	require.NoError(e.t, err)
	return ds
}

func (e *itEnv) complete(s *Store, l relaytype.Lease, now time.Time) bool {
	e.t.Helper()
	ok, err := s.DeliveryComplete(e.ctx, &driver.DeliveryCompleteParams{Lease: l, Now: now})
	require.NoError(e.t, err)
	return ok
}

func (e *itEnv) lane(s *Store, lane int) laneDoc {
	e.t.Helper()
	var d laneDoc
	require.NoError(e.t, s.lanes.FindOne(e.ctx, bson.D{{Key: fID, Value: int32(lane)}}).Decode(&d))
	return d
}

func (e *itEnv) delivery(s *Store, id string) *deliveryDoc {
	e.t.Helper()
	oid, ok := parseDeliveryID(id)
	require.True(e.t, ok)
	var d deliveryDoc
	err := s.deliveries.FindOne(e.ctx, bson.D{{Key: fID, Value: oid}}).Decode(&d)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil
	}
	require.NoError(e.t, err)
	return &d
}

// begin starts a transaction with the store's options in a session of
// its own, ended when the test ends, and returns its session context.
func (e *itEnv) begin() context.Context {
	e.t.Helper()
	sess, err := e.client.StartSession()
	require.NoError(e.t, err)
	e.t.Cleanup(func() { sess.EndSession(context.Background()) })
	require.NoError(e.t, sess.StartTransaction(transactionOptions()))
	return mongo.NewSessionContext(e.ctx, sess)
}

// publishAndClaim publishes event e1 for h1 and claims it as owner wa
// at itT0 under a 10 s lease.
func (e *itEnv) publishAndClaim(s *Store) []*relaytype.Delivery {
	e.t.Helper()
	e.publish(s, "e1", "", 5, itT0, "h1")
	ds := e.claim(s, "wa", 10, 10*time.Second, itT0)
	require.Len(e.t, ds, 1)
	return ds
}

func leaseRefOf(t *testing.T, d *relaytype.Delivery) leaseRef {
	t.Helper()
	ref, ok, err := parseLease(d.Lease())
	require.NoError(t, err)
	require.True(t, ok)
	return ref
}

// A completion whose transaction read the lane before a takeover, and
// deletes after the takeover charged the delivery, meets a write conflict;
// run again, it reads the new epoch and reports the lease lost. The
// takeover's holder keeps the delivery.
func TestIntegrationCompletionStartedBeforeTakeover(t *testing.T) {
	e := newITEnv(t)
	a, b := e.store(nil), e.store(nil)
	ds := e.publishAndClaim(a)
	d := ds[0]
	ref := leaseRefOf(t, d)

	sctx := e.begin()
	sess := mongo.SessionFromContext(sctx)
	// The transaction's snapshot is taken at its first read.
	_, err := a.readFenceLanes(sctx, []int32{int32(ref.tok.Lane)}, []bson.ObjectID{ref.id})
	require.NoError(t, err)

	taken := e.claim(b, "wb", 10, 10*time.Second, itAt(11*time.Second))
	require.Len(t, taken, 1)
	require.Equal(t, d.ID, taken[0].ID)
	require.Equal(t, 2, taken[0].Attempts, "the takeover charged the lost attempt")
	require.True(t, taken[0].Suspect)

	_, err = a.completeIn(sctx, []leaseRef{ref}, []bool{true}, bsonTime(itAt(12*time.Second)))
	require.Error(t, err, "a completion in a snapshot before the takeover deleted a charged delivery")
	require.True(t, TransientTransactionError(err), "want a write conflict labelled TransientTransactionError, got %v", err)
	_ = sess.AbortTransaction(context.Background())

	require.False(t, e.complete(a, d.Lease(), itAt(12*time.Second)), "the old lease completed after the takeover")
	require.NotNil(t, e.delivery(a, d.ID), "the delivery is gone although the takeover won")
	require.True(t, e.complete(b, taken[0].Lease(), itAt(13*time.Second)))
	require.Nil(t, e.delivery(a, d.ID))
}

// A completion that deleted the delivery (not yet committed) before the
// takeover's charge: the charge conflicts and runs again until the
// completion commits, then finds nothing to charge. The completion wins
// and the takeover returns nothing.
func TestIntegrationCompletionBeforeTakeoverCharge(t *testing.T) {
	e := newITEnv(t)
	a, b := e.store(nil), e.store(nil)
	ds := e.publishAndClaim(a)
	ref := leaseRefOf(t, ds[0])

	sctx := e.begin()
	sess := mongo.SessionFromContext(sctx)
	ok, err := a.completeIn(sctx, []leaseRef{ref}, []bool{true}, bsonTime(itAt(time.Second)))
	require.NoError(t, err)
	require.Equal(t, []bool{true}, ok)

	type claimed struct {
		ds  []*relaytype.Delivery
		err error
	}
	done := make(chan claimed, 1)
	go func() {
		ds, err := b.DeliveryClaim(e.ctx, &driver.DeliveryClaimParams{Owner: "wb", Handlers: []string{"h1"}, Limit: 10,
			LeaseDuration: 10 * time.Second, Now: itAt(11 * time.Second)})
		done <- claimed{ds, err}
	}()
	time.Sleep(50 * time.Millisecond)
	require.NoError(t, sess.CommitTransaction(context.Background()))
	got := <-done
	require.NoError(t, got.err)
	require.Empty(t, got.ds, "the takeover returned a delivery whose completion committed")
	require.Nil(t, e.delivery(a, ds[0].ID))
}

// The same race with a transactional handler: the handler's own write
// and the completion roll back together when the takeover wins.
func TestIntegrationTransactionalCompletionLosesToTakeover(t *testing.T) {
	e := newITEnv(t)
	a, b := e.store(nil), e.store(nil)
	ds := e.publishAndClaim(a)
	orders := e.client.Database(e.db).Collection("orders")
	require.NoError(t, e.client.Database(e.db).CreateCollection(e.ctx, "orders"))

	tx, err := a.TxBegin(e.ctx)
	require.NoError(t, err)
	_, err = orders.InsertOne(tx, bson.D{{Key: "_id", Value: "o1"}}) // the handler's write; fixes the snapshot
	require.NoError(t, err)
	require.Len(t, e.claim(b, "wb", 10, 10*time.Second, itAt(11*time.Second)), 1)

	_, err = a.DeliveryCompleteTx(e.ctx, tx, &driver.DeliveryCompleteParams{Lease: ds[0].Lease(), Now: itAt(12 * time.Second)})
	require.True(t, TransientTransactionError(err), "want a TransientTransactionError, got %v", err)
	_ = a.TxRollback(e.ctx, tx)
	n, err := orders.CountDocuments(e.ctx, bson.D{})
	require.NoError(t, err)
	require.Zero(t, n, "the handler's write committed although its completion lost")

	tx, err = a.TxBegin(e.ctx)
	require.NoError(t, err)
	ok, err := a.DeliveryCompleteTx(e.ctx, tx, &driver.DeliveryCompleteParams{Lease: ds[0].Lease(), Now: itAt(12 * time.Second)})
	require.NoError(t, err)
	require.False(t, ok, "run again, the completion must see the new epoch")
	require.NoError(t, a.TxRollback(e.ctx, tx))
}

// Completions of deliveries in one lane write different documents and
// only read the lane: two open at once both commit.
func TestIntegrationCompletionsInOneLaneDoNotConflict(t *testing.T) {
	e := newITEnv(t)
	s := e.store(nil)
	e.publish(s, "e1", "same-key", 5, itT0, "h1", "h2")
	ds := e.claim(s, "w", 10, time.Minute, itT0, "h1", "h2")
	require.Len(t, ds, 2, "two handlers of one keyed event: one delivery each, one lane")
	var sctxs []context.Context
	for _, d := range ds {
		sctx := e.begin()
		ok, err := s.completeIn(sctx, []leaseRef{leaseRefOf(t, d)}, []bool{true}, bsonTime(itAt(time.Second)))
		require.NoError(t, err)
		require.Equal(t, []bool{true}, ok)
		sctxs = append(sctxs, sctx)
	}
	for _, sctx := range sctxs {
		require.NoError(t, mongo.SessionFromContext(sctx).CommitTransaction(context.Background()))
	}
}

// A restarted process that reuses its owner name is a new holder: it does
// not adopt its predecessor's live lanes, and takes them over (charging
// the lost attempt) when their lease expires.
func TestIntegrationRestartedOwnerDoesNotAdoptLanes(t *testing.T) {
	e := newITEnv(t)
	before := e.store(nil)
	e.publish(before, "e1", "", 5, itT0, "h1")
	ds := e.claim(before, "worker-1", 10, 30*time.Second, itT0)
	require.Len(t, ds, 1)

	after := e.store(nil) // same owner name, new instance
	require.Empty(t, e.claim(after, "worker-1", 10, 30*time.Second, itAt(10*time.Second)), "adopted a live lane of the process before")
	ok, err := after.LeaseExtend(e.ctx, &driver.LeaseExtendParams{Owner: "worker-1", Leases: []relaytype.Lease{ds[0].Lease()},
		ExpiresAt: itAt(time.Hour), Now: itAt(10 * time.Second)})
	require.NoError(t, err)
	require.Equal(t, []bool{false}, ok, "renewed a lease of the process before")

	taken := e.claim(after, "worker-1", 10, 30*time.Second, itAt(31*time.Second))
	require.Len(t, taken, 1)
	require.Equal(t, 2, taken[0].Attempts)
	require.False(t, e.complete(before, ds[0].Lease(), itAt(32*time.Second)))
	require.True(t, e.complete(after, taken[0].Lease(), itAt(32*time.Second)))
}

// A holder that dies between the take (epoch raised, inFlight moved into
// lost) and the charge leaves the ids in lost; the next holder charges
// them first, once.
func TestIntegrationLostChargedByNextHolder(t *testing.T) {
	e := newITEnv(t)
	a, b, c := e.store(nil), e.store(nil), e.store(nil)
	ds := e.publishAndClaim(a)
	ref := leaseRefOf(t, ds[0])
	lane := e.lane(a, ref.tok.Lane)

	// b takes the lane and "crashes" before charging.
	taken, err := b.takeLanes(e.ctx, []laneEpoch{{lane: lane.ID, epoch: lane.Epoch}}, "wb", bsonTime(itAt(21*time.Second)), bsonTime(itAt(11*time.Second)))
	require.NoError(t, err)
	require.Len(t, taken, 1)
	require.Equal(t, []bson.ObjectID{ref.id}, taken[0].Lost)
	require.Empty(t, taken[0].InFlight)
	require.Zero(t, e.delivery(a, ds[0].ID).Attempts, "the take itself charged")

	got := e.claim(c, "wc", 10, 10*time.Second, itAt(22*time.Second))
	require.Len(t, got, 1)
	require.Equal(t, 2, got[0].Attempts, "lost ids are charged exactly once")
	require.True(t, got[0].Suspect)
	require.Empty(t, e.lane(c, ref.tok.Lane).Lost)
	d := e.delivery(c, ds[0].ID)
	require.EqualValues(t, 1, d.Attempts)
	require.EqualValues(t, 1, d.Claims)
}

// A delivery that crashes its process every time is charged at each
// takeover and buried by the takeover that spends its budget.
func TestIntegrationCrashLoopEndsDead(t *testing.T) {
	e := newITEnv(t)
	s := e.store(nil)
	e.publish(s, "poison", "", 2, itT0, "h1")
	first := e.claim(s, "w1", 10, 10*time.Second, itT0)
	require.Len(t, first, 1)
	require.Equal(t, 1, first[0].Attempts)
	second := e.claim(s, "w2", 10, 10*time.Second, itAt(11*time.Second))
	require.Len(t, second, 1)
	require.Equal(t, 2, second[0].Attempts)
	require.Empty(t, e.claim(s, "w3", 10, 10*time.Second, itAt(22*time.Second)))
	d := e.delivery(s, first[0].ID)
	require.Equal(t, statusDead, d.Status)
	require.EqualValues(t, 2, d.Attempts)
	require.Equal(t, takeoverBuryError, d.LastError)
}

// sameLaneEvents returns n event IDs whose unkeyed deliveries share a
// lane.
func sameLaneEvents(n int) []string {
	byLane := map[int][]string{}
	for i := 0; ; i++ {
		id := fmt.Sprintf("same-lane-%d", i)
		l := driver.LaneOf("", id)
		byLane[l] = append(byLane[l], id)
		if len(byLane[l]) == n {
			return byLane[l]
		}
	}
}

// After a takeover every charged delivery is a suspect, and a claim
// returns the oldest suspect alone.
func TestIntegrationSuspectsRunAlone(t *testing.T) {
	e := newITEnv(t)
	s := e.store(nil)
	for i, id := range sameLaneEvents(3) {
		e.publish(s, id, "", 5, itAt(time.Duration(i)*time.Millisecond), "h1")
	}
	require.Len(t, e.claim(s, "w1", 10, 10*time.Second, itAt(time.Second)), 3)
	got := e.claim(s, "w2", 10, 10*time.Second, itAt(12*time.Second))
	require.Len(t, got, 1, "suspects are returned one at a time")
	require.True(t, got[0].Suspect)
}

// A key's predecessor rescheduled past its followers is still the key's
// head: the followers wait for it and it runs first.
func TestIntegrationRescheduledHeadRunsFirst(t *testing.T) {
	e := newITEnv(t)
	s := e.store(nil)
	e.publish(s, "k-1", "k", 5, itT0, "h1")
	e.publish(s, "k-2", "k", 5, itT0, "h1")
	head := e.claim(s, "w", 10, time.Minute, itT0)
	require.Len(t, head, 1)
	require.Equal(t, "k-1", head[0].EventID)
	ok, err := s.DeliveryReschedule(e.ctx, &driver.DeliveryRescheduleParams{Lease: head[0].Lease(), Error: "later",
		AvailableAt: itAt(time.Minute), Now: itAt(time.Second)})
	require.NoError(t, err)
	require.True(t, ok)
	require.Empty(t, e.claim(s, "w", 10, time.Minute, itAt(2*time.Second)), "a follower ran before its rescheduled predecessor")
	again := e.claim(s, "w", 10, time.Minute, itAt(61*time.Second))
	require.Len(t, again, 1)
	require.Equal(t, "k-1", again[0].EventID)
}

// A long backlog of one key is parked out of the claim index, its head is
// read directly, the key runs in order, and the lane forgets the key when
// its backlog is gone.
func TestIntegrationParking(t *testing.T) {
	e := newITEnv(t)
	s := e.store(nil)
	const n = ParkBacklogMin + 8
	for i := range n {
		e.publish(s, fmt.Sprintf("hot-%03d", i), "hot", 5, itT0, "h1")
	}
	lane := driver.LaneOf("hot", "")
	first := e.claim(s, "w", 1, time.Minute, itAt(time.Second))
	require.Len(t, first, 1)
	require.Equal(t, "hot-000", first[0].EventID)
	parked, err := s.deliveries.CountDocuments(e.ctx, bson.D{{Key: fQueue, Value: queueParked}})
	require.NoError(t, err)
	require.EqualValues(t, n-1, parked, "the backlog behind the head is parked")
	require.Equal(t, []parkedKey{{Handler: "h1", Key: "hot"}}, e.lane(s, lane).ParkedKeys)

	require.Empty(t, e.claim(s, "w", 10, time.Minute, itAt(2*time.Second)), "a follower ran while its head is in flight")
	prev := first[0]
	for i := 1; i < n; i++ {
		require.True(t, e.complete(s, prev.Lease(), itAt(3*time.Second)))
		next := e.claim(s, "w", 10, time.Minute, itAt(3*time.Second))
		require.Len(t, next, 1)
		require.Equal(t, fmt.Sprintf("hot-%03d", i), next[0].EventID, "out of order")
		prev = next[0]
	}
	require.True(t, e.complete(s, prev.Lease(), itAt(4*time.Second)))
	require.Empty(t, e.claim(s, "w", 10, time.Minute, itAt(5*time.Second)))
	require.Empty(t, e.lane(s, lane).ParkedKeys, "a drained key stays listed")
}

// Relinquish hands back every lane and releases what is in flight
// without spending attempts; another owner takes it at once.
func TestIntegrationRelinquish(t *testing.T) {
	e := newITEnv(t)
	s := e.store(nil)
	for i := range 3 {
		e.publish(s, fmt.Sprintf("r-%d", i), "", 5, itT0, "h1")
	}
	require.Len(t, e.claim(s, "wa", 10, time.Minute, itT0), 3)
	n, err := s.OwnerRelinquish(e.ctx, &driver.OwnerRelinquishParams{Owner: "wa", Now: itAt(time.Second)})
	require.NoError(t, err)
	require.Equal(t, 3, n)
	held, err := s.lanes.CountDocuments(e.ctx, ownedFilter)
	require.NoError(t, err)
	require.Zero(t, held)
	got := e.claim(s, "wb", 10, time.Minute, itAt(2*time.Second))
	require.Len(t, got, 3)
	for _, d := range got {
		require.Equal(t, 1, d.Attempts, "a relinquished delivery was charged")
		require.False(t, d.Suspect)
	}
}

// With completion history on, a completion leaves a history document:
// listed and counted as completed, and purged by retention.
func TestIntegrationCompletionHistory(t *testing.T) {
	e := newITEnv(t)
	s := e.store(&Options{CompletionHistory: true})
	e.publish(s, "e1", "", 5, itT0, "h1")
	ds := e.claim(s, "w", 10, time.Minute, itT0)
	require.Len(t, ds, 1)
	require.True(t, e.complete(s, ds[0].Lease(), itAt(time.Second)))
	require.Nil(t, e.delivery(s, ds[0].ID))
	res, err := s.DeliveryList(e.ctx, &driver.DeliveryListParams{Status: relaytype.StatusCompleted})
	require.NoError(t, err)
	require.Len(t, res.Deliveries, 1)
	require.Equal(t, ds[0].ID, res.Deliveries[0].ID)
	require.Equal(t, 1, res.Deliveries[0].Attempts)
	st, err := s.Statistics(e.ctx, &driver.StatisticsParams{Now: itAt(2 * time.Second)})
	require.NoError(t, err)
	require.EqualValues(t, 1, st.Completed)
	pr, err := s.Purge(e.ctx, &driver.PurgeParams{CompletedBefore: itAt(time.Minute), Now: itAt(time.Minute)})
	require.NoError(t, err)
	require.EqualValues(t, 1, pr.Deliveries)
	require.EqualValues(t, 1, pr.Events)
}

// fixture010 is testdata/v0.1.0-database.json.
type fixture010 struct {
	Indexes    []bson.D `bson:"indexes"`
	Events     []bson.D `bson:"events"`
	Deliveries []bson.D `bson:"deliveries"`
	Keys       []bson.D `bson:"keys"`
}

func loadFixture010(t *testing.T) fixture010 {
	t.Helper()
	data, err := os.ReadFile("testdata/v0.1.0-database.json")
	require.NoError(t, err)
	var fx fixture010
	require.NoError(t, bson.UnmarshalExtJSON(data, false, &fx))
	return fx
}

// Setup converts a 0.1.0 database in place, and running it again changes
// nothing: processing deliveries become pending suspects with their
// attempts (none is buried), lease fields go, laneId and handlers are
// backfilled in batches, the 0.1.0 indexes are dropped, completed rows
// stay listed, and a completed handler never runs again.
func TestIntegrationUpgradeFrom010(t *testing.T) {
	e := newITEnv(t)
	fx := loadFixture010(t)
	db := e.client.Database(e.db)
	prefix := DefaultCollectionPrefix
	for _, c := range []string{eventsSuffix, deliveriesSuffix, keysSuffix} {
		require.NoError(t, db.CreateCollection(e.ctx, prefix+c))
	}
	require.NoError(t, db.RunCommand(e.ctx, bson.D{{Key: "createIndexes", Value: prefix + deliveriesSuffix}, {Key: "indexes", Value: fx.Indexes}}).Err())
	insert := func(coll string, docs []bson.D) {
		all := make([]any, len(docs))
		for i, d := range docs {
			all[i] = d
		}
		_, err := db.Collection(prefix+coll).InsertMany(e.ctx, all)
		require.NoError(t, err)
	}
	insert(eventsSuffix, fx.Events)
	insert(deliveriesSuffix, fx.Deliveries)
	insert(keysSuffix, fx.Keys)

	s, err := New(e.client, &Options{Database: e.db})
	require.NoError(t, err)
	s.upgradeBatch = 2 // several batches of the small fixture
	require.NoError(t, s.upgrade(e.ctx), "an upgrade interrupted before its index changes")
	require.NoError(t, s.Setup(e.ctx))
	snapshot := func() []bson.M {
		cur, err := s.deliveries.Find(e.ctx, bson.D{}, options.Find().SetSort(bson.D{{Key: fID, Value: 1}}))
		require.NoError(t, err)
		var out []bson.M
		require.NoError(t, cur.All(e.ctx, &out))
		return out
	}
	once := snapshot()
	require.NoError(t, s.Setup(e.ctx), "second Setup")
	require.Equal(t, once, snapshot(), "a second Setup changed deliveries")

	byID := map[string]*deliveryDoc{}
	for i := 1; i <= 7; i++ {
		id := fmt.Sprintf("65f0000000000000000000%02x", i)
		d := e.delivery(s, id)
		require.NotNil(t, d, id)
		byID[id] = d
		require.Equal(t, int32(driver.LaneOf(d.Key, d.EventID)), d.LaneID, "laneId of %s", id)
		require.Zero(t, d.Claims)
		require.Equal(t, queueReady, d.Queue)
	}
	raw, err := s.deliveries.CountDocuments(e.ctx, upgradeLeaseFieldsFilter)
	require.NoError(t, err)
	require.Zero(t, raw, "lease fields left")
	require.Equal(t, statusPending, byID["65f000000000000000000003"].Status)
	require.EqualValues(t, 1, byID["65f000000000000000000003"].Attempts, "the running attempt stays counted")
	require.True(t, byID["65f000000000000000000003"].Suspect, "in flight at the upgrade: a suspect")
	require.Equal(t, statusPending, byID["65f000000000000000000005"].Status, "processing on its final attempt: a pending suspect, not buried (0.1.0 had no suspects)")
	require.True(t, byID["65f000000000000000000005"].Suspect)
	require.Equal(t, statusCompleted, byID["65f000000000000000000001"].Status)

	for id, want := range map[string][]string{"ev1": {"h1", "h2"}, "ev2": {"h1", "h2"}, "ev3": {"h1"}, "ev4": {"h1"}, "ev5": {"h1"}} {
		var ev eventDoc
		require.NoError(t, s.events.FindOne(e.ctx, bson.D{{Key: fID, Value: id}}).Decode(&ev))
		require.NotNil(t, ev.Handlers, id)
		require.Equal(t, want, *ev.Handlers, id)
	}
	names, err := s.deliveryIndexNames(e.ctx)
	require.NoError(t, err)
	for _, n := range obsoleteIndexes {
		require.NotContains(t, names, n)
	}
	for _, m := range deliveryIndexes() {
		require.Contains(t, names, *indexOptions(t, m).Name)
	}

	completed, err := s.DeliveryList(e.ctx, &driver.DeliveryListParams{Status: relaytype.StatusCompleted})
	require.NoError(t, err)
	require.Len(t, completed.Deliveries, 2, "0.1.0 completed rows stay listed")

	// ev1/h2 is key k1's head for h2; ev2/h1's predecessor ev1/h1 completed.
	got := e.claim(s, "w", 10, time.Minute, itAt(time.Hour), "h1", "h2")
	var events []string
	for _, d := range got {
		events = append(events, d.EventID+"/"+d.Handler)
	}
	slices.Sort(events)
	require.Equal(t, []string{"ev1/h2", "ev2/h1"}, events)

	// Republishing ev1 with a third handler adds only that one.
	res, err := s.EventPublish(e.ctx, &driver.EventPublishParams{Now: itAt(time.Hour), Events: []*driver.EventPublish{{
		Event:      &relaytype.Event{ID: "ev1", Type: "order.created", Key: "k1"},
		Deliveries: []driver.DeliverySpec{{Handler: "h1", MaxAttempts: 5}, {Handler: "h2", MaxAttempts: 5}, {Handler: "h3", MaxAttempts: 5}},
	}}})
	require.NoError(t, err)
	require.Equal(t, 1, res.Deliveries)
}
