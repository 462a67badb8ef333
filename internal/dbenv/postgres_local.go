package dbenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// pgBinGlob is where Debian-style packages install the server binaries, one
// directory per major version. A variable so that tests can point it at an
// empty directory.
var pgBinGlob = "/usr/lib/postgresql/*/bin"

// Local server limits.
const (
	// localPortAttempts bounds the retries when the free port picked for the
	// server is taken before the server binds it.
	localPortAttempts = 3
	// logTailBytes is how much of the server log an error quotes.
	logTailBytes = 2048
	// killWait bounds the wait after SIGQUIT and after SIGKILL.
	killWait = 5 * time.Second
)

// localDirPrefix names the temporary directories of local servers;
// ownerFile in each holds the pid of the process that made it.
const (
	localDirPrefix = "relaybus-pg-"
	ownerFile      = "owner.pid"
)

// sweepStaleDirs removes the directories of local servers whose owner
// process and server are both gone: what a killed test binary leaves. A
// directory without an owner file (being created right now, or not ours) is
// left alone; a reused pid keeps a directory, never removes a live one.
func sweepStaleDirs(logf func(string, ...any)) {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), localDirPrefix+"*"))
	for _, dir := range dirs {
		owner, ok := readPid(filepath.Join(dir, ownerFile))
		if !ok || processAlive(owner) {
			continue
		}
		if server, ok := readPid(filepath.Join(dir, "data", "postmaster.pid")); ok && processAlive(server) {
			continue
		}
		if err := os.RemoveAll(dir); err == nil {
			logf("dbenv: removed %s, left by process %d which is gone", dir, owner)
		}
	}
}

// readPid reads the pid on the first line of a file.
func readPid(path string) (int, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	return pid, err == nil && pid > 0
}

// processAlive reports whether a process exists (signal 0 checks without
// sending anything; EPERM means it exists under another user).
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// localServer is a throwaway cluster in a temporary directory:
//
//	dir/data     the cluster (initdb)
//	dir/sock     the unix socket directory
//	dir/log      the server's stdout and stderr
//	dir/owner.pid  the pid of the process that started it
//
// What is guaranteed about cleanup: Stop stops the server and removes dir.
// The server runs in its own process group (a Ctrl-C in the terminal reaches
// only the test binary, which stops it in order) and, on Linux, with a
// parent-death signal: if the process that started it dies (killed test
// binary), the kernel sends the postmaster SIGINT and it shuts down. The
// directory is then left behind in the temporary directory (a server is not
// left running) and the next local start removes it (sweepStaleDirs). PostgreSQL does not reliably exit when its data
// directory is removed, so dbenv does not rely on that.
type localServer struct {
	binDir  string
	dir     string
	dataDir string
	port    int
	cred    *syscall.Credential // nil unless we run as root
	logf    func(string, ...any)

	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{}
	waitErr error
}

// findServerBinaries returns a directory holding initdb and postgres of one
// version: the one on PATH, else the newest under pgBinGlob.
func findServerBinaries() (string, error) {
	if p, err := exec.LookPath("postgres"); err == nil {
		for _, candidate := range []string{p, resolve(p)} {
			dir := filepath.Dir(candidate)
			if isExecutable(filepath.Join(dir, "initdb")) {
				return dir, nil
			}
		}
	}
	dirs, _ := filepath.Glob(pgBinGlob)
	// Newest major version first: "15" > "9.6" numerically, not as strings.
	slices.SortFunc(dirs, func(a, b string) int {
		return compareVersions(filepath.Base(filepath.Dir(b)), filepath.Base(filepath.Dir(a)))
	})
	for _, dir := range dirs {
		if isExecutable(filepath.Join(dir, "postgres")) && isExecutable(filepath.Join(dir, "initdb")) {
			return dir, nil
		}
	}
	return "", fmt.Errorf("dbenv: no PostgreSQL server binaries: looked for initdb and postgres (one directory) on PATH and in %s; "+
		"install them (apt-get install postgresql postgresql-contrib), "+
		"or set %s to a server's connection string", pgBinGlob, EnvDatabaseURL)
}

func resolve(p string) string {
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	return p
}

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}

// compareVersions compares dotted numeric versions ("9.6" < "15").
func compareVersions(a, b string) int {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := range max(len(as), len(bs)) {
		var x, y int
		if i < len(as) {
			x, _ = strconv.Atoi(as[i])
		}
		if i < len(bs) {
			y, _ = strconv.Atoi(bs[i])
		}
		if x != y {
			return x - y
		}
	}
	return strings.Compare(a, b)
}

