// Package dbtest gives tests a database server through internal/dbenv:
// PostgreSQL (TestDatabase, SharedPostgres) and MongoDB (TestMongoURI),
// each started once per test binary on first use and stopped when its tests
// end. The helpers are here, not in dbenv, so that dbenv does not import
// package testing.
//
// A test package that uses it declares
//
//	func TestMain(m *testing.M) { dbtest.Main(m) }
//
// dbtest imports no container code: a test binary gets containers only by
// importing internal/dbenv/container itself. The library's tests do not,
// so that a module requiring relaybus gets no Docker or Testcontainers
// module in its go.sum; they take PostgreSQL from RELAYBUS_TEST_DATABASE_URL
// or the local server binaries, and MongoDB from RELAYBUS_TEST_MONGO_URI.
//
// PostgreSQL tests never skip: when no server can be had the test fails and
// says how to get one. MongoDB tests skip, saying why, where no replica set
// can be had (dbenv.ErrUnavailable): no MongoDB server is faked.
package dbtest

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"testing"
)

// Main runs the tests, stops the shared servers and exits with the tests'
// status: `func TestMain(m *testing.M) { dbtest.Main(m) }`.
func Main(m *testing.M) {
	os.Exit(Run(m))
}

// Run is Main without the exit, for a TestMain that does more afterwards
// (goleak.Find, for example). It returns m.Run's status, or 1 when a
// shared server could not be stopped cleanly. While the tests run, SIGINT
// and SIGTERM stop the shared servers before the process exits.
func Run(m *testing.M) int {
	setRunning(true)
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
	done := make(chan struct{})
	handlerDone := make(chan struct{})
	go func() {
		defer close(handlerDone)
		select {
		case sig := <-signals:
			fmt.Fprintf(os.Stderr, "dbtest: %v: stopping the shared test servers\n", sig)
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
	setRunning(false)
	return code
}

// setRunning records whether Run is running the tests: the shared servers
// are started only then, so that they are always stopped.
func setRunning(running bool) {
	pgShared.mu.Lock()
	pgShared.running = running
	pgShared.mu.Unlock()
	mongoShared.mu.Lock()
	mongoShared.running = running
	mongoShared.mu.Unlock()
}

// stopShared stops both shared servers, whichever were started. Each
// dbenv Stop bounds its own wait.
func stopShared() error {
	var errs []error
	if pg := pgShared.stoppable.Load(); pg != nil {
		if err := pg.Stop(context.Background()); err != nil {
			errs = append(errs, err)
		}
	}
	if m := mongoShared.stoppable.Load(); m != nil {
		if err := m.Stop(context.Background()); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("dbtest: stopping the shared servers: %v", errs)
	}
	return nil
}

// testLogf prints progress to stderr when the tests run verbosely.
func testLogf(format string, args ...any) {
	if testing.Verbose() {
		fmt.Fprintf(os.Stderr, format+"\n", args...)
	}
}
