package dbenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/berkcansavur/relaybus/internal/dbenv/pgtest"
)

// pgStatStatementsInstalled reports whether contrib's pg_stat_statements
// sits beside the server binaries (Debian layout: bin/../lib).
func pgStatStatementsInstalled(t *testing.T) bool {
	dir, err := findServerBinaries()
	if err != nil {
		t.Fatal(err)
	}
	_, err = os.Stat(filepath.Join(filepath.Dir(resolve(filepath.Join(dir, "postgres"))), "..", "lib", "pg_stat_statements.so"))
	return err == nil
}

func TestLocalProvider(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	settings := map[string]string{"autovacuum": "off", "checkpoint_timeout": "15min"}
	withPSS := pgStatStatementsInstalled(t)
	if withPSS {
		settings["shared_preload_libraries"] = "pg_stat_statements"
	} else {
		t.Log("pg_stat_statements is not installed beside the server binaries: not requesting it")
	}
	pg, err := StartPostgres(ctx, PostgresOptions{Provider: ProviderLocal, Settings: settings, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pg.Stop(context.Background()) })
	if pg.Provider() != ProviderLocal {
		t.Errorf("Provider() = %q; want local", pg.Provider())
	}
	if cfg, err := pgx.ParseConfig(pg.AdminDSN()); err != nil || cfg.Host != "127.0.0.1" || cfg.Database != "postgres" || cfg.User != "postgres" {
		t.Errorf("AdminDSN %q parses as %+v, %v; want postgres@127.0.0.1/postgres", pg.AdminDSN(), cfg, err)
	}

	info, err := pg.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"fsync": "on", "autovacuum": "off", "checkpoint_timeout": "15min", "listen_addresses": ""} {
		if got, ok := info.Settings[name]; name != "listen_addresses" && got != want {
			t.Errorf("Info: %s = %q (reported %v); want %q", name, got, ok, want)
		}
	}
	for _, name := range InfoSettings {
		if _, ok := info.Settings[name]; !ok {
			t.Errorf("Info does not report %s", name)
		}
	}
	if info.VersionNum < 130000 || !strings.HasPrefix(info.Version, "PostgreSQL ") {
		t.Errorf("Info version %q (%d); want PostgreSQL 13 or later", info.Version, info.VersionNum)
	}
	if info.PgStatStatementsAvailable != withPSS || info.PgStatStatementsLoaded != withPSS {
		t.Errorf("Info pg_stat_statements available=%v loaded=%v; want %v", info.PgStatStatementsAvailable, info.PgStatStatementsLoaded, withPSS)
	}
	var listen string
	pgtest.QueryRow(t, pg.AdminDSN(), "SHOW listen_addresses", &listen)
	if listen != "127.0.0.1" {
		t.Errorf("listen_addresses = %q; want 127.0.0.1", listen)
	}

	t.Run("dsn provider on this server", func(t *testing.T) { checkDSNProvider(t, pg) })

	dsn, err := pg.CreateDatabase(ctx, "restart_keeps")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pg.CreateDatabase(ctx, "restart_keeps"); err == nil {
		t.Error("creating an existing database succeeded")
	}
	pgtest.Exec(t, dsn, "CREATE TABLE t (v int); INSERT INTO t VALUES (42)")
	if withPSS {
		pgtest.Exec(t, dsn, "CREATE EXTENSION pg_stat_statements")
		var calls int64
		pgtest.QueryRow(t, dsn, "SELECT count(*) FROM pg_stat_statements", &calls)
	}
	pgtest.CheckRestartAndCrash(t, pg, dsn)
	var v int
	pgtest.QueryRow(t, dsn, "SELECT v FROM t", &v)
	if v != 42 {
		t.Errorf("after Restart and Crash, t.v = %d; want 42", v)
	}

	// A clone holds the template's rows and is independent of it.
	clone, err := pg.CloneDatabase(ctx, "restart_clone", "restart_keeps")
	if err != nil {
		t.Fatal(err)
	}
	pgtest.Exec(t, clone, "UPDATE t SET v = 7")
	pgtest.QueryRow(t, dsn, "SELECT v FROM t", &v)
	if v != 42 {
		t.Errorf("after updating the clone, the template's t.v = %d; want 42", v)
	}
	pgtest.QueryRow(t, clone, "SELECT v FROM t", &v)
	if v != 7 {
		t.Errorf("the clone's t.v = %d; want 7", v)
	}
	if _, err := pg.CloneDatabase(ctx, "restart_clone2", "no_such_db"); err == nil {
		t.Error("cloning a database that does not exist succeeded")
	}
	if _, err := pg.CloneDatabase(ctx, "x", "Bad-Name"); err == nil || !strings.Contains(err.Error(), "invalid database name") {
		t.Errorf("CloneDatabase from an invalid name: %v; want invalid database name", err)
	}

	if err := pg.DropDatabase(ctx, "restart_keeps"); err != nil {
		t.Fatal(err)
	}
	if err := pg.DropDatabase(ctx, "restart_keeps"); err != nil {
		t.Errorf("dropping a dropped database: %v; want nil", err)
	}
	if _, err := pgx.Connect(ctx, dsn); err == nil {
		t.Error("connected to a dropped database")
	}

	dir := pg.backend.(*localServer).dir
	if _, err := os.Stat(filepath.Join(dir, "data", "PG_VERSION")); err != nil {
		t.Fatalf("data dir not where expected: %v", err)
	}
	if err := pg.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after Stop, %s: %v; want it removed", dir, err)
	}
	if err := pg.Stop(ctx); err != nil {
		t.Errorf("second Stop = %v; want nil", err)
	}
	if err := pg.Restart(ctx); err == nil {
		t.Error("Restart after Stop succeeded")
	}
	connectCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if conn, err := pgx.Connect(connectCtx, pg.AdminDSN()); err == nil {
		conn.Close(ctx)
		t.Error("the server still accepts connections after Stop")
	}
}

