package dbenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"
)

// Deprecated test helpers: moved to internal/dbenv/dbtest. They stay here
// until every test package imports dbtest, then they go, and with them
// this package's import of testing.

// Constants of the old helpers.
const (
	// EnvTestProvider chooses the provider of the server TestDatabase starts.
	EnvTestProvider = "RELAYBUS_TEST_DB_PROVIDER"
	// EnvMongoURI selects a given MongoDB replica set (or mongos) for tests.
	EnvMongoURI = "RELAYBUS_TEST_MONGO_URI"
	// mongoStartTimeout bounds starting the shared test container.
	mongoStartTimeout = 3 * time.Minute
	// mongoTestDatabasePrefix starts every database MongoTestDatabaseName
	// returns.
	mongoTestDatabasePrefix = "relaybus_test_"
)

// mongoShared is the MongoDB of one test binary, started on first use.
var mongoShared struct {
	mu      sync.Mutex
	running bool // MongoMain or MongoRun is running the tests
	started bool
	m       *Mongo
	err     error
}

// TestMongoURI returns a MongoDB replica-set URI for tests:
// RELAYBUS_TEST_MONGO_URI if set; else, when a Docker engine answers, the
// URI of a container (image RELAYBUS_MONGO_IMAGE or DefaultMongoImage,
// single-member replica set) shared by the test binary, which must then
// run its tests with MongoMain or MongoRun; else the test is skipped with
// the reason. A container that fails to start fails the test.
//
// Tests share the server: give each its own database
// (MongoTestDatabaseName) and drop it in t.Cleanup.
func TestMongoURI(t testing.TB) string {
	t.Helper()
	if uri := os.Getenv(EnvMongoURI); uri != "" {
		if err := validateMongoURI(uri); err != nil {
			t.Fatalf("%v (from %s)", err, EnvMongoURI)
		}
		return uri
	}
	ctx, cancel := context.WithTimeout(context.Background(), mongoStartTimeout)
	defer cancel()
	if err := DockerAvailable(ctx); err != nil {
		t.Skipf("MongoDB tests need a replica set: set %s or run a Docker engine (%v)", EnvMongoURI, err)
	}
	m, err := sharedMongo(ctx)
	if err != nil {
		// An engine without the image, where the pull failed too (no
		// registry reachable), has no MongoDB to offer: that is a skip,
		// like no engine. With the image present, a failed start is a
		// failure.
		image := mongoImage("")
		if present, perr := imagePresent(ctx, image); perr == nil && !present {
			t.Skipf("MongoDB tests need a replica set: set %s, or make image %s available to the Docker engine (it is not present and starting it failed: %v)",
				EnvMongoURI, image, err)
		}
		t.Fatal(err)
	}
	return m.URI()
}

func sharedMongo(ctx context.Context) (*Mongo, error) {
	mongoShared.mu.Lock()
	defer mongoShared.mu.Unlock()
	if !mongoShared.running {
		return nil, errors.New("dbenv: the shared MongoDB container needs `func TestMain(m *testing.M) { dbenv.MongoMain(m) }` " +
			"in this test package, so that it is removed when the tests end")
	}
	if !mongoShared.started {
		mongoShared.started = true
		mongoShared.m, mongoShared.err = StartMongo(ctx, MongoOptions{Logf: testLogf})
	}
	return mongoShared.m, mongoShared.err
}

// MongoMain runs the tests, removes the shared MongoDB container if one
// was started, and exits: `func TestMain(m *testing.M) { dbenv.MongoMain(m) }`.
func MongoMain(m *testing.M) { os.Exit(MongoRun(m)) }

// MongoRun is MongoMain without the exit. It returns m.Run's status, or 1
// when the container could not be removed.
func MongoRun(m *testing.M) int {
	mongoShared.mu.Lock()
	mongoShared.running = true
	mongoShared.mu.Unlock()

	code := m.Run()

	mongoShared.mu.Lock()
	defer mongoShared.mu.Unlock()
	mongoShared.running = false
	if mongoShared.m != nil {
		if err := mongoShared.m.Stop(context.Background()); err != nil {
			fmt.Fprintln(os.Stderr, err)
			if code == 0 {
				code = 1
			}
		}
		mongoShared.m = nil
	}
	return code
}

// MongoTestDatabaseName returns a fresh database name for one test:
// "relaybus_test_" and 16 random hex digits (valid on any MongoDB).
func MongoTestDatabaseName() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("dbenv: mongo: random database name: %w", err)
	}
	return mongoTestDatabasePrefix + hex.EncodeToString(b[:]), nil
}
