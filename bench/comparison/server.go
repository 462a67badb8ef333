package comparison

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/berkcansavur/relaybus/bench/pgmetrics"
	"github.com/berkcansavur/relaybus/bench/scenarios"
	"github.com/berkcansavur/relaybus/internal/dbenv"
)

// skipDatabaseFaults skips the cells whose fault plan restarts or
// crashes the database server when the server is not the harness's own
// (provider dsn), and returns a note per skipped cell; it is an error
// when nothing is left to run.
func skipDatabaseFaults(m *scenarios.Matrix, provider dbenv.Provider) ([]string, error) {
	if provider != dbenv.ProviderDSN {
		return nil, nil
	}
	notes := m.SkipDatabaseFaults("the server comes from provider dsn, and a server the harness did not start is not its to restart or crash")
	if len(m.Cells) == 0 && m.Upgrade == nil {
		return notes, errors.New("bench: every cell chosen restarts or crashes the database, which provider dsn cannot take: nothing to run")
	}
	return notes, nil
}

// fastCrashRecovery sets recovery_init_sync_method=syncfs on a server
// the harness started, when the matrix crashes it: a start after a crash
// then syncs the data directory's file system once instead of fsyncing
// every file in it (2.5 to 5 s a crash on this machine while shared,
// 0.7 to 1 s with syncfs), which would otherwise take most of a window.
// It returns the run's note, or why it was not set.
func fastCrashRecovery(ctx context.Context, m *scenarios.Matrix, pg *dbenv.Postgres, info *dbenv.ServerInfo) string {
	crashes := slices.ContainsFunc(m.Cells, func(c scenarios.Cell) bool { return len(c.CrashDBAt) > 0 })
	if !crashes || pg.Provider() == dbenv.ProviderDSN {
		return ""
	}
	if info.VersionNum < 140000 {
		return "the server is older than PostgreSQL 14: its crash recovery fsyncs every file of the data directory (recovery_init_sync_method has no syncfs), which makes each crash of the crash cell slow"
	}
	conn, err := pgx.Connect(ctx, pg.AdminDSN())
	if err == nil {
		defer conn.Close(context.WithoutCancel(ctx))
		if _, err = conn.Exec(ctx, "ALTER SYSTEM SET recovery_init_sync_method = 'syncfs'"); err == nil {
			_, err = conn.Exec(ctx, "SELECT pg_reload_conf()")
		}
	}
	if err != nil {
		return fmt.Sprintf("recovery_init_sync_method=syncfs could not be set (%v): each crash of the crash cell fsyncs every file of the data directory", err)
	}
	return "the server runs crash recovery with recovery_init_sync_method=syncfs (set by the harness for the crash cell: a start after a crash syncs the file system once instead of fsyncing every file)"
}

// dataDirFS is the file system type of the server's data directory when
// the harness started the server on this machine, else why it is not
// known.
func dataDirFS(ctx context.Context, pg *dbenv.Postgres) string {
	if pg.Provider() != dbenv.ProviderLocal {
		return "unknown (the server's files are not on this machine)"
	}
	conn, err := pgx.Connect(ctx, pg.AdminDSN())
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	defer conn.Close(context.WithoutCancel(ctx))
	dir, err := pgmetrics.DataDirectory(ctx, conn)
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	fs, err := pgmetrics.FileSystemType(dir)
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	return fs
}

// Machine describes the machine for run.json: never a hostname or a
// secret.
func Machine() map[string]string {
	m := map[string]string{"os": runtime.GOOS, "arch": runtime.GOARCH, "cpus": strconv.Itoa(runtime.NumCPU()), "go": runtime.Version()}
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		if line, _, ok := strings.Cut(string(data), "\n"); ok {
			m["memory"] = strings.Join(strings.Fields(line)[1:], " ")
		}
	}
	return m
}

// StartPostgres starts the server of a command and returns it, what it
// runs with, and the function that stops it (a failure to stop is
// logged).
func StartPostgres(ctx context.Context, opts dbenv.PostgresOptions) (*dbenv.Postgres, *dbenv.ServerInfo, func(), error) {
	pg, err := dbenv.StartPostgres(ctx, opts)
	if err != nil {
		return nil, nil, nil, err
	}
	stop := func() {
		sctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := pg.Stop(sctx); err != nil && opts.Logf != nil {
			opts.Logf("warning: stopping PostgreSQL: %v", err)
		}
	}
	info, err := pg.Info(ctx)
	if err != nil {
		stop()
		return nil, nil, nil, err
	}
	return pg, info, stop, nil
}
