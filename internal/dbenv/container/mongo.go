package container

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/testcontainers/testcontainers-go"
	tcmongodb "github.com/testcontainers/testcontainers-go/modules/mongodb"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/berkcansavur/relaybus/internal/dbenv"
)

// MongoDB in a container: a single-member replica set (transactions and
// the oplog need one), for dbenv.StartMongo without a URI.

// Limits of the MongoDB container.
const (
	// mongoReplicaSetName names the single-member replica set.
	mongoReplicaSetName = "rs0"
	// mongoPingTimeout bounds the readiness check of a started server.
	mongoPingTimeout = 30 * time.Second
	// mongoPort is the port mongod listens on in the container.
	mongoPort = "27017/tcp"
)

// StartMongo implements dbenv.Containers. The URI of the container uses
// directConnection=true: the member's own address (the container's IP)
// need not be reachable, only the mapped port.
func (provider) StartMongo(ctx context.Context, image string, logf func(string, ...any)) (string, string, func(context.Context) error, error) {
	image = mongoImage(image)
	if err := DockerAvailable(ctx); err != nil {
		return "", "", nil, fmt.Errorf("dbenv: mongo: no URI given and no container possible: %w (%w)", dbenv.ErrUnavailable, err)
	}
	prepareTestcontainersEnv(ctx, logf)
	start := time.Now()
	var port int
	ctr, err := onFreePort(logf, func(p int) (*tcmongodb.MongoDBContainer, error) {
		port = p
		return runMongoContainer(ctx, image, p, logf)
	})
	if err != nil {
		// An engine without the image, where the pull failed too (no
		// registry reachable), has no MongoDB to offer, like no engine.
		// With the image present, a failed start is a failure.
		if present, perr := imagePresent(ctx, image); perr == nil && !present {
			return "", "", nil, fmt.Errorf("dbenv: mongo: image %s is not present and could not be started: %w (%w)", image, dbenv.ErrUnavailable, err)
		}
		return "", "", nil, err
	}
	logf("dbenv: mongo container %s on 127.0.0.1:%d ready after %v", image, port, time.Since(start).Round(time.Millisecond))
	stop := func(ctx context.Context) error { return ctr.Terminate(ctx) }
	return mongoContainerURI(port), image, stop, nil
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

func runMongoContainer(ctx context.Context, image string, port int, logf func(string, ...any)) (_ *tcmongodb.MongoDBContainer, err error) {
	ctr, err := tcmongodb.Run(ctx, image,
		testcontainers.WithLogger(logfLogger(logf)),
		tcmongodb.WithReplicaSet(mongoReplicaSetName),
		loopbackPort(mongoPort, port),
	)
	defer func() {
		if err != nil && ctr != nil {
			_ = ctr.Terminate(context.WithoutCancel(ctx))
		}
	}()
	if err != nil {
		return nil, fmt.Errorf("dbenv: mongo: image %s: %w", image, err)
	}
	if err := pingMongo(ctx, mongoContainerURI(port)); err != nil {
		return nil, fmt.Errorf("dbenv: mongo: container %s: %w", image, err)
	}
	return ctr, nil
}

// mongoContainerURI is the URI of a container's replica set at port.
func mongoContainerURI(port int) string {
	return "mongodb://127.0.0.1:" + strconv.Itoa(port) + "/?directConnection=true"
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
