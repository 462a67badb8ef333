// Package pgtest is what the tests of dbenv's PostgreSQL providers
// share: statements run on a database by its DSN (Exec, QueryRow), and
// the check every provider's test runs on the server it started
// (CheckRestartAndCrash), so that the local provider's test (in dbenv)
// and the container provider's (in dbenv/container) hold both providers
// to one promise.
//
// It imports pgx and package testing, not dbenv: dbenv's own tests are in
// package dbenv, and would otherwise import a package that imports them.
// A server is what Server describes, which *dbenv.Postgres is.
package pgtest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
)

// Exec runs sql (one or more statements) on the database of dsn, on a
// connection of its own, and fails the test on an error.
func Exec(t testing.TB, dsn, sql string) {
	t.Helper()
	withConn(t, dsn, func(ctx context.Context, conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, sql)
		return err
	}, sql)
}

// QueryRow runs a query of one row on the database of dsn, on a
// connection of its own, scans it into dest and fails the test on an
// error.
func QueryRow(t testing.TB, dsn, sql string, dest ...any) {
	t.Helper()
	withConn(t, dsn, func(ctx context.Context, conn *pgx.Conn) error {
		return conn.QueryRow(ctx, sql).Scan(dest...)
	}, sql)
}

func withConn(t testing.TB, dsn string, f func(context.Context, *pgx.Conn) error, sql string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if err := f(ctx, conn); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// Server is a running server as the checks use it (*dbenv.Postgres).
type Server interface {
	AdminDSN() string
	Restart(ctx context.Context) error
	Crash(ctx context.Context) error
}

// CheckRestartAndCrash checks what dbenv promises of every provider's
// Restart and Crash: the server comes back on the same address
// (AdminDSN does not change), a session held across the restart has
// ended, and what was committed before each is there after it; a crash
// (an immediate shutdown) keeps what was committed synchronously and
// starts again through crash recovery. It writes the table
// restart_check in dsn, a database of srv's.
func CheckRestartAndCrash(t *testing.T, srv Server, dsn string) {
	t.Helper()
	ctx := context.Background()
	Exec(t, dsn, "CREATE TABLE restart_check (v int); INSERT INTO restart_check VALUES (1)")
	held, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close(ctx)

	admin := srv.AdminDSN()
	if err := srv.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if srv.AdminDSN() != admin {
		t.Errorf("AdminDSN changed across Restart: %s -> %s", admin, srv.AdminDSN())
	}
	if err := held.Ping(ctx); err == nil {
		t.Error("a connection opened before Restart still works; want it ended")
	}
	var v int
	QueryRow(t, dsn, "SELECT v FROM restart_check", &v)
	if v != 1 {
		t.Errorf("after Restart, restart_check.v = %d; want 1", v)
	}

	Exec(t, dsn, "UPDATE restart_check SET v = 2")
	if err := srv.Crash(ctx); err != nil {
		t.Fatal(err)
	}
	if srv.AdminDSN() != admin {
		t.Errorf("AdminDSN changed across Crash: %s -> %s", admin, srv.AdminDSN())
	}
	QueryRow(t, dsn, "SELECT v FROM restart_check", &v)
	if v != 2 {
		t.Errorf("after Crash, restart_check.v = %d; want 2", v)
	}
}
