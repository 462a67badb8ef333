// Package peertest is what the tests of a peer (bench/peers/<name>)
// share: the peer's binary built once and run as the harness runs it
// (one process per role, a protocol 1 config on stdin, JSON lines on
// stdout, SIGTERM to stop), a PostgreSQL server with a fresh database
// per test, the records read back, and the checks every peer's tests
// make: its bad configs, its protocol lines and records against golden
// files, and the harness's list of its build inputs.
//
// A peer's test package declares
//
//	func TestMain(m *testing.M) { peertest.Main(m, "river") }
//
// # The server
//
// RELAYBUS_TEST_DATABASE_URL names a server to use (a superuser: every
// test creates and drops a database of its own); otherwise Main starts
// a throwaway one through internal/dbenv from the PostgreSQL binaries on
// PATH or under /usr/lib/postgresql, with fsync off (the machine is
// shared and these tests measure nothing) and room for 200 connections,
// and stops it when the tests end. Where neither can be had, the tests
// that need a database skip and say why.
package peertest

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berkcansavur/relaybus/internal/dbenv"
	"github.com/berkcansavur/relaybus/internal/dbenv/pgtest"
)

// Bounds of the tests' waits: generous, since the machine is shared;
// they bound a hung test, they measure nothing.
const (
	// RoleTimeout bounds one process's ready line and its exit.
	RoleTimeout = 2 * time.Minute
	// DrainTimeout bounds waiting for a store to drain.
	DrainTimeout = 3 * time.Minute
	// serverTimeout bounds starting or stopping a test server.
	serverTimeout = 3 * time.Minute
)

// serverSettings are the test servers' settings (not a given server's).
var serverSettings = map[string]string{"fsync": "off", "max_connections": "200"}

var (
	// peerName is the peer's name Main was given; peerBin its binary.
	peerName, peerBin string
	// server is the tests' PostgreSQL; nil with noServer saying why.
	server   *dbenv.Postgres
	noServer string
	// databaseSeq numbers the tests' databases.
	databaseSeq atomic.Int64
)

// Main builds the peer in the current directory (the module under test)
// as name, gets the tests' server, runs the tests and stops the server;
// it exits with the tests' status.
func Main(m *testing.M, name string) {
	os.Exit(run(m, name))
}

func run(m *testing.M, name string) int {
	flag.Parse() // testing.Verbose, in the server's log, reads the flags
	dir, err := os.MkdirTemp("", name+"-peer-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	peerName, peerBin = name, filepath.Join(dir, name)
	if out, err := exec.Command("go", "build", "-o", peerBin, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building the peer: %v\n%s", err, out)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), serverTimeout)
	pg, err := dbenv.StartPostgres(ctx, dbenv.PostgresOptions{
		DSN: os.Getenv(dbenv.EnvDatabaseURL), Settings: serverSettings, Logf: verboseLogf,
	})
	cancel()
	if err != nil {
		noServer = err.Error()
	} else {
		server = pg
		defer func() {
			ctx, cancel := context.WithTimeout(context.Background(), serverTimeout)
			defer cancel()
			if err := pg.Stop(ctx); err != nil {
				fmt.Fprintln(os.Stderr, "stopping the test server:", err)
			}
		}()
	}
	return m.Run()
}

// verboseLogf prints dbenv's progress when the tests run verbosely.
func verboseLogf(format string, args ...any) {
	if testing.Verbose() {
		fmt.Fprintf(os.Stderr, format+"\n", args...)
	}
}

// Database returns the DSN of a fresh database on the tests' server,
// dropped when the test ends, or skips the test saying why there is no
// server.
func Database(t testing.TB) string {
	t.Helper()
	if server == nil {
		t.Skipf("no PostgreSQL for the peer's tests: %s", noServer)
	}
	return NewDatabase(t, server)
}

// NewDatabase creates a fresh database on pg and drops it when the test
// ends; it returns its DSN.
func NewDatabase(t testing.TB, pg *dbenv.Postgres) string {
	t.Helper()
	name := fmt.Sprintf("%s_peer_%d_%d", peerName, os.Getpid(), databaseSeq.Add(1))
	dsn, err := pg.CreateDatabase(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := pg.DropDatabase(context.Background(), name); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	return dsn
}

// PrivateServer starts a server of the test's own from the local
// binaries, stopped when the test ends: for a test that restarts it, which
// would break the tests sharing the other one. It skips the test when no
// local server can be started.
func PrivateServer(t testing.TB) *dbenv.Postgres {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), serverTimeout)
	defer cancel()
	pg, err := dbenv.StartPostgres(ctx, dbenv.PostgresOptions{Provider: dbenv.ProviderLocal, Settings: serverSettings, Logf: verboseLogf})
	if err != nil {
		t.Skipf("cannot start a local PostgreSQL of the test's own: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), serverTimeout)
		defer cancel()
		if err := pg.Stop(ctx); err != nil {
			t.Errorf("stopping the test's server: %v", err)
		}
	})
	return pg
}

// WALPosition is the server's current WAL position in bytes, read through
// a database of it.
func WALPosition(t testing.TB, dsn string) int64 {
	t.Helper()
	var n int64
	pgtest.QueryRow(t, dsn, `SELECT pg_current_wal_lsn() - '0/0'::pg_lsn`, &n)
	return n
}

// tail is the end of a process's output, for a failure message.
func tail(b []byte) string {
	const tailBytes = 2048
	s := strings.TrimSpace(string(b))
	if len(s) > tailBytes {
		s = "..." + s[len(s)-tailBytes:]
	}
	return s
}