// checkDSNProvider runs the dsn provider against a server started by
// another provider (shared), which it must leave alone.
func checkDSNProvider(t *testing.T, shared *Postgres) {
	ctx := context.Background()
	pg, err := StartPostgres(ctx, PostgresOptions{Provider: ProviderDSN, DSN: shared.AdminDSN()})
	if err != nil {
		t.Fatal(err)
	}
	if pg.Provider() != ProviderDSN || pg.AdminDSN() != shared.AdminDSN() {
		t.Errorf("dsn provider: %q %q", pg.Provider(), pg.AdminDSN())
	}
	dsn, err := pg.CreateDatabase(ctx, "dsn_provider_db")
	if err != nil {
		t.Fatal(err)
	}
	pgtest.Exec(t, dsn, "SELECT 1")
	if err := pg.DropDatabase(ctx, "dsn_provider_db"); err != nil {
		t.Fatal(err)
	}
	if err := pg.Restart(ctx); err == nil || !strings.Contains(err.Error(), "not supported") {
		t.Errorf("Restart on dsn provider: %v; want not supported", err)
	}
	info, err := pg.Info(ctx)
	if err != nil || info.Provider != ProviderDSN || info.Settings["fsync"] == "" {
		t.Errorf("Info: %+v, %v", info, err)
	}
	if err := pg.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	// Stop leaves a given server alone.
	pgtest.Exec(t, shared.AdminDSN(), "SELECT 1")

	if _, err := StartPostgres(ctx, PostgresOptions{Provider: ProviderDSN, DSN: "postgres://postgres@127.0.0.1:1/postgres?connect_timeout=1"}); err == nil {
		t.Error("dsn provider accepted a server that does not answer")
	}
}

// TestLocalStartFailureSaysWhy: a setting the server rejects must come back
// with the server's own words, and leave nothing behind.
func TestLocalStartFailureSaysWhy(t *testing.T) {
	t.Parallel()
	_, err := StartPostgres(context.Background(), PostgresOptions{Provider: ProviderLocal, Settings: map[string]string{"shared_buffers": "lots"}})
	if err == nil || !strings.Contains(err.Error(), "shared_buffers") {
		t.Fatalf("StartPostgres with shared_buffers=lots: %v; want an error quoting the server log", err)
	}
}

// TestAutoWithoutContainersIsLocal: this test binary does not link the
// container provider (as the library's tests do not), so auto takes the
// local binaries at once, says so first, and never asks a Docker engine.
func TestAutoWithoutContainersIsLocal(t *testing.T) {
	t.Setenv("DOCKER_HOST", "unix://"+filepath.Join(t.TempDir(), "no-docker.sock"))
	var logs []string
	pg, err := StartPostgres(context.Background(), PostgresOptions{Logf: func(f string, a ...any) {
		logs = append(logs, fmt.Sprintf(f, a...))
		t.Logf(f, a...)
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Stop(context.Background())
	if pg.Provider() != ProviderLocal {
		t.Errorf("auto chose %q; want local", pg.Provider())
	}
	if len(logs) == 0 || !strings.Contains(logs[0], "provider local") || !strings.Contains(logs[0], "no container provider") {
		t.Errorf("auto did not log its choice and reason first: %q", logs)
	}
}

// TestTestcontainersNotLinked: asking for containers in a binary without
// the container provider fails at once and says where servers come from.
func TestTestcontainersNotLinked(t *testing.T) {
	t.Parallel()
	_, err := StartPostgres(context.Background(), PostgresOptions{Provider: ProviderTestcontainers})
	if !errors.Is(err, errNoContainers) || !strings.Contains(err.Error(), EnvDatabaseURL) {
		t.Fatalf("StartPostgres(testcontainers) without the provider = %v; want errNoContainers naming %s", err, EnvDatabaseURL)
	}
}

func TestMissingServerBinaries(t *testing.T) {
	empty := t.TempDir()
	t.Setenv("PATH", empty)
	saved := pgBinGlob
	pgBinGlob = filepath.Join(empty, "*", "bin")
	t.Cleanup(func() { pgBinGlob = saved })
	_, err := StartPostgres(context.Background(), PostgresOptions{Provider: ProviderLocal})
	if err == nil {
		t.Fatal("StartPostgres found server binaries in an empty PATH")
	}
	for _, want := range []string{"initdb", "postgres", pgBinGlob, "apt-get install postgresql", EnvDatabaseURL} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}
