package dbenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// Limits of the shared test server.
const (
	// sharedStartTimeout bounds starting the shared server (an image pull
	// or initdb included).
	sharedStartTimeout = 3 * time.Minute
	// testDBNamePrefixLenMax bounds the part of a test database's name taken
	// from the test's name; the rest is a prefix and a random suffix.
	testDBNamePrefixLenMax = 40
)

// shared is the server of one test binary, started on first use.
var shared struct {
	mu      sync.Mutex
	started bool // a start was attempted; err says how it went
	pg      *Postgres
	err     error
	running bool // Main or Run is running the tests
	// stoppable is pg once started, readable without mu: the signal handler
	// must not wait for a start in progress (which holds mu).
	stoppable atomic.Pointer[Postgres]
}

// TestDatabase returns the connection string of a fresh, empty database on a
// server shared by the test binary, and drops the database in t.Cleanup. It
// is safe for parallel tests.
//
// The server is started on first use: RELAYBUS_TEST_DATABASE_URL selects a
// given server (provider dsn); otherwise RELAYBUS_TEST_DB_PROVIDER (auto,
// local, testcontainers; default auto). The test package must stop it with
// `func TestMain(m *testing.M) { dbenv.Main(m) }`. If no server can be had,
// the test fails with the reason and how to get one: a database test never
// skips silently.
func TestDatabase(t testing.TB) string {
	t.Helper()
	pg, err := sharedServer()
	if err != nil {
		t.Fatal(err)
	}
	name, err := testDatabaseName(t.Name())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), adminOpTimeout)
	defer cancel()
	dsn, err := pg.CreateDatabase(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), adminOpTimeout)
		defer cancel()
		if err := pg.DropDatabase(ctx, name); err != nil {
			t.Errorf("dbenv: cleanup: %v", err)
		}
	})
	return dsn
}

// SharedPostgres returns the server TestDatabase uses, starting it if
// needed: for tests that need the server itself (Restart, Info).
func SharedPostgres(t testing.TB) *Postgres {
	t.Helper()
	pg, err := sharedServer()
	if err != nil {
		t.Fatal(err)
	}
	return pg
}

func sharedServer() (*Postgres, error) {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if !shared.running {
		return nil, fmt.Errorf("dbenv: the shared test server needs `func TestMain(m *testing.M) { dbenv.Main(m) }` " +
			"in this test package, so that it is stopped when the tests end")
	}
	if shared.started {
		return shared.pg, shared.err
	}
	shared.started = true
	opts, err := sharedOptions()
	if err != nil {
		shared.err = err
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), sharedStartTimeout)
	defer cancel()
	shared.pg, shared.err = StartPostgres(ctx, opts)
	if shared.pg != nil {
		shared.stoppable.Store(shared.pg)
	}
	if shared.err != nil {
		shared.err = fmt.Errorf("%w\n(dbenv: the test server comes from %s=%q, %s=%q; see internal/dbenv)",
			shared.err, EnvTestProvider, os.Getenv(EnvTestProvider), EnvDatabaseURL, redactDSN(os.Getenv(EnvDatabaseURL)))
	}
	return shared.pg, shared.err
}

func sharedOptions() (PostgresOptions, error) {
	opts := PostgresOptions{Logf: testLogf}
	if dsn := os.Getenv(EnvDatabaseURL); dsn != "" {
		opts.Provider, opts.DSN = ProviderDSN, dsn
		return opts, nil
	}
	p, err := ParseProvider(os.Getenv(EnvTestProvider))
	if err != nil {
		return opts, fmt.Errorf("%w (from %s)", err, EnvTestProvider)
	}
	opts.Provider = p
	return opts, nil
}

// testLogf prints progress to stderr when the tests run verbosely.
func testLogf(format string, args ...any) {
	if testing.Verbose() {
		fmt.Fprintf(os.Stderr, format+"\n", args...)
	}
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
		return "", fmt.Errorf("dbenv: random database name: %w", err)
	}
	name := "rbt_" + b.String() + "_" + hex.EncodeToString(suffix[:])
	return name, ValidateDatabaseName(name)
}

// Main runs the tests, stops the shared server and exits with the tests'
// status: `func TestMain(m *testing.M) { dbenv.Main(m) }`.
func Main(m *testing.M) {
	os.Exit(Run(m))
}

// Run is Main without the exit, for a TestMain that does more afterwards
// (goleak.Find, for example). It returns m.Run's status, or 1 when the
// shared server could not be stopped cleanly. While the tests run, SIGINT
// and SIGTERM stop the shared server before the process exits.
func Run(m *testing.M) int {
	shared.mu.Lock()
	shared.running = true
	shared.mu.Unlock()

	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
	done := make(chan struct{})
	handlerDone := make(chan struct{})
	go func() {
		defer close(handlerDone)
		select {
		case sig := <-signals:
			fmt.Fprintf(os.Stderr, "dbenv: %v: stopping the shared test server\n", sig)
			_ = stopShared()
			os.Exit(1)
		case <-done:
		}
	}()

	code := m.Run()

	signal.Stop(signals)
	close(done)
	<-handlerDone
	if err := stopShared(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		if code == 0 {
			code = 1
		}
	}
	shared.mu.Lock()
	shared.running = false
	shared.mu.Unlock()
	return code
}

func stopShared() error {
	pg := shared.stoppable.Load()
	if pg == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), stopTimeout+2*killWait)
	defer cancel()
	return pg.Stop(ctx)
}
