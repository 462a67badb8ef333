//go:build linux

package postgres_test

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// Bounds of the PgBouncer the tests start.
const (
	// pgbouncerStartTimeout bounds the wait for it to accept connections.
	pgbouncerStartTimeout = 10 * time.Second
	// pgbouncerStopTimeout bounds the wait for it to exit after SIGTERM
	// (an immediate shutdown), before it is killed.
	pgbouncerStopTimeout = 5 * time.Second
	// pgbouncerPortAttempts: a free port picked here can be taken by
	// another process before PgBouncer binds it.
	pgbouncerPortAttempts = 3
)

// startPgBouncer starts PgBouncer in front of the server of dsn, on a
// free port of 127.0.0.1 (and no Unix socket), in poolMode (session,
// transaction, statement), and stops it, by its pid, when the test ends.
// It returns dsn with PgBouncer's address. The test is skipped, saying
// why, where the pgbouncer binary is missing (.ci/run installs it).
// PgBouncer refuses to run as root: as root it runs as the OS user
// postgres, as internal/dbenv runs the server.
func startPgBouncer(t *testing.T, dsn, poolMode string) string {
	t.Helper()
	bin, err := exec.LookPath("pgbouncer")
	if err != nil {
		if _, serr := os.Stat("/usr/sbin/pgbouncer"); serr != nil {
			t.Skipf("needs PgBouncer to test wake-ups behind a pooler, and there is no pgbouncer binary (%v); "+
				"install it (Debian: apt-get install pgbouncer; .ci/run does)", err)
		}
		bin = "/usr/sbin/pgbouncer"
	}
	cfg, err := pgx.ParseConfig(dsn)
	require.NoError(t, err)

	var cred *syscall.Credential
	dir, err := os.MkdirTemp("", "relaybus-pgbouncer-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Skipf("running as root, and PgBouncer refuses root; it runs as the OS user postgres, which cannot be found: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		require.NoError(t, os.Chown(dir, uid, gid))
	}
	// The user's password, in plain text, is what PgBouncer logs in to
	// the server with (a container's server asks for one; the local one
	// trusts 127.0.0.1 and ignores it).
	users := filepath.Join(dir, "users.txt")
	require.NoError(t, os.WriteFile(users, []byte(authFileQuote(cfg.User)+" "+authFileQuote(cfg.Password)+"\n"), 0o600))
	if cred != nil {
		require.NoError(t, os.Chown(users, int(cred.Uid), int(cred.Gid)))
	}

	var lastErr error
	for range pgbouncerPortAttempts {
		port := freeTCPPort(t)
		ini := filepath.Join(dir, "pgbouncer.ini")
		// auth_type trust: PgBouncer asks its clients for nothing;
		// auth_file must still name the user.
		conf := strings.Join([]string{
			"[databases]",
			fmt.Sprintf("* = host=%s port=%d", cfg.Host, cfg.Port),
			"[pgbouncer]",
			"listen_addr = 127.0.0.1",
			fmt.Sprintf("listen_port = %d", port),
			"unix_socket_dir =",
			"auth_type = trust",
			"auth_file = " + users,
			"pool_mode = " + poolMode,
			"max_client_conn = 200",
			"default_pool_size = 20",
			"ignore_startup_parameters = extra_float_digits",
			"logfile = " + filepath.Join(dir, "pgbouncer.log"),
		}, "\n") + "\n"
		require.NoError(t, os.WriteFile(ini, []byte(conf), 0o644))
		cmd := exec.Command(bin, ini)
		cmd.Dir = dir
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true, Pdeathsig: syscall.SIGKILL}
		require.NoError(t, cmd.Start())
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		if lastErr = waitAccepting(port, exited); lastErr == nil {
			t.Cleanup(func() {
				_ = cmd.Process.Signal(syscall.SIGTERM)
				select {
				case <-exited:
				case <-time.After(pgbouncerStopTimeout):
					_ = cmd.Process.Kill()
					<-exited
				}
			})
			return replaceHostPort(dsn, cfg, port)
		}
		_ = cmd.Process.Kill()
		<-exited
		log, _ := os.ReadFile(filepath.Join(dir, "pgbouncer.log"))
		lastErr = fmt.Errorf("%w\n%s", lastErr, log)
	}
	t.Fatalf("PgBouncer did not start: %v", lastErr)
	return ""
}

// authFileQuote quotes s for PgBouncer's auth_file: in double quotes, a
// double quote doubled.
func authFileQuote(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// waitAccepting waits until something accepts on 127.0.0.1:port, or the
// process exits, or pgbouncerStartTimeout passes.
func waitAccepting(port int, exited <-chan error) error {
	deadline := time.Now().Add(pgbouncerStartTimeout)
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 200*time.Millisecond)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case err := <-exited:
			return fmt.Errorf("pgbouncer exited: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("pgbouncer did not accept on port %d within %v", port, pgbouncerStartTimeout)
}

// freeTCPPort returns a port of 127.0.0.1 that was free a moment ago.
func freeTCPPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// replaceHostPort returns the URL dsn (of cfg) with 127.0.0.1:port for
// its address.
func replaceHostPort(dsn string, cfg *pgx.ConnConfig, port int) string {
	return strings.Replace(dsn, fmt.Sprintf("%s:%d", cfg.Host, cfg.Port), fmt.Sprintf("127.0.0.1:%d", port), 1)
}
