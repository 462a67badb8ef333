package dbtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berkcansavur/relaybus/internal/dbenv"
)

// EnvTestProvider chooses the provider of the server TestDatabase starts
// (auto, local, testcontainers), unless dbenv.EnvDatabaseURL names one.
const EnvTestProvider = "RELAYBUS_TEST_DB_PROVIDER"

// Limits of the shared test server.
const (
	// sharedStartTimeout bounds starting the shared server (an image pull
	// or initdb included).
	sharedStartTimeout = 3 * time.Minute
	// testDBNamePrefixLenMax bounds the part of a test database's name taken
	// from the test's name; the rest is a prefix and a random suffix.
	testDBNamePrefixLenMax = 40
)

// errNoMain: the test package did not run its tests through Main, which
// is what stops the shared server.
var errNoMain = errors.New("dbtest: the shared test server needs `func TestMain(m *testing.M) { dbtest.Main(m) }` " +
	"in this test package, so that it is stopped when the tests end")

// pgShared is the PostgreSQL server of one test binary, started on first
// use.
var pgShared struct {
	mu      sync.Mutex
	started bool // a start was attempted; err says how it went
	pg      *dbenv.Postgres
	err     error
	running bool // Main or Run is running the tests
	// stoppable is pg once started, readable without mu: the signal handler
	// must not wait for a start in progress (which holds mu).
	stoppable atomic.Pointer[dbenv.Postgres]
}

// TestDatabase returns the connection string of a fresh, empty database on a
// server shared by the test binary, and drops the database in t.Cleanup. It
// is safe for parallel tests.
//
// The server is started on first use: RELAYBUS_TEST_DATABASE_URL selects a
// given server (provider dsn); otherwise RELAYBUS_TEST_DB_PROVIDER (auto,
// local, testcontainers; default auto). testcontainers, and auto's choice of
// a container, need a test binary that imports internal/dbenv/container:
// the library's tests do not (their server is local binaries or the DSN),
// the harness's worker tests do. The test package must stop it with
// `func TestMain(m *testing.M) { dbtest.Main(m) }`. If no server can be had,
// the test fails with the reason and how to get one: a database test never
// skips silently.
func TestDatabase(t testing.TB) string {
	t.Helper()
	pg, err := sharedServer()
	if err != nil {
		t.Fatal(err)
	}
	return newTestDatabase(t, pg)
}

// TestDatabaseOrSkip is TestDatabase for a test that documents rather than
// checks (a runnable example of the README): when no server can be had it
// skips with the reason and how to get one, instead of failing. The store's
// own tests use TestDatabase, so a missing server still fails the run.
func TestDatabaseOrSkip(t testing.TB) string {
	t.Helper()
	pg, err := sharedServer()
	if errors.Is(err, errNoMain) {
		t.Fatal(err) // a mistake of the test package, not of the machine
	}
	if err != nil {
		t.Skipf("needs a PostgreSQL server: %v", err)
	}
	return newTestDatabase(t, pg)
}

// newTestDatabase creates a fresh database on pg for t and drops it in
// t.Cleanup.
func newTestDatabase(t testing.TB, pg *dbenv.Postgres) string {
	t.Helper()
	name, err := testDatabaseName(t.Name())
	if err != nil {
		t.Fatal(err)
	}
	// CreateDatabase and DropDatabase bound their own waits.
	dsn, err := pg.CreateDatabase(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := pg.DropDatabase(context.Background(), name); err != nil {
			t.Errorf("dbtest: cleanup: %v", err)
		}
	})
	return dsn
}

// SharedPostgres returns the server TestDatabase uses, starting it if
// needed: for tests that need the server itself (Restart, Info).
func SharedPostgres(t testing.TB) *dbenv.Postgres {
	t.Helper()
	pg, err := sharedServer()
	if err != nil {
		t.Fatal(err)
	}
	return pg
}

