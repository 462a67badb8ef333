package main

// A throwaway PostgreSQL for this module's tests, modelled on the main
// module's internal/dbenv/local.go (which another module cannot import):
// initdb into a temporary directory, postgres on a free 127.0.0.1 port,
// run as the OS user "postgres" when the tests run as root (initdb and
// postgres refuse root), in its own process group with a parent-death
// signal, stopped (SIGINT, then SIGQUIT, then SIGKILL) and removed at
// the end. RELAYBUS_TEST_DATABASE_URL, when set, names a server to use
// instead (a superuser: every test creates and drops its own database).

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// envDatabaseURL names the server the tests use instead of starting one.
const envDatabaseURL = "RELAYBUS_TEST_DATABASE_URL"

// Test server bounds.
const (
	serverReadyTimeout = time.Minute
	serverStopWait     = 10 * time.Second
	logTailBytes       = 2048
)

// testServer is a running server and how to reach it as a superuser.
type testServer struct {
	adminDSN string
	// stop stops and removes a server this process started (nil for a
	// given URL).
	stop func() error
}

// startTestServer returns the server of envDatabaseURL, else starts a
// local one. It returns an error saying what is missing when neither is
// possible, so the caller can skip with that reason.
func startTestServer() (*testServer, error) {
	if dsn := os.Getenv(envDatabaseURL); dsn != "" {
		return &testServer{adminDSN: dsn}, nil
	}
	initdb, err := exec.LookPath("initdb")
	if err != nil {
		return nil, fmt.Errorf("no PostgreSQL: set %s or put initdb and postgres on PATH", envDatabaseURL)
	}
	binDir := filepath.Dir(initdb)
	postgres := filepath.Join(binDir, "postgres")
	if _, err := os.Stat(postgres); err != nil {
		return nil, fmt.Errorf("no postgres beside %s: %w", initdb, err)
	}
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("running as root, and initdb refuses root: no OS user postgres to run it as: %w", err)
		}
		uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
		gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("OS user postgres has a non-numeric uid %q or gid %q", u.Uid, u.Gid)
		}
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}

	// /tmp, not $TMPDIR: the postgres user must be able to enter it.
	dir, err := os.MkdirTemp("/tmp", "relaybus-river-pg-")
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			os.RemoveAll(dir)
		}
	}()
	data, sock := filepath.Join(dir, "data"), filepath.Join(dir, "sock")
	if err := os.Mkdir(sock, 0o700); err != nil {
		return nil, err
	}
	if cred != nil {
		for _, p := range []string{dir, sock} {
			if err := os.Chown(p, int(cred.Uid), int(cred.Gid)); err != nil {
				return nil, err
			}
		}
	}
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "PG") })
	env = append(env, "LC_ALL=C")
	cmd := exec.Command(initdb, "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync")
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("initdb: %w\n%s", err, tail(out))
	}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	logPath := filepath.Join(dir, "log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	// fsync off: a test server is thrown away, and the machine is shared;
	// these tests measure nothing.
	srv := exec.Command(postgres, "-D", data, "-p", strconv.Itoa(port), "-k", sock,
		"-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "max_connections=200")
	srv.Env = env
	srv.Stdout, srv.Stderr = logFile, logFile
	srv.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGINT, Credential: cred}
	if err := srv.Start(); err != nil {
		return nil, fmt.Errorf("start postgres: %w", err)
	}
	exited := make(chan struct{})
	go func() { srv.Wait(); close(exited) }()
	stop := func() error {
		var err error
	steps:
		for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGQUIT, syscall.SIGKILL} {
			_ = srv.Process.Signal(sig)
			select {
			case <-exited:
				err = nil
				break steps
			case <-time.After(serverStopWait):
				err = fmt.Errorf("postgres (pid %d) did not exit after %v", srv.Process.Pid, sig)
			}
		}
		return errors.Join(err, os.RemoveAll(dir))
	}
	dsn := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	deadline := time.Now().Add(serverReadyTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		conn, err := pgx.Connect(ctx, dsn)
		if err == nil {
			err = conn.Ping(ctx)
			conn.Close(ctx)
		}
		cancel()
		if err == nil {
			break
		}
		select {
		case <-exited:
			b, _ := os.ReadFile(logPath)
			return nil, fmt.Errorf("postgres exited before accepting connections:\n%s", tail(b))
		default:
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(logPath)
			return nil, errors.Join(fmt.Errorf("postgres not ready after %v: %w\n%s", serverReadyTimeout, err, tail(b)), stop())
		}
		time.Sleep(50 * time.Millisecond)
	}
	ok = true
	return &testServer{adminDSN: dsn, stop: stop}, nil
}

func tail(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > logTailBytes {
		s = "..." + s[len(s)-logTailBytes:]
	}
	return s
}

var databaseSeq atomic.Int64

// newDatabase creates a database for one test on the server and drops
// it when the test ends; it returns its DSN.
func (s *testServer) newDatabase(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	name := fmt.Sprintf("river_peer_%d_%d", os.Getpid(), databaseSeq.Add(1))
	conn, err := pgx.Connect(ctx, s.adminDSN)
	if err != nil {
		t.Fatalf("connecting to %s: %v", envDatabaseURL, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("create database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, s.adminDSN)
		if err != nil {
			t.Errorf("drop database %s: %v", name, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP DATABASE "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	u, err := url.Parse(s.adminDSN)
	if err != nil {
		t.Fatalf("%s is not a URL: %v", envDatabaseURL, err)
	}
	u.Path = "/" + name
	return u.String()
}
