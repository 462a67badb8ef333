package dbenv

// PostgreSQL: where a server comes from (Provider), starting one
// (StartPostgres), and what the tests and the harness do with it. Each
// provider is a backend in a file of its own: postgres_local.go,
// postgres_dsn.go, and containers.go (the hook of the container provider,
// package internal/dbenv/container).

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// EnvDatabaseURL names a server to use instead of starting one
// (ProviderDSN without a DSN; the tests' server when it is set).
const EnvDatabaseURL = "RELAYBUS_TEST_DATABASE_URL"

// Provider names where a PostgreSQL server comes from.
type Provider string

const (
	// ProviderAuto picks Testcontainers when the binary links the container
	// provider (internal/dbenv/container) and a Docker engine answers, else
	// local server binaries.
	ProviderAuto Provider = "auto"
	// ProviderLocal runs a throwaway cluster from the initdb and postgres
	// binaries found on this machine.
	ProviderLocal Provider = "local"
	// ProviderTestcontainers runs the server in a container through
	// testcontainers-go; the binary must import internal/dbenv/container.
	ProviderTestcontainers Provider = "testcontainers"
	// ProviderDSN uses a server the user gives by its connection string.
	ProviderDSN Provider = "dsn"
)

// ParseProvider turns a flag or environment value into a Provider. The empty
// string means ProviderAuto; case and surrounding spaces are ignored.
func ParseProvider(s string) (Provider, error) {
	switch p := Provider(strings.ToLower(strings.TrimSpace(s))); p {
	case "", ProviderAuto:
		return ProviderAuto, nil
	case ProviderLocal, ProviderTestcontainers, ProviderDSN:
		return p, nil
	default:
		return "", fmt.Errorf("dbenv: unknown provider %q: want one of auto, local, testcontainers, dsn", s)
	}
}

// Limits, named so that every loop and wait in the package has a bound.
const (
	// startTimeout bounds how long a server may take to accept connections.
	startTimeout = 90 * time.Second
	// stopTimeout bounds a fast shutdown before it is escalated.
	stopTimeout = 30 * time.Second
	// stopBound bounds Stop: a local server's fast shutdown and its two
	// escalations (SIGQUIT, SIGKILL), or a container's removal.
	stopBound = stopTimeout + 2*killWait
	// adminOpTimeout bounds one administrative statement (CREATE/DROP
	// DATABASE, Info) when the caller's context has no earlier deadline.
	adminOpTimeout = 60 * time.Second
)

// PostgresOptions says which server to get and how to configure it.
type PostgresOptions struct {
	// Provider chooses where the server comes from; "" means ProviderAuto.
	Provider Provider
	// DSN is the server ProviderDSN uses; empty means the environment
	// variable RELAYBUS_TEST_DATABASE_URL. With ProviderAuto a non-empty DSN
	// selects ProviderDSN.
	DSN string
	// Image is the Testcontainers image; empty means the container
	// provider's default (RELAYBUS_PG_IMAGE, else container.DefaultImage).
	Image string
	// Settings are server settings (postgresql.conf names), for example
	// shared_preload_libraries=pg_stat_statements, autovacuum=off. dbenv
	// always sets fsync=on unless Settings says otherwise, and manages the
	// listening address, port and socket directory itself: those names are
	// rejected here. Ignored by ProviderDSN (the server is not ours to
	// configure); Info reports what that server actually runs with.
	Settings map[string]string
	// Logf receives progress messages; nil means silent.
	Logf func(format string, args ...any)
}

// ServerInfo describes a running server: enough to record beside a result.
type ServerInfo struct {
	Provider Provider
	// Source is where the server came from: the binary directory (local),
	// the image (testcontainers) or "given DSN" (dsn).
	Source string
	// Version is SELECT version(); VersionNum is server_version_num.
	Version    string
	VersionNum int
	// Settings holds the current value (as SHOW prints it) of each setting
	// in InfoSettings and of each setting requested in PostgresOptions.
	Settings map[string]string
	// PgStatStatementsAvailable reports whether the pg_stat_statements
	// extension is installed on the server (contrib present);
	// PgStatStatementsLoaded whether shared_preload_libraries loads it.
	PgStatStatementsAvailable bool
	PgStatStatementsLoaded    bool
}