// serverCredential returns the credential the server binaries run with:
// nil (our own) unless we are root, whom initdb and postgres refuse.
func serverCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("dbenv: running as root, and initdb/postgres refuse root; they run as the OS user \"postgres\", "+
			"which cannot be found (%v): create it (useradd --system --home-dir /var/lib/postgresql postgres) or run as a non-root user", err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("dbenv: OS user postgres has a non-numeric uid %q or gid %q", u.Uid, u.Gid)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

func startLocal(ctx context.Context, settings map[string]string, logf func(string, ...any)) (_ *Postgres, err error) {
	binDir, err := findServerBinaries()
	if err != nil {
		return nil, err
	}
	cred, err := serverCredential()
	if err != nil {
		return nil, err
	}
	sweepStaleDirs(logf)
	dir, err := os.MkdirTemp("", localDirPrefix)
	if err != nil {
		return nil, fmt.Errorf("dbenv: temp dir: %w", err)
	}
	// The owner's pid lets a later start recognise the directory as stale
	// once this process is gone (killed before Stop).
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("dbenv: temp dir: %w", err)
	}
	s := &localServer{binDir: binDir, dir: dir, dataDir: filepath.Join(dir, "data"), cred: cred, logf: logf}
	defer func() {
		if err != nil {
			_ = s.stop(context.WithoutCancel(ctx))
		}
	}()
	sockDir := filepath.Join(dir, "sock")
	if err := os.Mkdir(sockDir, 0o700); err != nil {
		return nil, fmt.Errorf("dbenv: socket dir: %w", err)
	}
	if cred != nil {
		for _, p := range []string{dir, sockDir} {
			if err := os.Chown(p, int(cred.Uid), int(cred.Gid)); err != nil {
				return nil, fmt.Errorf("dbenv: chown %s to postgres: %w", p, err)
			}
		}
		if err := checkTraversable(filepath.Dir(dir), cred); err != nil {
			return nil, err
		}
	}

	start := time.Now()
	// --no-sync: the cluster is thrown away; skipping initdb's final flush
	// saves seconds and does not change how the server itself runs (fsync
	// is a server setting, on by default here).
	initdb := exec.CommandContext(ctx, filepath.Join(binDir, "initdb"),
		"-D", s.dataDir, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync")
	initdb.Dir = dir
	initdb.Env = serverEnv()
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("dbenv: initdb: %w\n%s", err, tail(out))
	}
	logf("dbenv: initdb (%s) in %s took %v", binDir, s.dataDir, time.Since(start).Round(time.Millisecond))

	conf := []string{
		"",
		"# Written by relaybus internal/dbenv.",
		"listen_addresses = '127.0.0.1'",
		"unix_socket_directories = " + quoteConfValue(sockDir),
	}
	for _, name := range slices.Sorted(maps.Keys(settings)) {
		conf = append(conf, name+" = "+quoteConfValue(settings[name]))
	}
	if err := appendFile(filepath.Join(s.dataDir, "postgresql.conf"), strings.Join(conf, "\n")+"\n"); err != nil {
		return nil, err
	}

	var lastErr error
	for range localPortAttempts {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		// A later line wins in postgresql.conf, so each attempt appends.
		if err := appendFile(filepath.Join(s.dataDir, "postgresql.conf"), fmt.Sprintf("port = %d\n", port)); err != nil {
			return nil, err
		}
		s.port = port
		lastErr = s.startProcess(ctx)
		if lastErr == nil {
			break
		}
		if !strings.Contains(lastErr.Error(), "Address already in use") {
			return nil, lastErr
		}
		logf("dbenv: port %d taken before the server bound it; trying another", port)
	}
	if lastErr != nil {
		return nil, lastErr
	}
	logf("dbenv: local server %s on 127.0.0.1:%d ready after %v", binDir, s.port, time.Since(start).Round(time.Millisecond))
	return &Postgres{provider: ProviderLocal, adminDSN: s.dsn(), backend: s, settings: settings, logf: logf}, nil
}

func (s *localServer) dsn() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", s.port)
}

func (s *localServer) source() string { return s.binDir }

