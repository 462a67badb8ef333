// Package dbenv gives the tests and the benchmark harness one way to get a
// database server: PostgreSQL from one of several providers, and MongoDB
// from a URI or a container. Every server it starts listens on 127.0.0.1
// only, and Stop removes what it started.
//
// # Files and packages
//
// One file set per server kind:
//
//   - postgres.go: the Postgres server, its providers and StartPostgres;
//     postgres_settings.go: the server settings dbenv accepts and sets;
//   - postgres_local.go (and _linux, _other): local server binaries;
//   - postgres_dsn.go: a server the user runs;
//   - mongo.go: MongoDB from a URI, or from the container provider;
//   - containers.go: the hook the container provider registers with.
//
// The container provider (Testcontainers, for PostgreSQL and MongoDB) is
// the subpackage container, which registers itself when imported, as a
// database/sql driver does. dbenv imports no Docker or Testcontainers
// code: the library's tests use dbenv (through dbtest) without it, so a
// module that requires relaybus gets none of those modules in its go.sum.
// The harness (cmd/bench) and its worker tests import the container
// package.
//
// The test helpers (a fresh database per test on a server shared by the
// test binary) are in the subpackage dbtest, so that dbenv itself does not
// import package testing.
//
// # PostgreSQL providers
//
//   - local: a throwaway cluster from the initdb and postgres binaries on
//     PATH or under /usr/lib/postgresql/*/bin (newest), in a temporary
//     directory, on a free loopback port. As root, the binaries run as the
//     postgres OS user (they refuse root).
//   - dsn: a server the user runs (RELAYBUS_TEST_DATABASE_URL). dbenv creates
//     and drops databases on it and neither restarts nor stops it.
//   - testcontainers: a container from PostgresOptions.Image (default
//     RELAYBUS_PG_IMAGE, else postgres:17) through testcontainers-go, its
//     port bound to a fixed port on 127.0.0.1 so that Restart keeps the
//     address; only in a binary that imports the container package. The
//     module's fsync=off is replaced: fsync is on unless the settings say
//     otherwise. Where no registry is reachable, build an image with
//     scripts/postgres-image.
//   - auto: a given DSN if there is one; else testcontainers when the binary
//     links the container provider and a Docker engine answers (at most
//     about 1.5 s); else local. The choice and the reason are logged. In the
//     library's tests, which do not link the container provider, auto is
//     local.
//
// # MongoDB
//
// MongoDB needs a replica set (transactions, the oplog). StartMongo takes
// a URI, or, in a binary that links the container provider, starts a
// single-member replica set in a container. There is no local-binary
// provider; where neither a URI nor a container can be had it returns an
// error wrapping ErrUnavailable, and the tests skip and say why: no
// MongoDB server is faked.
//
// # Cleanup guarantees
//
// Stop stops the server and removes its data directory or container;
// dbtest.Main calls it when the tests end, and on SIGINT or SIGTERM. A
// local server runs in its own process group with a parent-death signal
// (Linux), so a test binary killed outright takes its server down with it;
// the data directory is then left in the temporary directory, and the next
// local start removes such directories once their owner and server
// processes are gone. A container outlives a killed test binary unless
// Ryuk (testcontainers-go's reaper) runs; the container package disables
// Ryuk only when its image is not present.
package dbenv
