// Package dbenv gives the tests and the benchmark harness one way to get a
// PostgreSQL server.
//
// # Providers
//
//   - testcontainers: a container from PostgresOptions.Image (default
//     RELAYBUS_PG_IMAGE, else postgres:17) through testcontainers-go, its
//     port bound to a fixed port on 127.0.0.1 so that Restart keeps the
//     address. The module's fsync=off is replaced: fsync is on unless the
//     settings say otherwise. Where no registry is reachable, build an image
//     with scripts/postgres-image.
//   - local: a throwaway cluster from the initdb and postgres binaries on
//     PATH or under /usr/lib/postgresql/*/bin (newest), in a temporary
//     directory, on a free loopback port. As root, the binaries run as the
//     postgres OS user (they refuse root).
//   - dsn: a server the user runs (RELAYBUS_TEST_DATABASE_URL). dbenv creates
//     and drops databases on it and neither restarts nor stops it.
//   - auto: testcontainers when a Docker engine answers (DockerAvailable, at
//     most about 1.5 s), else local; the choice and the reason are logged.
//
// # Tests
//
// A test package declares
//
//	func TestMain(m *testing.M) { dbenv.Main(m) }
//
// and each test calls TestDatabase for a fresh database on a server shared by
// the test binary, dropped when the test ends. The server comes from
// RELAYBUS_TEST_DATABASE_URL when set, else from RELAYBUS_TEST_DB_PROVIDER
// (default auto). When no server can be had, the test fails and says how to
// get one; it is never skipped silently.
//
// # Cleanup guarantees
//
// Stop stops the server and removes its data directory or container; Main
// calls it when the tests end, and on SIGINT or SIGTERM. A local server runs
// in its own process group with a parent-death signal (Linux), so a test
// binary killed outright takes its server down with it; the data directory
// is then left in the temporary directory, and the next local start removes
// such directories once their owner and server processes are gone. A
// container outlives a killed test binary unless Ryuk (testcontainers-go's
// reaper) runs; dbenv disables Ryuk only when its image is not present.
//
// # Machines that are containers
//
// Where /.dockerenv exists, testcontainers-go connects to mapped ports
// through the default gateway; dbenv sets TESTCONTAINERS_HOST_OVERRIDE to
// 127.0.0.1 when it is unset, and refuses a server whose host is not
// 127.0.0.1.
package dbenv