// InfoSettings are the settings Info always reports: the ones that change
// what a benchmark measures.
var InfoSettings = []string{
	"fsync", "synchronous_commit", "full_page_writes", "shared_buffers",
	"wal_level", "autovacuum", "shared_preload_libraries", "max_connections",
	"checkpoint_timeout",
}

// Postgres is a running server with a superuser connection string. Its
// methods are safe for concurrent use.
type Postgres struct {
	provider Provider
	adminDSN string
	backend  backend
	settings map[string]string // effective settings requested (nil for dsn)
	logf     func(string, ...any)

	mu      sync.Mutex
	stopped bool
	stopErr error
}

// backend is what differs between providers.
type backend interface {
	// restart stops the server and starts it again on the same address with
	// the same data.
	restart(ctx context.Context) error
	// crash ends the server the way a power cut would (an immediate
	// shutdown: no checkpoint, WAL not yet flushed is lost) and starts it
	// again on the same address; it comes back through crash recovery.
	crash(ctx context.Context) error
	// stop stops the server and removes what it left behind.
	stop(ctx context.Context) error
	// source describes where the server came from, for ServerInfo.Source.
	source() string
}

// StartPostgres gets a server from the chosen provider and returns once it
// accepts connections. The caller must call Stop.
func StartPostgres(ctx context.Context, opts PostgresOptions) (*Postgres, error) {
	logf := opts.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	provider := opts.Provider
	if provider == "" {
		provider = ProviderAuto
	}
	if _, err := ParseProvider(string(provider)); err != nil {
		return nil, err
	}
	settings, err := effectiveSettings(opts.Settings)
	if err != nil {
		return nil, err
	}

	switch provider {
	case ProviderDSN:
		dsn := opts.DSN
		if dsn == "" {
			dsn = os.Getenv(EnvDatabaseURL)
		}
		return startDSN(ctx, dsn, logf)
	case ProviderLocal:
		return startLocal(ctx, settings, logf)
	case ProviderTestcontainers:
		return startContainer(ctx, opts.Image, settings, logf)
	}

	// Auto.
	if opts.DSN != "" {
		logf("dbenv: provider dsn (auto: a DSN was given)")
		return startDSN(ctx, opts.DSN, logf)
	}
	c, noContainers := containersOf()
	var containerErr error
	if noContainers == nil {
		containerErr = c.Available(ctx)
		if containerErr == nil {
			logf("dbenv: provider testcontainers (auto: a Docker engine answers)")
			p, err := startContainer(ctx, opts.Image, settings, logf)
			if err == nil {
				return p, nil
			}
			logf("dbenv: testcontainers failed, trying local server binaries: %v", err)
			containerErr = err
		} else {
			// Said once, and without the advice to start Docker: the
			// local provider is what runs here.
			why, _, _ := strings.Cut(strings.TrimPrefix(containerErr.Error(), "dbenv: "), "; start one")
			logf("dbenv: provider local (auto: %s)", why)
		}
	} else {
		logf("dbenv: provider local (auto: this binary has no container provider)")
	}
	p, localErr := startLocal(ctx, settings, logf)
	if localErr == nil {
		return p, nil
	}
	if noContainers != nil {
		return nil, fmt.Errorf("dbenv: no PostgreSQL server available: local: %v", localErr)
	}
	return nil, fmt.Errorf("dbenv: no PostgreSQL server available: Testcontainers: %v; local: %v; "+
		"start a Docker engine, install PostgreSQL (apt-get install postgresql postgresql-contrib), "+
		"or set %s to a server's connection string", containerErr, localErr, EnvDatabaseURL)
}

// Provider reports where the server came from.
func (p *Postgres) Provider() Provider { return p.provider }