// checkTraversable reports a clear error when the server user cannot reach
// the temporary directory (TMPDIR under /root, for example).
func checkTraversable(dir string, cred *syscall.Credential) error {
	for d := dir; ; d = filepath.Dir(d) {
		st, err := os.Stat(d)
		if err != nil {
			return fmt.Errorf("dbenv: %w", err)
		}
		sys, ok := st.Sys().(*syscall.Stat_t)
		mode := st.Mode().Perm()
		reachable := !ok || mode&0o001 != 0 ||
			(sys.Uid == cred.Uid && mode&0o100 != 0) || (sys.Gid == cred.Gid && mode&0o010 != 0)
		if !reachable {
			return fmt.Errorf("dbenv: the postgres OS user cannot enter %s (mode %v); set TMPDIR to a directory it can reach, such as /tmp", d, mode)
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}

// startProcess runs postgres in the foreground as our child (so that we own
// its lifetime) and waits until it accepts connections.
func (s *localServer) startProcess(ctx context.Context) error {
	logFile, err := os.OpenFile(filepath.Join(s.dir, "log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("dbenv: server log: %w", err)
	}
	defer logFile.Close() // the child holds its own descriptor
	offset, _ := logFile.Seek(0, 2)

	cmd := exec.Command(filepath.Join(s.binDir, "postgres"), "-D", s.dataDir)
	cmd.Dir = s.dir
	cmd.Env = serverEnv()
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = serverProcAttr(s.cred)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("dbenv: start postgres: %w", err)
	}
	exited := make(chan struct{})
	s.mu.Lock()
	s.cmd, s.exited = cmd, exited
	s.mu.Unlock()
	go func() {
		err := cmd.Wait()
		s.mu.Lock()
		s.waitErr = err
		s.mu.Unlock()
		close(exited)
	}()
	exitErr := func() error {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.waitErr
	}
	if err := waitReady(ctx, s.dsn(), exited, exitErr); err != nil {
		_ = s.stopProcess()
		return fmt.Errorf("dbenv: local server: %w\nserver log:\n%s", err, s.logSince(offset))
	}
	return nil
}

// stopProcess asks for a fast shutdown (SIGINT: sessions are ended, a
// checkpoint is written), escalating to immediate shutdown (SIGQUIT) and
// then SIGKILL when a step takes too long.
func (s *localServer) stopProcess() error {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return nil
	}
	steps := []struct {
		sig  os.Signal
		wait time.Duration
	}{{syscall.SIGINT, stopTimeout}, {syscall.SIGQUIT, killWait}, {syscall.SIGKILL, killWait}}
	for _, step := range steps {
		if err := cmd.Process.Signal(step.sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
			return fmt.Errorf("dbenv: signal postgres: %w", err)
		}
		select {
		case <-exited:
			return nil
		case <-time.After(step.wait):
			s.logf("dbenv: postgres did not exit within %v of %v; escalating", step.wait, step.sig)
		}
	}
	return fmt.Errorf("dbenv: postgres (pid %d) did not exit after SIGKILL", cmd.Process.Pid)
}

func (s *localServer) restart(ctx context.Context) error {
	start := time.Now()
	if err := s.stopProcess(); err != nil {
		return err
	}
	// The same port: clients reconnect to the address they know. Another
	// process could take it meanwhile; then the start fails and says so.
	if err := s.startProcess(ctx); err != nil {
		return fmt.Errorf("dbenv: restart: %w", err)
	}
	s.logf("dbenv: local server restarted in %v", time.Since(start).Round(time.Millisecond))
	return nil
}

// crash ends the postmaster with SIGQUIT (immediate shutdown: its
// children exit at once, nothing is checkpointed or flushed) and starts it
// again on the same port; the start runs crash recovery.
func (s *localServer) crash(ctx context.Context) error {
	start := time.Now()
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return errors.New("dbenv: crash: server not running")
	}
	if err := cmd.Process.Signal(syscall.SIGQUIT); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("dbenv: crash: signal postgres: %w", err)
	}
	select {
	case <-exited:
	case <-time.After(killWait):
		_ = cmd.Process.Kill()
		<-exited
	}
	if err := s.startProcess(ctx); err != nil {
		return fmt.Errorf("dbenv: crash: %w", err)
	}
	s.logf("dbenv: local server crashed (immediate shutdown) and restarted in %v", time.Since(start).Round(time.Millisecond))
	return nil
}

func (s *localServer) stop(context.Context) error {
	err := s.stopProcess()
	if rmErr := os.RemoveAll(s.dir); rmErr != nil {
		err = errors.Join(err, fmt.Errorf("dbenv: remove %s: %w", s.dir, rmErr))
	}
	return err
}

// logSince returns the end of what the server logged after offset.
func (s *localServer) logSince(offset int64) string {
	b, err := os.ReadFile(filepath.Join(s.dir, "log"))
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	if offset <= int64(len(b)) {
		b = b[offset:]
	}
	return tail(b)
}

func tail(b []byte) string {
	b = bytes.TrimSpace(b)
	if len(b) > logTailBytes {
		b = append([]byte("..."), b[len(b)-logTailBytes:]...)
	}
	return string(b)
}

// serverEnv is our environment without PG* variables, which would change
// what initdb and postgres do (PGDATA, PGPORT, ...).
func serverEnv() []string {
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "PG") })
	return append(env, "LC_ALL=C")
}

func appendFile(path, text string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return fmt.Errorf("dbenv: %w", err)
	}
	if _, err := f.WriteString(text); err != nil {
		f.Close()
		return fmt.Errorf("dbenv: write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("dbenv: write %s: %w", path, err)
	}
	return nil
}

// freePort asks the kernel for a free loopback port. The port is free when
// this returns, not necessarily when the server binds it: the caller retries.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("dbenv: find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
