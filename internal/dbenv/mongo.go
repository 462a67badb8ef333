package dbenv

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"time"

	"github.com/testcontainers/testcontainers-go"
	tcmongodb "github.com/testcontainers/testcontainers-go/modules/mongodb"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// MongoDB for tests and the harness. There is no local-binary provider:
// MongoDB comes from a URI or from a Testcontainers replica set. Where
// neither is available StartMongo says so with ErrUnavailable, and the
// tests skip and say why; nothing is faked.

// ErrUnavailable marks a start that failed because no server of that kind
// can be had on this machine (no URI given, no Docker engine, no image that
// can be started), as opposed to a server that failed.
var ErrUnavailable = errors.New("dbenv: no server available")

// Environment variables read by StartMongo.
const (
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
	// mongoPingTimeout bounds the readiness check of a started server.
	mongoPingTimeout = 30 * time.Second
	// mongoStopTimeout bounds Stop.
	mongoStopTimeout = 30 * time.Second
	// mongoPort is the port mongod listens on in the container.
	mongoPort = "27017/tcp"
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
		return nil, fmt.Errorf("dbenv: mongo: no URI given and no container possible: %w (%w)", ErrUnavailable, err)
	}
	prepareTestcontainersEnv(ctx, logf)
	image := mongoImage(opts.Image)
	start := time.Now()
	var port int
	m, err := onFreePort(logf, func(p int) (*Mongo, error) {
		port = p
		return runMongoContainer(ctx, image, p, logf)
	})
	if err != nil {
		// An engine without the image, where the pull failed too (no
		// registry reachable), has no MongoDB to offer, like no engine.
		// With the image present, a failed start is a failure.
		if present, perr := imagePresent(ctx, image); perr == nil && !present {
			return nil, fmt.Errorf("dbenv: mongo: image %s is not present and could not be started: %w (%w)", image, ErrUnavailable, err)
		}
		return nil, err
	}
	logf("dbenv: mongo container %s on 127.0.0.1:%d ready after %v", image, port, time.Since(start).Round(time.Millisecond))
	return m, nil
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
		loopbackPort(mongoPort, port),
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
