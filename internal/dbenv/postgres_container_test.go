package dbenv

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

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
	// A crash (immediate shutdown) keeps what was committed synchronously
	// and starts again through crash recovery.
	mustExec(t, dsn, "UPDATE t SET v = 8")
	if err := pg.Crash(ctx); err != nil {
		t.Fatal(err)
	}
	mustQueryRow(t, dsn, "SELECT v FROM t", &v)
	if v != 8 {
		t.Errorf("after Crash v = %d; want 8", v)
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
