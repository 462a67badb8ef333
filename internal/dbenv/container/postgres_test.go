package container

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/berkcansavur/relaybus/internal/dbenv"
	"github.com/berkcansavur/relaybus/internal/dbenv/pgtest"
)

func TestTestcontainersProvider(t *testing.T) {
	if err := DockerAvailable(context.Background()); err != nil {
		t.Skipf("no Docker engine, so no Testcontainers: %v", err)
	}
	ctx := context.Background()
	pg, err := dbenv.StartPostgres(ctx, dbenv.PostgresOptions{Provider: dbenv.ProviderTestcontainers,
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
	pgtest.CheckRestartAndCrash(t, pg, dsn)
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

// TestAutoWithoutDockerFallsBackToLocal points DOCKER_HOST at a socket that
// does not exist, in a binary that links the container provider (as the
// harness does). The time bound is not a speed target: it asserts that the
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
	pg, err := dbenv.StartPostgres(context.Background(), dbenv.PostgresOptions{Logf: func(f string, a ...any) {
		logs = append(logs, fmt.Sprintf(f, a...))
		t.Logf(f, a...)
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Stop(context.Background())
	if pg.Provider() != dbenv.ProviderLocal {
		t.Errorf("auto chose %q; want local", pg.Provider())
	}
	if len(logs) == 0 || !strings.Contains(logs[0], "provider local") || !strings.Contains(logs[0], "no Docker engine") {
		t.Errorf("auto did not log its choice and reason first: %q", logs)
	}
}