func sharedServer() (*dbenv.Postgres, error) {
	pgShared.mu.Lock()
	defer pgShared.mu.Unlock()
	if !pgShared.running {
		return nil, errNoMain
	}
	if pgShared.started {
		return pgShared.pg, pgShared.err
	}
	pgShared.started = true
	opts, err := sharedOptions()
	if err != nil {
		pgShared.err = err
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), sharedStartTimeout)
	defer cancel()
	pgShared.pg, pgShared.err = dbenv.StartPostgres(ctx, opts)
	if pgShared.pg != nil {
		pgShared.stoppable.Store(pgShared.pg)
	}
	if pgShared.err != nil {
		pgShared.err = fmt.Errorf("%w\n(dbtest: the test server comes from %s=%q, %s=%q; see internal/dbenv)",
			pgShared.err, EnvTestProvider, os.Getenv(EnvTestProvider), dbenv.EnvDatabaseURL, redactDSN(os.Getenv(dbenv.EnvDatabaseURL)))
	}
	return pgShared.pg, pgShared.err
}

func sharedOptions() (dbenv.PostgresOptions, error) {
	opts := dbenv.PostgresOptions{Logf: testLogf}
	if dsn := os.Getenv(dbenv.EnvDatabaseURL); dsn != "" {
		opts.Provider, opts.DSN = dbenv.ProviderDSN, dsn
		return opts, nil
	}
	p, err := dbenv.ParseProvider(os.Getenv(EnvTestProvider))
	if err != nil {
		return opts, fmt.Errorf("%w (from %s)", err, EnvTestProvider)
	}
	opts.Provider = p
	return opts, nil
}

// redactDSN hides a password in a DSN before it is printed.
func redactDSN(dsn string) string {
	if i := strings.Index(dsn, "://"); i >= 0 {
		if at := strings.LastIndex(dsn, "@"); at > i {
			if colon := strings.Index(dsn[i+3:at], ":"); colon >= 0 {
				return dsn[:i+3+colon] + ":xxxxx" + dsn[at:]
			}
		}
		return dsn
	}
	if strings.Contains(dsn, "password") {
		return "(keyword/value DSN with a password)"
	}
	return dsn
}

// testDatabaseName derives a valid, unique database name from a test name:
// "rbt_" + the test name in lower case with other characters as "_",
// shortened, + "_" + 8 random hex digits.
func testDatabaseName(testName string) (string, error) {
	var b strings.Builder
	for _, r := range strings.ToLower(testName) {
		if b.Len() >= testDBNamePrefixLenMax {
			break
		}
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	var suffix [4]byte
	if _, err := rand.Read(suffix[:]); err != nil {
		return "", fmt.Errorf("dbtest: random database name: %w", err)
	}
	name := "rbt_" + b.String() + "_" + hex.EncodeToString(suffix[:])
	return name, dbenv.ValidateDatabaseName(name)
}

// PrivatePostgres starts a server of the test's own, from the provider
// TestDatabase uses, with the given settings, and stops it when the test
// ends: for tests that crash or restart the server and must not disturb
// the tests sharing the shared one. A given DSN (ProviderDSN) cannot be
// used for that: the test is skipped and says why.
func PrivatePostgres(t testing.TB, settings map[string]string) *dbenv.Postgres {
	t.Helper()
	opts, err := sharedOptions()
	if err != nil {
		t.Fatal(err)
	}
	if opts.Provider == dbenv.ProviderDSN {
		t.Skipf("dbtest: this test needs a server of its own to crash or restart; the tests run on a given DSN (%s), which is not ours to crash", dbenv.EnvDatabaseURL)
	}
	opts.Settings = settings
	ctx, cancel := context.WithTimeout(context.Background(), sharedStartTimeout)
	defer cancel()
	pg, err := dbenv.StartPostgres(ctx, opts)
	if err != nil {
		t.Fatalf("dbtest: private server: %v", err)
	}
	t.Cleanup(func() {
		if err := pg.Stop(context.Background()); err != nil {
			t.Errorf("dbtest: stop private server: %v", err)
		}
	})
	return pg
}
