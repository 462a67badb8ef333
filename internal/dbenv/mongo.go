package dbenv

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"
)

// MongoDB for tests and the harness. There is no local-binary provider:
// MongoDB comes from a URI, or from a replica set in a container when the
// binary links the container provider (internal/dbenv/container). Where
// neither is available StartMongo says so with ErrUnavailable, and the
// tests skip and say why; nothing is faked.

// ErrUnavailable marks a start that failed because no server of that kind
// can be had on this machine (no URI given, no container provider, no
// Docker engine, no image that can be started), as opposed to a server
// that failed.
var ErrUnavailable = errors.New("dbenv: no server available")

// EnvMongoURI names a MongoDB replica set (or mongos) for the tests; dbenv
// does not read it, dbtest does, and cmd/dbserver writes it.
const EnvMongoURI = "RELAYBUS_TEST_MONGO_URI"

// mongoStopTimeout bounds Mongo.Stop.
const mongoStopTimeout = 30 * time.Second

// MongoOptions configure StartMongo.
type MongoOptions struct {
	// URI of a running replica set. Set: nothing is started and Stop does
	// nothing.
	URI string
	// Image of the container to start when URI is empty: "" means the
	// container provider's default (RELAYBUS_MONGO_IMAGE, else
	// container.DefaultMongoImage).
	Image string
	// Logf receives progress lines; nil discards them.
	Logf func(format string, args ...any)
}

// Mongo is a MongoDB replica set from StartMongo.
type Mongo struct {
	uri    string
	source string                          // "uri" or the image
	stop   func(ctx context.Context) error // nil for a given URI
}

// URI is the connection string of the server.
func (m *Mongo) URI() string { return m.uri }

// Source says where the server came from: "uri" or the container image.
func (m *Mongo) Source() string { return m.source }

// Stop removes the container StartMongo started (and its data). For a
// given URI it does nothing.
func (m *Mongo) Stop(ctx context.Context) error {
	if m == nil || m.stop == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, mongoStopTimeout)
	defer cancel()
	if err := m.stop(ctx); err != nil {
		return fmt.Errorf("dbenv: mongo: remove container: %w", err)
	}
	m.stop = nil
	return nil
}

// StartMongo returns a MongoDB replica set: opts.URI if set, else a
// single-member replica set in a container from the registered container
// provider. Without a URI in a binary that has no container provider (the
// library's tests) it returns an error wrapping ErrUnavailable.
func StartMongo(ctx context.Context, opts MongoOptions) (*Mongo, error) {
	logf := opts.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	if opts.URI != "" {
		if err := validateMongoURI(opts.URI); err != nil {
			return nil, err
		}
		return &Mongo{uri: opts.URI, source: "uri"}, nil
	}
	c, err := containersOf()
	if err != nil {
		return nil, fmt.Errorf("dbenv: mongo: no URI given, and this binary has no container provider (%w)", ErrUnavailable)
	}
	uri, image, stop, err := c.StartMongo(ctx, opts.Image, logf)
	if err != nil {
		return nil, err
	}
	if err := validateMongoURI(uri); err != nil {
		_ = stop(context.WithoutCancel(ctx))
		return nil, err
	}
	return &Mongo{uri: uri, source: image, stop: stop}, nil
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
