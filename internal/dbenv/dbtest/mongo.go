package dbtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berkcansavur/relaybus/internal/dbenv"
)

// EnvMongoURI selects a given MongoDB replica set (or mongos) for tests.
const EnvMongoURI = dbenv.EnvMongoURI

// Limits of the shared MongoDB.
const (
	// mongoStartTimeout bounds starting the shared test container (an
	// image pull included).
	mongoStartTimeout = 3 * time.Minute
	// mongoTestDatabasePrefix starts every database MongoTestDatabaseName
	// returns.
	mongoTestDatabasePrefix = "relaybus_test_"
)

// mongoShared is the MongoDB of one test binary, started on first use.
var mongoShared struct {
	mu      sync.Mutex
	running bool // Main or Run is running the tests
	started bool
	m       *dbenv.Mongo
	err     error
	// stoppable is m once started, readable without mu (see pgShared).
	stoppable atomic.Pointer[dbenv.Mongo]
}

// TestMongoURI returns a MongoDB replica-set URI for tests:
// RELAYBUS_TEST_MONGO_URI if set. Otherwise, in a test binary that links
// the container provider (imports internal/dbenv/container, as the
// harness's tests may; the library's tests do not), the URI of a container
// (a single-member replica set) shared by the test binary, which must run
// its tests with Main or Run. Where no replica set can be had
// (dbenv.ErrUnavailable: no URI, no container provider, no Docker engine,
// no image) the test is skipped with the reason; a server that fails to
// start fails the test.
//
// Tests share the server: give each its own database
// (MongoTestDatabaseName) and drop it in t.Cleanup.
func TestMongoURI(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), mongoStartTimeout)
	defer cancel()
	if uri := os.Getenv(EnvMongoURI); uri != "" {
		m, err := dbenv.StartMongo(ctx, dbenv.MongoOptions{URI: uri})
		if err != nil {
			t.Fatalf("%v (from %s)", err, EnvMongoURI)
		}
		return m.URI()
	}
	m, err := sharedMongo(ctx)
	if errors.Is(err, dbenv.ErrUnavailable) {
		t.Skipf("MongoDB tests need a replica set and none was given: set %s to one (mongodb://host:port/?replicaSet=NAME); "+
			"no MongoDB server is faked (%v)", EnvMongoURI, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return m.URI()
}

func sharedMongo(ctx context.Context) (*dbenv.Mongo, error) {
	mongoShared.mu.Lock()
	defer mongoShared.mu.Unlock()
	if !mongoShared.running {
		return nil, errors.New("dbtest: the shared MongoDB container needs `func TestMain(m *testing.M) { dbtest.Main(m) }` " +
			"in this test package, so that it is removed when the tests end")
	}
	if !mongoShared.started {
		mongoShared.started = true
		mongoShared.m, mongoShared.err = dbenv.StartMongo(ctx, dbenv.MongoOptions{Logf: testLogf})
		if mongoShared.m != nil {
			mongoShared.stoppable.Store(mongoShared.m)
		}
	}
	return mongoShared.m, mongoShared.err
}

// MongoTestDatabaseName returns a fresh database name for one test:
// "relaybus_test_" and 16 random hex digits (valid on any MongoDB).
func MongoTestDatabaseName() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("dbtest: mongo: random database name: %w", err)
	}
	return mongoTestDatabasePrefix + hex.EncodeToString(b[:]), nil
}
