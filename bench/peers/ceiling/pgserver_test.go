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
	"sync"
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
	// local is the server this process started (nil for a given URL).
	local *localServer
}

// localServer is a cluster in a temporary directory and its postgres
// process.
type localServer struct {
	dir, data, sock, logPath, postgres string
	port                               int
	env                                []string
	cred                               *syscall.Credential

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
}

// startTestServer returns the server of envDatabaseURL, else starts a
// local one. It returns an error saying what is missing when neither is
// possible, so the caller can skip with that reason.
func startTestServer() (*testServer, error) {
	if dsn := os.Getenv(envDatabaseURL); dsn != "" {
		return &testServer{adminDSN: dsn}, nil
	}
	return startLocalServer()
}

// startLocalServer starts a throwaway server from the binaries on PATH.
func startLocalServer() (*testServer, error) {
	initdb, err := exec.LookPath("initdb")
	if err != nil {
		return nil, fmt.Errorf("no PostgreSQL: set %s or put initdb and postgres on PATH", envDatabaseURL)
	}
	s := &localServer{postgres: filepath.Join(filepath.Dir(initdb), "postgres")}
	if _, err := os.Stat(s.postgres); err != nil {
		return nil, fmt.Errorf("no postgres beside %s: %w", initdb, err)
	}
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
		s.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}

	// /tmp, not $TMPDIR: the postgres user must be able to enter it.
	s.dir, err = os.MkdirTemp("/tmp", "relaybus-ceiling-pg-")
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			_ = s.stop()
		}
	}()
	s.data, s.sock, s.logPath = filepath.Join(s.dir, "data"), filepath.Join(s.dir, "sock"), filepath.Join(s.dir, "log")
	if err := os.Mkdir(s.sock, 0o700); err != nil {
		return nil, err
	}
	if s.cred != nil {
		for _, p := range []string{s.dir, s.sock} {
			if err := os.Chown(p, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
				return nil, err
			}
		}
	}
	s.env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "PG") })
	s.env = append(s.env, "LC_ALL=C")
	cmd := exec.Command(initdb, "-D", s.data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync")
	cmd.Env = s.env
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("initdb: %w\n%s", err, tail(out))
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s.port = l.Addr().(*net.TCPAddr).Port
	l.Close()
	if err := s.startProcess(); err != nil {
		return nil, err
	}
	ok = true
	return &testServer{adminDSN: s.dsn(), local: s}, nil
}

func (s *localServer) dsn() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", s.port)
}

// startProcess starts postgres and waits until it accepts connections.
func (s *localServer) startProcess() error {
	logFile, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logFile.Close() // the child holds its own descriptor
	// fsync off: a test server is thrown away, and the machine is shared;
	// these tests measure nothing.
	cmd := exec.Command(s.postgres, "-D", s.data, "-p", strconv.Itoa(s.port), "-k", s.sock,
		"-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "max_connections=200")
	cmd.Env = s.env
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGINT, Credential: s.cred}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start postgres: %w", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	s.mu.Lock()
	s.cmd, s.exited = cmd, exited
	s.mu.Unlock()
	deadline := time.Now().Add(serverReadyTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		conn, err := pgx.Connect(ctx, s.dsn())
		if err == nil {
			err = conn.Ping(ctx)
			conn.Close(ctx)
		}
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			b, _ := os.ReadFile(s.logPath)
			return fmt.Errorf("postgres exited before accepting connections:\n%s", tail(b))
		default:
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(s.logPath)
			return fmt.Errorf("postgres not ready after %v: %w\n%s", serverReadyTimeout, err, tail(b))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stopProcess asks for a fast shutdown (SIGINT), escalating to SIGQUIT
// and SIGKILL.
func (s *localServer) stopProcess() error {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return nil
	}
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGQUIT, syscall.SIGKILL} {
		_ = cmd.Process.Signal(sig)
		select {
		case <-exited:
			return nil
		case <-time.After(serverStopWait):
		}
	}
	return fmt.Errorf("postgres (pid %d) did not exit after SIGKILL", cmd.Process.Pid)
}

// stop stops the server and removes its directory.
func (s *localServer) stop() error {
	return errors.Join(s.stopProcess(), os.RemoveAll(s.dir))
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
func (s *testServer) newDatabase(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	name := fmt.Sprintf("ceiling_peer_%d_%d", os.Getpid(), databaseSeq.Add(1))
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
