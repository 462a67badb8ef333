package mongo_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/berkcansavur/relaybus/relaybus/driver"
	rbmongo "github.com/berkcansavur/relaybus/relaybus/mongo"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

// These tests need no server: they cover what the store decides before
// it sends anything. The client points at a port nothing listens on and
// gives up selecting a server after 100 ms, so a call that wrongly goes
// to the server fails (or takes that long) instead of passing.

func offlineStore(t *testing.T) *rbmongo.Store {
	t.Helper()
	client, err := mongo.Connect(options.Client().
		ApplyURI("mongodb://127.0.0.1:1/?directConnection=true").
		SetServerSelectionTimeout(100 * time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
	s, err := rbmongo.New(client, &rbmongo.Options{Database: "offline"})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestNewRejects(t *testing.T) {
	t.Parallel()
	if _, err := rbmongo.New(nil, &rbmongo.Options{Database: "x"}); !errors.Is(err, relaytype.ErrInvalid) {
		t.Errorf("New(nil client) = %v", err)
	}
	client, err := mongo.Connect(options.Client().ApplyURI("mongodb://127.0.0.1:1/"))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Disconnect(context.Background())
	if _, err := rbmongo.New(client, nil); !errors.Is(err, relaytype.ErrInvalid) {
		t.Errorf("New(nil options) = %v", err)
	}
	if _, err := rbmongo.New(client, &rbmongo.Options{Database: "a.b"}); !errors.Is(err, relaytype.ErrInvalid) {
		t.Errorf("New(bad database) = %v", err)
	}
}

// The transaction lifecycle on the client side: starting, committing or
// aborting a transaction that has run no operation sends nothing.
func TestTxLifecycle(t *testing.T) {
	t.Parallel()
	s := offlineStore(t)
	ctx := context.Background()
	now := time.Date(2031, 1, 1, 12, 0, 0, 0, time.UTC)
	publish := &driver.EventPublishParams{Now: now, Events: []*driver.EventPublish{{
		Event: &relaytype.Event{ID: "e1", Type: "t"}, Deliveries: []driver.DeliverySpec{{Handler: "h", MaxAttempts: 1}},
	}}}
	complete := &driver.DeliveryCompleteParams{Lease: relaytype.Lease{DeliveryID: "x", Token: "1:0:0"}, Now: now}

	// A context without a session is not a transaction.
	if _, err := s.EventPublishTx(ctx, ctx, publish); !errors.Is(err, relaytype.ErrInvalid) {
		t.Errorf("EventPublishTx(plain context) = %v", err)
	}
	if _, err := s.DeliveryCompleteTx(ctx, ctx, complete); !errors.Is(err, relaytype.ErrInvalid) {
		t.Errorf("DeliveryCompleteTx(plain context) = %v", err)
	}
	if err := s.TxCommit(ctx, ctx); !errors.Is(err, relaytype.ErrInvalid) {
		t.Errorf("TxCommit(plain context) = %v", err)
	}
	if err := s.TxRollback(ctx, nil); !errors.Is(err, relaytype.ErrInvalid) {
		t.Errorf("TxRollback(nil) = %v", err)
	}

	tx, err := s.TxBegin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sess := mongo.SessionFromContext(tx)
	if sess == nil || !sess.TransactionRunning() {
		t.Fatal("TxBegin returned a context without a running transaction")
	}
	if err := s.TxRollback(ctx, tx); err != nil {
		t.Fatalf("rollback: %v", err)
	}
	// Ended: every further use is refused before it reaches the server.
	if err := s.TxRollback(ctx, tx); !errors.Is(err, relaytype.ErrInvalid) {
		t.Errorf("second rollback = %v", err)
	}
	if err := s.TxCommit(ctx, tx); !errors.Is(err, relaytype.ErrInvalid) {
		t.Errorf("commit after rollback = %v", err)
	}
	if _, err := s.EventPublishTx(ctx, tx, publish); !errors.Is(err, relaytype.ErrInvalid) {
		t.Errorf("publish after rollback = %v", err)
	}
	if _, err := s.DeliveryCompleteTx(ctx, tx, complete); !errors.Is(err, relaytype.ErrInvalid) {
		t.Errorf("complete after rollback = %v", err)
	}

	tx, err = s.TxBegin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.TxCommit(ctx, tx); err != nil {
		t.Fatalf("commit of an empty transaction: %v", err)
	}
	if err := s.TxCommit(ctx, tx); !errors.Is(err, relaytype.ErrInvalid) {
		t.Errorf("second commit = %v", err)
	}
}

// Invalid params are refused with the core's ErrInvalid before anything
// is sent.
func TestInvalidParams(t *testing.T) {
	t.Parallel()
	s := offlineStore(t)
	ctx := context.Background()
	calls := map[string]func() error{
		"publish":    func() error { _, err := s.EventPublish(ctx, &driver.EventPublishParams{}); return err },
		"publish tx": func() error { _, err := s.EventPublishTx(ctx, ctx, nil); return err },
		"claim":      func() error { _, err := s.DeliveryClaim(ctx, &driver.DeliveryClaimParams{}); return err },
		"extend":     func() error { _, err := s.LeaseExtend(ctx, &driver.LeaseExtendParams{}); return err },
		"complete":   func() error { _, err := s.DeliveryComplete(ctx, &driver.DeliveryCompleteParams{}); return err },
		"complete n": func() error {
			_, err := s.DeliveryCompleteMany(ctx, &driver.DeliveryCompleteManyParams{})
			return err
		},
		"complete tx": func() error { _, err := s.DeliveryCompleteTx(ctx, ctx, nil); return err },
		"reschedule":  func() error { _, err := s.DeliveryReschedule(ctx, &driver.DeliveryRescheduleParams{}); return err },
		"bury":        func() error { _, err := s.DeliveryBury(ctx, &driver.DeliveryBuryParams{}); return err },
		"release":     func() error { _, err := s.DeliveryRelease(ctx, &driver.DeliveryReleaseParams{}); return err },
		"relinquish":  func() error { _, err := s.OwnerRelinquish(ctx, &driver.OwnerRelinquishParams{}); return err },
		"requeue":     func() error { return s.DeliveryRequeue(ctx, &driver.DeliveryRequeueParams{}) },
		"list":        func() error { _, err := s.DeliveryList(ctx, &driver.DeliveryListParams{Limit: -1}); return err },
		"statistics":  func() error { _, err := s.Statistics(ctx, &driver.StatisticsParams{}); return err },
		"purge":       func() error { _, err := s.Purge(ctx, &driver.PurgeParams{Limit: -1}); return err },
		"payload over the store's limit": func() error {
			_, err := s.EventPublish(ctx, &driver.EventPublishParams{Now: time.Now(), Events: []*driver.EventPublish{{
				Event: &relaytype.Event{ID: "e", Type: "t", Payload: make([]byte, driver.DefaultMaxPayloadBytes+1)},
			}}})
			return err
		},
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, relaytype.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
}

// leaseWrites are the fenced writes of a store under one lease, each
// reporting (current, error).
func leaseWrites(s *rbmongo.Store, l relaytype.Lease) map[string]func() (bool, error) {
	ctx := context.Background()
	now := time.Date(2031, 1, 1, 12, 0, 0, 0, time.UTC)
	return map[string]func() (bool, error){
		"complete": func() (bool, error) {
			return s.DeliveryComplete(ctx, &driver.DeliveryCompleteParams{Lease: l, Now: now})
		},
		"reschedule": func() (bool, error) {
			return s.DeliveryReschedule(ctx, &driver.DeliveryRescheduleParams{Lease: l, AvailableAt: now, Now: now})
		},
		"bury": func() (bool, error) {
			return s.DeliveryBury(ctx, &driver.DeliveryBuryParams{Lease: l, Now: now})
		},
		"release": func() (bool, error) {
			return s.DeliveryRelease(ctx, &driver.DeliveryReleaseParams{Lease: l, Now: now})
		},
		"complete many": func() (bool, error) {
			ok, err := s.DeliveryCompleteMany(ctx, &driver.DeliveryCompleteManyParams{Leases: []relaytype.Lease{l}, Now: now})
			return len(ok) == 1 && ok[0], err
		},
		"extend": func() (bool, error) {
			ok, err := s.LeaseExtend(ctx, &driver.LeaseExtendParams{Owner: "w", Leases: []relaytype.Lease{l}, ExpiresAt: now.Add(time.Minute), Now: now})
			return len(ok) == 1 && ok[0], err
		},
	}
}

// A lease whose delivery ID this store cannot have issued is not
// current: false, with no round trip (the offline client would fail one).
func TestForeignLeasesAreNotCurrent(t *testing.T) {
	t.Parallel()
	s := offlineStore(t)
	ctx := context.Background()
	now := time.Date(2031, 1, 1, 12, 0, 0, 0, time.UTC)
	foreign := []relaytype.Lease{
		{DeliveryID: "42", Token: "7:3:2"},                       // not an ObjectID
		{DeliveryID: "65F000000000000000000001", Token: "7:3:2"}, // upper case: never issued
	}
	for _, l := range foreign {
		for name, write := range leaseWrites(s, l) {
			if ok, err := write(); ok || err != nil {
				t.Errorf("%s under %+v = %v, %v; want false, nil", name, l, ok, err)
			}
		}
	}
	err := s.DeliveryRequeue(ctx, &driver.DeliveryRequeueParams{DeliveryID: "42", Now: now})
	if !errors.Is(err, relaytype.ErrNotFound) || !strings.HasPrefix(err.Error(), "relaybus/mongo: ") {
		t.Errorf("requeue of a foreign ID = %v, want ErrNotFound", err)
	}
	_, err = s.DeliveryList(ctx, &driver.DeliveryListParams{After: "42"})
	if !errors.Is(err, relaytype.ErrInvalid) {
		t.Errorf("list after a foreign cursor = %v, want ErrInvalid", err)
	}
}

// A token that is not lane:epoch:claims is the caller's bug: ErrInvalid,
// before anything is sent, whatever the delivery ID; in a call of many
// leases, one malformed token fails the call.
func TestMalformedTokensAreInvalid(t *testing.T) {
	t.Parallel()
	s := offlineStore(t)
	for _, l := range []relaytype.Lease{
		{DeliveryID: "65f000000000000000000001", Token: "0123456789abcdef0123456789abcdef"}, // a 0.1.0 token
		{DeliveryID: "65f000000000000000000001", Token: "7:3"},
		{DeliveryID: "65f000000000000000000001", Token: "256:0:0"},
		{DeliveryID: "42", Token: "tok"},
	} {
		for name, write := range leaseWrites(s, l) {
			ok, err := write()
			if ok || !errors.Is(err, relaytype.ErrInvalid) || !strings.HasPrefix(err.Error(), "relaybus/mongo: ") {
				t.Errorf("%s under %+v = %v, %v; want a relaybus/mongo ErrInvalid", name, l, ok, err)
			}
		}
	}
	now := time.Date(2031, 1, 1, 12, 0, 0, 0, time.UTC)
	_, err := s.DeliveryCompleteMany(context.Background(), &driver.DeliveryCompleteManyParams{Now: now, Leases: []relaytype.Lease{
		{DeliveryID: "42", Token: "1:0:0"}, {DeliveryID: "43", Token: "1:0:x"},
	}})
	if !errors.Is(err, relaytype.ErrInvalid) {
		t.Errorf("complete many with a malformed second token = %v, want ErrInvalid", err)
	}
}

// Without a server, Setup fails and says where.
func TestSetupWithoutServer(t *testing.T) {
	t.Parallel()
	err := offlineStore(t).Setup(context.Background())
	if err == nil || !strings.HasPrefix(err.Error(), "relaybus/mongo: setup: hello: ") {
		t.Fatalf("Setup without a server = %v", err)
	}
}

// The bus publishes through the store's retrying EventPublish.
var _ driver.EventPublisher = (*rbmongo.Store)(nil)
