package dbenv

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func TestMain(m *testing.M) { Main(m) }

func TestParseProvider(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]Provider{
		"": ProviderAuto, "auto": ProviderAuto, " Local ": ProviderLocal,
		"testcontainers": ProviderTestcontainers, "DSN": ProviderDSN,
	} {
		got, err := ParseProvider(in)
		if err != nil || got != want {
			t.Errorf("ParseProvider(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"docker", "local,dsn", "autox"} {
		if _, err := ParseProvider(in); err == nil || !strings.HasPrefix(err.Error(), "dbenv: ") {
			t.Errorf("ParseProvider(%q) error = %v; want a dbenv error", in, err)
		}
	}
}

func TestValidateDatabaseName(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"a", "_", "rbt_x_0123abcd", strings.Repeat("a", 63)} {
		if err := ValidateDatabaseName(ok); err != nil {
			t.Errorf("ValidateDatabaseName(%q) = %v; want nil", ok, err)
		}
	}
	bad := []string{"", "A", "1abc", "a-b", "a b", `a"b`, "a;drop", strings.Repeat("a", 64), "postgres", "template1", "é"}
	// An unreachable server: a name must be rejected before any connection.
	p := &Postgres{adminDSN: "postgres://postgres@127.0.0.1:1/postgres?connect_timeout=1"}
	for _, name := range bad {
		if err := ValidateDatabaseName(name); err == nil {
			t.Errorf("ValidateDatabaseName(%q) = nil; want an error", name)
		}
		if _, err := p.CreateDatabase(context.Background(), name); err == nil || !strings.Contains(err.Error(), "invalid database name") {
			t.Errorf("CreateDatabase(%q) error = %v; want invalid database name", name, err)
		}
		if err := p.DropDatabase(context.Background(), name); err == nil || !strings.Contains(err.Error(), "invalid database name") {
			t.Errorf("DropDatabase(%q) error = %v; want invalid database name", name, err)
		}
	}
}

func TestEffectiveSettings(t *testing.T) {
	t.Parallel()
	got, err := effectiveSettings(map[string]string{"autovacuum": "off", "pg_stat_statements.track": "all"})
	if err != nil {
		t.Fatal(err)
	}
	if got["fsync"] != "on" || got["autovacuum"] != "off" || got["pg_stat_statements.track"] != "all" {
		t.Errorf("effectiveSettings = %v; want fsync=on plus the requested ones", got)
	}
	if got, _ := effectiveSettings(map[string]string{"fsync": "off"}); got["fsync"] != "off" {
		t.Errorf("an explicit fsync=off was not kept: %v", got)
	}
	for name, value := range map[string]string{
		"listen_addresses": "*", "port": "5432", "Fsync": "on", "a b": "1", "x;y": "1",
		"work_mem": "1\nfsync=off", strings.Repeat("a", 64): "1", "shared_buffers": strings.Repeat("1", settingValueLenMax+1),
	} {
		if _, err := effectiveSettings(map[string]string{name: value}); err == nil {
			t.Errorf("effectiveSettings(%q=%.20q) = nil error; want rejected", name, value)
		}
	}
}

func TestQuoteConfValue(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{"on": "'on'", "it's": "'it''s'", `a\b`: `'a\\b'`} {
		if got := quoteConfValue(in); got != want {
			t.Errorf("quoteConfValue(%q) = %s; want %s", in, got, want)
		}
	}
}

func TestDSNWithDatabase(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"postgres://u:p@127.0.0.1:5432/postgres?sslmode=disable": "postgres://u:p@127.0.0.1:5432/db1?sslmode=disable",
		"postgresql://u@h/x":                       "postgresql://u@h/db1",
		"host=127.0.0.1 port=5432 dbname=postgres": "host=127.0.0.1 port=5432 dbname=postgres dbname=db1",
	} {
		got, err := dsnWithDatabase(in, "db1")
		if err != nil || got != want {
			t.Errorf("dsnWithDatabase(%q) = %q, %v; want %q", in, got, err, want)
		}
		if cfg, err := pgx.ParseConfig(got); err != nil || cfg.Database != "db1" {
			t.Errorf("pgx reads %q as database %v (%v); want db1", got, cfg, err)
		}
	}
}

func TestTestDatabaseName(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for _, tn := range []string{"TestX", "TestX", "TestÜber/sub test#01", strings.Repeat("TestLong", 20)} {
		name, err := testDatabaseName(tn)
		if err != nil {
			t.Fatalf("testDatabaseName(%q): %v", tn, err)
		}
		if seen[name] {
			t.Errorf("testDatabaseName(%q) repeated %q", tn, name)
		}
		seen[name] = true
	}
}