// AdminDSN is a superuser connection string for the database "postgres".
// It does not change across Restart.
func (p *Postgres) AdminDSN() string { return p.adminDSN }

// dbNamePattern is what CreateDatabase accepts: lower case so that the name
// needs no quoting anywhere, at most 63 bytes (PostgreSQL's NAMEDATALEN-1).
var dbNamePattern = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// ValidateDatabaseName reports whether name is acceptable to CreateDatabase.
func ValidateDatabaseName(name string) error {
	if !dbNamePattern.MatchString(name) {
		return fmt.Errorf("dbenv: invalid database name %q: want %s", name, dbNamePattern)
	}
	switch name {
	case "postgres", "template0", "template1":
		return fmt.Errorf("dbenv: invalid database name %q: reserved", name)
	}
	return nil
}

// CreateDatabase creates an empty database and returns its connection
// string (same credentials as AdminDSN).
func (p *Postgres) CreateDatabase(ctx context.Context, name string) (string, error) {
	if err := ValidateDatabaseName(name); err != nil {
		return "", err
	}
	dsn, err := dsnWithDatabase(p.adminDSN, name)
	if err != nil {
		return "", err
	}
	err = p.withAdmin(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
		return err
	})
	if err != nil {
		return "", fmt.Errorf("dbenv: create database %s: %w", name, err)
	}
	return dsn, nil
}

// CloneDatabase creates database name as a copy of database template
// (CREATE DATABASE ... TEMPLATE) and returns its connection string. No
// session may be connected to template. On PostgreSQL 15 and later the
// copy is a file copy (STRATEGY FILE_COPY: two checkpoints and a copy of
// the files, instead of writing the whole database to the WAL); earlier
// servers copy files always.
func (p *Postgres) CloneDatabase(ctx context.Context, name, template string) (string, error) {
	for _, n := range []string{name, template} {
		if err := ValidateDatabaseName(n); err != nil {
			return "", err
		}
	}
	dsn, err := dsnWithDatabase(p.adminDSN, name)
	if err != nil {
		return "", err
	}
	err = p.withAdmin(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		var num int
		if err := conn.QueryRow(ctx, "SELECT current_setting('server_version_num')::int").Scan(&num); err != nil {
			return err
		}
		q := "CREATE DATABASE " + pgx.Identifier{name}.Sanitize() + " TEMPLATE " + pgx.Identifier{template}.Sanitize()
		if num >= 150000 {
			q += " STRATEGY FILE_COPY"
		}
		_, err := conn.Exec(ctx, q)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("dbenv: create database %s from template %s: %w", name, template, err)
	}
	return dsn, nil
}

// DropDatabase drops a database, terminating its sessions (WITH (FORCE),
// PostgreSQL 13 and later). Dropping a database that does not exist is not
// an error.
func (p *Postgres) DropDatabase(ctx context.Context, name string) error {
	if err := ValidateDatabaseName(name); err != nil {
		return err
	}
	err := p.withAdmin(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
		return err
	})
	if err != nil {
		return fmt.Errorf("dbenv: drop database %s: %w", name, err)
	}
	return nil
}

// Restart stops the server and starts it again with the same data on the
// same address (a fault scenario: clients see their connections drop). It
// is an error for ProviderDSN, whose server is not ours to restart.
func (p *Postgres) Restart(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return errors.New("dbenv: restart: server already stopped")
	}
	return p.backend.restart(ctx)
}

// Crash stops the server at once, as a crash would (PostgreSQL's immediate
// shutdown, SIGQUIT: every server process exits without a checkpoint and
// without flushing the WAL it still buffers, so commits made with
// synchronous_commit off in the last moments can be lost), and starts it
// again with the same data on the same address, through crash recovery.
// It is an error for ProviderDSN, whose server is not ours to crash.
func (p *Postgres) Crash(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return errors.New("dbenv: crash: server already stopped")
	}
	return p.backend.crash(ctx)
}

