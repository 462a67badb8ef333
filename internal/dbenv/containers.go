package dbenv

// The container provider is a plug-in: package internal/dbenv/container
// implements Containers with testcontainers-go and registers it when it is
// imported. dbenv itself imports no Docker or Testcontainers code, so that
// the library's tests (which use dbenv through dbtest) bring none of it into
// the go.sum of a module that requires relaybus.

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// Containers starts servers in containers. Package internal/dbenv/container
// provides it and registers it from its init function; the harness
// (cmd/bench) and the harness's tests import that package, the library's
// tests do not.
type Containers interface {
	// Available reports whether a container engine answers; the error says
	// why not. It must return within about 1.5 s: the auto provider asks it
	// before anything else.
	Available(ctx context.Context) error
	// StartPostgres starts a PostgreSQL server from image ("" means the
	// provider's default) with the given settings (already validated, fsync
	// included), listening on 127.0.0.1 only, and returns its superuser
	// connection string, which must survive Restart and Crash.
	StartPostgres(ctx context.Context, image string, settings map[string]string, logf func(string, ...any)) (adminDSN string, s Server, err error)
	// StartMongo starts a single-member MongoDB replica set from image (""
	// means the provider's default) on 127.0.0.1 and returns its URI, the
	// image it ran and what removes it. An error that wraps ErrUnavailable
	// means no such server can be had here (no engine, no image).
	StartMongo(ctx context.Context, image string, logf func(string, ...any)) (uri, usedImage string, stop func(context.Context) error, err error)
}

// Server is a running server started by a Containers provider.
type Server interface {
	// Restart stops the server and starts it again on the same address with
	// the same data.
	Restart(ctx context.Context) error
	// Crash ends the server as a power cut would (an immediate shutdown)
	// and starts it again on the same address, through crash recovery.
	Crash(ctx context.Context) error
	// Stop stops the server and removes its container and data.
	Stop(ctx context.Context) error
	// Source names where the server came from (the image).
	Source() string
}

var registered struct {
	mu sync.Mutex
	c  Containers
}

// RegisterContainers makes c the provider of ProviderTestcontainers (and of
// MongoDB servers when no URI is given). It is called by the init function
// of package internal/dbenv/container; a second registration panics, as a
// programmer error.
func RegisterContainers(c Containers) {
	registered.mu.Lock()
	defer registered.mu.Unlock()
	if c == nil {
		panic("dbenv: RegisterContainers(nil)")
	}
	if registered.c != nil {
		panic("dbenv: RegisterContainers called twice")
	}
	registered.c = c
}

// containersOf returns the registered provider, or an error that says how
// to get one.
func containersOf() (Containers, error) {
	registered.mu.Lock()
	defer registered.mu.Unlock()
	if registered.c == nil {
		return nil, errNoContainers
	}
	return registered.c, nil
}

// errNoContainers: this binary does not link the container provider.
var errNoContainers = errors.New("dbenv: no container provider in this binary " +
	"(internal/dbenv/container: the harness imports it, the library's tests do not)")

// serverBackend adapts a Server to the backend of a Postgres.
type serverBackend struct{ s Server }

func (b serverBackend) restart(ctx context.Context) error { return b.s.Restart(ctx) }
func (b serverBackend) crash(ctx context.Context) error   { return b.s.Crash(ctx) }
func (b serverBackend) stop(ctx context.Context) error    { return b.s.Stop(ctx) }
func (b serverBackend) source() string                    { return b.s.Source() }

// startContainer starts a PostgreSQL server through the registered provider.
func startContainer(ctx context.Context, image string, settings map[string]string, logf func(string, ...any)) (*Postgres, error) {
	c, err := containersOf()
	if err != nil {
		return nil, fmt.Errorf("%w; the library's tests take their server from %s or local PostgreSQL binaries", err, EnvDatabaseURL)
	}
	dsn, s, err := c.StartPostgres(ctx, image, settings, logf)
	if err != nil {
		return nil, err
	}
	return &Postgres{provider: ProviderTestcontainers, adminDSN: dsn, backend: serverBackend{s}, settings: settings, logf: logf}, nil
}

// FreePort asks the kernel for a free port on 127.0.0.1. The port is free
// when this returns, not necessarily when a server binds it: the caller
// retries on "address already in use".
func FreePort() (int, error) { return freePort() }

// WaitReady polls until dsn accepts a connection, within the start bound
// every provider shares.
func WaitReady(ctx context.Context, dsn string) error { return waitReady(ctx, dsn, nil, nil) }