func TestRedactDSN(t *testing.T) {
	t.Parallel()
	if got := redactDSN("postgres://u:secret@h:1/db"); strings.Contains(got, "secret") {
		t.Errorf("redactDSN kept the password: %s", got)
	}
	if got := redactDSN("host=h password=secret"); strings.Contains(got, "secret") {
		t.Errorf("redactDSN kept the password: %s", got)
	}
}

func TestCompareVersions(t *testing.T) {
	t.Parallel()
	if compareVersions("15", "9.6") <= 0 || compareVersions("9.6", "10") >= 0 || compareVersions("17", "17") != 0 {
		t.Error("compareVersions does not order major versions numerically")
	}
}

// TestTestDatabaseIsolated checks that parallel tests get separate databases:
// each writes its own row into a table of the same name and sees only it.
func TestTestDatabaseIsolated(t *testing.T) {
	t.Parallel()
	const tests = 4
	dsns := make(chan string, tests)
	t.Run("group", func(t *testing.T) {
		for i := range tests {
			t.Run("db"+string(rune('a'+i)), func(t *testing.T) {
				t.Parallel()
				dsn := TestDatabase(t)
				dsns <- dsn
				ctx := context.Background()
				conn, err := pgx.Connect(ctx, dsn)
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close(ctx)
				if _, err := conn.Exec(ctx, "CREATE TABLE marker (who text)"); err != nil {
					t.Fatal(err)
				}
				if _, err := conn.Exec(ctx, "INSERT INTO marker VALUES ($1)", t.Name()); err != nil {
					t.Fatal(err)
				}
				var n int
				var who string
				if err := conn.QueryRow(ctx, "SELECT count(*), min(who) FROM marker").Scan(&n, &who); err != nil {
					t.Fatal(err)
				}
				if n != 1 || who != t.Name() {
					t.Errorf("database shared: %d rows, first %q; want only %q", n, who, t.Name())
				}
			})
		}
	})
	close(dsns)
	// The group's cleanups have run: every database must be gone.
	pg := SharedPostgres(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pg.AdminDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	seen := map[string]bool{}
	for dsn := range dsns {
		cfg, err := pgx.ParseConfig(dsn)
		if err != nil {
			t.Fatal(err)
		}
		if seen[cfg.Database] {
			t.Errorf("database %s handed out twice", cfg.Database)
		}
		seen[cfg.Database] = true
		var exists bool
		if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", cfg.Database).Scan(&exists); err != nil {
			t.Fatal(err)
		}
		if exists {
			t.Errorf("database %s still exists after its test's cleanup", cfg.Database)
		}
	}
	if len(seen) != tests {
		t.Errorf("%d databases; want %d", len(seen), tests)
	}
}

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
	mustQueryRow(t, pg.AdminDSN(), "SHOW listen_addresses", &listen)
	if listen != "127.0.0.1" {
		t.Errorf("listen_addresses = %q; want 127.0.0.1", listen)
	}

	dsn, err := pg.CreateDatabase(ctx, "restart_keeps")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pg.CreateDatabase(ctx, "restart_keeps"); err == nil {
		t.Error("creating an existing database succeeded")
	}
	mustExec(t, dsn, "CREATE TABLE t (v int); INSERT INTO t VALUES (42)")
	if withPSS {
		mustExec(t, dsn, "CREATE EXTENSION pg_stat_statements")
		var calls int64
		mustQueryRow(t, dsn, "SELECT count(*) FROM pg_stat_statements", &calls)
	}
	// A session held across the restart must see its connection end.
	held, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close(ctx)

	adminBefore := pg.AdminDSN()
	if err := pg.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if pg.AdminDSN() != adminBefore {
		t.Errorf("AdminDSN changed across Restart: %s -> %s", adminBefore, pg.AdminDSN())
	}
	if err := held.Ping(ctx); err == nil {
		t.Error("a connection opened before Restart still works; want it ended")
	}
	var v int
	mustQueryRow(t, dsn, "SELECT v FROM t", &v)
	if v != 42 {
		t.Errorf("after Restart, t.v = %d; want 42", v)
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

// TestLocalStartFailureSaysWhy: a setting the server rejects must come back
// with the server's own words, and leave nothing behind.
func TestLocalStartFailureSaysWhy(t *testing.T) {
	t.Parallel()
	_, err := StartPostgres(context.Background(), PostgresOptions{Provider: ProviderLocal, Settings: map[string]string{"shared_buffers": "lots"}})
	if err == nil || !strings.Contains(err.Error(), "shared_buffers") {
		t.Fatalf("StartPostgres with shared_buffers=lots: %v; want an error quoting the server log", err)
	}
}

func TestDSNProvider(t *testing.T) {
	t.Parallel()
	shared := SharedPostgres(t)
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
	mustExec(t, dsn, "SELECT 1")
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
	mustExec(t, shared.AdminDSN(), "SELECT 1")

	if _, err := StartPostgres(ctx, PostgresOptions{Provider: ProviderDSN, DSN: "postgres://postgres@127.0.0.1:1/postgres?connect_timeout=1"}); err == nil {
		t.Error("dsn provider accepted a server that does not answer")
	}
}

// TestAutoWithoutDockerFallsBackToLocal points DOCKER_HOST at a socket that
// does not exist. The time bound is not a speed target: it asserts that the
// decision does not hang (a Docker client waiting for an engine that never
// answers), with a generous margin over the 1.5 s it is designed for.
func TestAutoWithoutDockerFallsBackToLocal(t *testing.T) {
	t.Setenv("DOCKER_HOST", "unix://"+filepath.Join(t.TempDir(), "no-docker.sock"))
	const decisionBound = 5 * time.Second
	start := time.Now()
	err := DockerAvailable(context.Background())
	if took := time.Since(start); took > decisionBound {
		t.Errorf("DockerAvailable took %v; want under %v (it must not hang)", took, decisionBound)
	}
	if err == nil || !strings.Contains(err.Error(), "no-docker.sock") {
		t.Fatalf("DockerAvailable = %v; want an error naming the socket", err)
	}

	var logs []string
	pg, err := StartPostgres(context.Background(), PostgresOptions{Logf: func(f string, a ...any) {
		logs = append(logs, f)
		t.Logf(f, a...)
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Stop(context.Background())
	if pg.Provider() != ProviderLocal {
		t.Errorf("auto chose %q; want local", pg.Provider())
	}
	if len(logs) == 0 || !strings.Contains(logs[0], "provider local") {
		t.Errorf("auto did not log its choice first: %q", logs)
	}
}

// TestDockerAvailableUnresponsive: an engine socket that accepts but never
// answers must not hang the decision either.
func TestDockerAvailableUnresponsive(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "d.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	t.Setenv("DOCKER_HOST", "unix://"+sock)
	start := time.Now()
	err = DockerAvailable(context.Background())
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("DockerAvailable took %v with a silent engine; want under 5 s", took)
	}
	if err == nil {
		t.Error("DockerAvailable = nil for an engine that never answers")
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
	for _, want := range []string{"initdb", "postgres", pgBinGlob, "apt-get install postgresql", "Docker", EnvDatabaseURL} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

func TestTestcontainersProvider(t *testing.T) {
	if err := DockerAvailable(context.Background()); err != nil {
		t.Skipf("no Docker engine, so no Testcontainers: %v", err)
	}
	ctx := context.Background()
	pg, err := StartPostgres(ctx, PostgresOptions{Provider: ProviderTestcontainers,
		Settings: map[string]string{"autovacuum": "off"}, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pg.Stop(context.Background()) })
	if os.Getenv("TESTCONTAINERS_HOST_OVERRIDE") == "" {
		if _, err := os.Stat("/.dockerenv"); err == nil {
			t.Error("in a container, TESTCONTAINERS_HOST_OVERRIDE was not set")
		}
	}
	cfg, err := pgx.ParseConfig(pg.AdminDSN())
	if err != nil || cfg.Host != "127.0.0.1" {
		t.Fatalf("AdminDSN %q: host %v, %v; want 127.0.0.1", pg.AdminDSN(), cfg, err)
	}
	info, err := pg.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Settings["fsync"] != "on" || info.Settings["autovacuum"] != "off" {
		t.Errorf("container settings fsync=%q autovacuum=%q; want on, off (the module's fsync=off must be replaced)",
			info.Settings["fsync"], info.Settings["autovacuum"])
	}
	t.Logf("container: %s, pg_stat_statements available=%v", info.Version, info.PgStatStatementsAvailable)
	dsn, err := pg.CreateDatabase(ctx, "tc_restart")
	if err != nil {
		t.Fatal(err)
	}
	mustExec(t, dsn, "CREATE TABLE t (v int); INSERT INTO t VALUES (7)")
	if err := pg.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	var v int
	mustQueryRow(t, dsn, "SELECT v FROM t", &v)
	if v != 7 {
		t.Errorf("after Restart v = %d; want 7", v)
	}
	if err := pg.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	connectCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if conn, err := pgx.Connect(connectCtx, pg.AdminDSN()); err == nil {
		conn.Close(ctx)
		t.Error("the container still accepts connections after Stop")
	}
}

func mustExec(t *testing.T, dsn, sql string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func mustQueryRow(t *testing.T, dsn, sql string, dest ...any) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if err := conn.QueryRow(ctx, sql).Scan(dest...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}
