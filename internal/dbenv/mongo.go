package dbenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/testcontainers/testcontainers-go"
	tcmongodb "github.com/testcontainers/testcontainers-go/modules/mongodb"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// MongoDB for tests and the harness. There is no local-binary provider:
// MongoDB comes from a URI or from a Testcontainers replica set. Where
// neither is available the tests skip and say so; nothing is faked.

// Environment variables read by TestMongoURI.
const (
	// EnvMongoURI selects a given MongoDB replica set (or mongos) for tests.
	EnvMongoURI = "RELAYBUS_TEST_MONGO_URI"
	// EnvMongoImage overrides the container image (DefaultMongoImage).
	EnvMongoImage = "RELAYBUS_MONGO_IMAGE"
)

// Defaults and limits of the MongoDB provider.
const (
	// DefaultMongoImage is the image started when none is given.
	DefaultMongoImage = "mongo:7"
	// mongoReplicaSetName names the single-member replica set of a
	// container (transactions need a replica set).
	mongoReplicaSetName = "rs0"
	// mongoStartTimeout bounds starting the shared test container.
	mongoStartTimeout = 3 * time.Minute
	// mongoPingTimeout bounds the readiness check of a started server.
	mongoPingTimeout = 30 * time.Second
	// mongoStopTimeout bounds Stop.
	mongoStopTimeout = 30 * time.Second
	// mongoPort is the port mongod listens on in the container.
	mongoPort = "27017/tcp"
	// mongoTestDatabasePrefix starts every database MongoTestDatabaseName
	// returns.
	mongoTestDatabasePrefix = "relaybus_test_"
)

// MongoOptions configure StartMongo.
type MongoOptions struct {
	// URI of a running replica set. Set: nothing is started and Stop does
	// nothing.
	URI string
	// Image of the container to start when URI is empty: "" means
	// RELAYBUS_MONGO_IMAGE, else DefaultMongoImage.
	Image string
	// Logf receives progress lines; nil discards them.
	Logf func(format string, args ...any)
}

// Mongo is a MongoDB replica set from StartMongo.
type Mongo struct {
	uri    string
	source string // "uri" or the image
	ctr    *tcmongodb.MongoDBContainer
	logf   func(string, ...any)
}

// URI is the connection string of the server.
func (m *Mongo) URI() string { return m.uri }

// Source says where the server came from: "uri" or the container image.
func (m *Mongo) Source() string { return m.source }

// Stop removes the container StartMongo started (and its data). For a
// given URI it does nothing.
func (m *Mongo) Stop(ctx context.Context) error {
	if m == nil || m.ctr == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, mongoStopTimeout)
	defer cancel()
	if err := m.ctr.Terminate(ctx); err != nil {
		return fmt.Errorf("dbenv: mongo: remove container: %w", err)
	}
	m.ctr = nil
	return nil
}

// StartMongo returns a MongoDB replica set: opts.URI if set, else a
// single-member replica set in a Testcontainers container bound to
// 127.0.0.1. The URI of a container uses directConnection=true: the
// member's own address (the container's IP) need not be reachable, only
// the mapped port.
func StartMongo(ctx context.Context, opts MongoOptions) (*Mongo, error) {
	logf := opts.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	if opts.URI != "" {
		if err := validateMongoURI(opts.URI); err != nil {
			return nil, err
		}
		return &Mongo{uri: opts.URI, source: "uri", logf: logf}, nil
	}
	if err := DockerAvailable(ctx); err != nil {
		return nil, fmt.Errorf("dbenv: mongo: no URI given and no container possible: %w", err)
	}
	prepareTestcontainersEnv(ctx, logf)
	image := mongoImage(opts.Image)
	start := time.Now()
	var lastErr error
	for range localPortAttempts {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		m, err := runMongoContainer(ctx, image, port, logf)
		if err == nil {
			logf("dbenv: mongo container %s on 127.0.0.1:%d ready after %v", image, port, time.Since(start).Round(time.Millisecond))
			return m, nil
		}
		lastErr = err
		if !strings.Contains(err.Error(), "already allocated") && !strings.Contains(err.Error(), "address already in use") {
			break
		}
		logf("dbenv: mongo: port %d taken before the engine bound it; trying another", port)
	}
	return nil, lastErr
}

// mongoImage picks the image: the option, the environment, the default.
func mongoImage(option string) string {
	if option != "" {
		return option
	}
	if env := os.Getenv(EnvMongoImage); env != "" {
		return env
	}
	return DefaultMongoImage
}

func runMongoContainer(ctx context.Context, image string, port int, logf func(string, ...any)) (_ *Mongo, err error) {
	ctr, err := tcmongodb.Run(ctx, image,
		testcontainers.WithLogger(logfLogger(logf)),
		tcmongodb.WithReplicaSet(mongoReplicaSetName),
		// Loopback only, at a port chosen here (see runContainer).
		testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) {
			hc.PortBindings = network.PortMap{
				network.MustParsePort(mongoPort): {{HostIP: netip.MustParseAddr("127.0.0.1"), HostPort: strconv.Itoa(port)}},
			}
		}),
	)
	m := &Mongo{source: image, ctr: ctr, logf: logf}
	defer func() {
		if err != nil && ctr != nil {
			_ = m.Stop(context.WithoutCancel(ctx))
		}
	}()
	if err != nil {
		return nil, fmt.Errorf("dbenv: mongo: image %s: %w", image, err)
	}
	m.uri = mongoContainerURI(port)
	if err := pingMongo(ctx, m.uri); err != nil {
		return nil, fmt.Errorf("dbenv: mongo: container %s: %w", image, err)
	}
	return m, nil
}

// mongoContainerURI is the URI of a container's replica set at port.
func mongoContainerURI(port int) string {
	return "mongodb://127.0.0.1:" + strconv.Itoa(port) + "/?directConnection=true"
}

// validateMongoURI checks that uri looks like a MongoDB connection string
// before a driver tries it, so a mistyped variable fails with its name.
func validateMongoURI(uri string) error {
	u, err := url.Parse(uri)
	if err != nil {
		return fmt.Errorf("dbenv: mongo: URI is not a URL: %w", err)
	}
	if u.Scheme != "mongodb" && u.Scheme != "mongodb+srv" {
		return fmt.Errorf("dbenv: mongo: URI scheme %q: want mongodb:// or mongodb+srv://", u.Scheme)
	}
	if u.Host == "" {
		return errors.New("dbenv: mongo: URI names no host")
	}
	return nil
}

// pingMongo connects to uri and waits until the server is a writable
// replica set primary, or until mongoPingTimeout.
func pingMongo(ctx context.Context, uri string) error {
	ctx, cancel := context.WithTimeout(ctx, mongoPingTimeout)
	defer cancel()
	client, err := mongo.Connect(options.Client().ApplyURI(uri))
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer func() { _ = client.Disconnect(context.WithoutCancel(ctx)) }()
	for {
		var hello struct {
			SetName           string `bson:"setName"`
			IsWritablePrimary bool   `bson:"isWritablePrimary"`
		}
		err := client.Database("admin").RunCommand(ctx, bson.D{{Key: "hello", Value: 1}}).Decode(&hello)
		if err == nil && hello.IsWritablePrimary && hello.SetName != "" {
			return nil
		}
		if err == nil {
			err = fmt.Errorf("not yet a writable replica set primary (setName %q)", hello.SetName)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not ready after %v: %w", mongoPingTimeout, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

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
