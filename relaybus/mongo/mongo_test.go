package mongo_test

import (
	"context"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/berkcansavur/relaybus/internal/dbenv/dbtest"
	"github.com/berkcansavur/relaybus/relaybus/driver"
	rbmongo "github.com/berkcansavur/relaybus/relaybus/mongo"
	"github.com/berkcansavur/relaybus/relaybus/storetest"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// TestConformance runs the conformance suite against a real replica set,
// RELAYBUS_TEST_MONGO_URI (these tests link no container code). Without
// it it skips and says so. Each subtest gets its own database, dropped
// when it ends.
//
// The store deletes a delivery when it completes (completion history is
// off here), and fails a second transaction publishing to the same key
// at once with a TransientTransactionError instead of making it wait.
func TestConformance(t *testing.T) {
	uri := dbtest.TestMongoURI(t)
	storetest.Run(t, func(t *testing.T) driver.Store[context.Context] {
		return newTestStore(t, uri)
	}, &storetest.Options{RetryableConflict: rbmongo.TransientTransactionError})
}

// newTestStore connects to uri, creates a store in a fresh database, runs
// Setup, and drops the database and disconnects at cleanup.
func newTestStore(t *testing.T, uri string) *rbmongo.Store {
	t.Helper()
	client, err := mongo.Connect(options.Client().ApplyURI(uri))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	name, err := dbtest.MongoTestDatabaseName()
	if err != nil {
		t.Fatal(err)
	}
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
	store, err := rbmongo.New(client, &rbmongo.Options{Database: name})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := store.Setup(ctx); err != nil {
		t.Fatalf("setup: %v", err)
	}
	// Setup is idempotent: a second run must succeed and change nothing.
	if err := store.Setup(ctx); err != nil {
		t.Fatalf("second setup: %v", err)
	}
	return store
}