// Stop stops the server and removes its data directory or container. It is
// idempotent: later calls return the first call's result. It takes at most
// stopBound, whatever ctx's deadline.
func (p *Postgres) Stop(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return p.stopErr
	}
	ctx, cancel := context.WithTimeout(ctx, stopBound)
	defer cancel()
	p.stopped = true
	p.stopErr = p.backend.stop(ctx)
	return p.stopErr
}

// Info reports the server's version and the settings that matter.
func (p *Postgres) Info(ctx context.Context) (*ServerInfo, error) {
	names := slices.Clone(InfoSettings)
	for _, name := range slices.Sorted(maps.Keys(p.settings)) {
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	info := &ServerInfo{Provider: p.provider, Source: p.backend.source(), Settings: make(map[string]string, len(names))}
	err := p.withAdmin(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		err := conn.QueryRow(ctx, "SELECT version(), current_setting('server_version_num')::int").
			Scan(&info.Version, &info.VersionNum)
		if err != nil {
			return err
		}
		for _, name := range names {
			var value string
			// current_setting(name, true) returns NULL for an unknown name
			// (a placeholder such as a custom extension setting).
			var v *string
			if err := conn.QueryRow(ctx, "SELECT current_setting($1, true)", name).Scan(&v); err != nil {
				return fmt.Errorf("setting %s: %w", name, err)
			}
			if v != nil {
				value = *v
			}
			info.Settings[name] = value
		}
		return conn.QueryRow(ctx,
			"SELECT EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'pg_stat_statements')").
			Scan(&info.PgStatStatementsAvailable)
	})
	if err != nil {
		return nil, fmt.Errorf("dbenv: info: %w", err)
	}
	info.PgStatStatementsLoaded = slices.Contains(splitList(info.Settings["shared_preload_libraries"]), "pg_stat_statements")
	return info, nil
}

// splitList splits a PostgreSQL list setting ("a, b").
func splitList(s string) []string {
	var out []string
	for part := range strings.SplitSeq(s, ",") {
		if part = strings.Trim(strings.TrimSpace(part), `"`); part != "" {
			out = append(out, part)
		}
	}
	return out
}

// withAdmin runs fn on a fresh superuser connection. A connection per call
// keeps Restart simple (no pool holding dead connections) and costs a few
// milliseconds on a loopback server.
func (p *Postgres) withAdmin(ctx context.Context, fn func(context.Context, *pgx.Conn) error) error {
	ctx, cancel := context.WithTimeout(ctx, adminOpTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, p.adminDSN)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return fn(ctx, conn)
}

// dsnWithDatabase returns dsn with its database replaced: a URL gets a new
// path; a keyword/value string gets a trailing dbname (the last occurrence
// of a keyword wins, for libpq and pgx alike).
func dsnWithDatabase(dsn, db string) (string, error) {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return "", fmt.Errorf("dbenv: parse DSN: %w", err)
		}
		u.Path = "/" + db
		u.RawPath = ""
		return u.String(), nil
	}
	if _, err := pgx.ParseConfig(dsn); err != nil {
		return "", fmt.Errorf("dbenv: parse DSN: %w", err)
	}
	return strings.TrimSpace(dsn) + " dbname=" + db, nil
}

// waitReady polls until dsn accepts a connection, exited is closed (the
// server died: its error is returned) or ctx ends.
func waitReady(ctx context.Context, dsn string, exited <-chan struct{}, exitErr func() error) error {
	const pollInterval = 50 * time.Millisecond
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	var lastErr error
	for {
		attemptCtx, attemptCancel := context.WithTimeout(ctx, 2*time.Second)
		conn, err := pgx.Connect(attemptCtx, dsn)
		if err == nil {
			err = conn.Ping(attemptCtx)
			conn.Close(attemptCtx)
		}
		attemptCancel()
		if err == nil {
			return nil
		}
		lastErr = err
		select {
		case <-exited:
			return fmt.Errorf("server exited before accepting connections: %v", exitErr())
		case <-ctx.Done():
			return fmt.Errorf("server did not accept connections within %v: %v", startTimeout, lastErr)
		case <-time.After(pollInterval):
		}
	}
}
