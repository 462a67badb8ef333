package runner

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/berkcansavur/relaybus/bench/pgmetrics"
	"github.com/berkcansavur/relaybus/internal/dbenv"
)

// Server is what the measurement step needs from the database server:
// a fresh database per window, the faults of a restart and a crash, and the counters
// around the window. The PostgreSQL server of a run is one (NewPGServer);
// the runner's tests use a fake.
type Server interface {
	// CreateDatabase creates an empty database and returns its DSN.
	CreateDatabase(ctx context.Context, name string) (string, error)
	// CloneDatabase creates a database as a copy of template, a database
	// no session is connected to, and returns its DSN.
	CloneDatabase(ctx context.Context, name, template string) (string, error)
	DropDatabase(ctx context.Context, name string) error
	// Restart stops the server and starts it again with the same data.
	Restart(ctx context.Context) error
	// Crash stops the server at once, as a crash would (no checkpoint,
	// WAL not yet flushed is lost), and starts it again through crash
	// recovery; it returns once the server accepts connections again.
	Crash(ctx context.Context) error
	// Prepare readies a new window database before its setup role runs.
	Prepare(ctx context.Context, dsn string) error
	// Settle runs after the setup and preload roles, before the window's
	// workers start: VACUUM ANALYZE, then a CHECKPOINT that flushes the
	// preload, so the one before the window is short.
	Settle(ctx context.Context, dsn string) error
	// Snapshot reads the counters of a window database; checkpoint asks
	// for a CHECKPOINT first, so every window starts with the same
	// full-page-image debt.
	Snapshot(ctx context.Context, dsn string, checkpoint bool) (*pgmetrics.Snapshot, error)
	// Probe reads what an in-place upgrade changes (scenario 6), once no
	// other session is connected to the database.
	Probe(ctx context.Context, dsn string) (*pgmetrics.Probe, error)
}

// PGServer is a PostgreSQL server (dbenv) as the windows' Server.
type PGServer struct {
	pg *dbenv.Postgres
	// statements: pg_stat_statements is loaded, so windows count
	// statements.
	statements bool
	// StatementDetail: snapshots also read each statement's counters
	// (bench --profile), when pg_stat_statements is loaded.
	StatementDetail bool
}

// NewPGServer wraps pg; statements says whether the server loads
// pg_stat_statements (dbenv.ServerInfo.PgStatStatementsLoaded).
func NewPGServer(pg *dbenv.Postgres, statements bool) *PGServer {
	return &PGServer{pg: pg, statements: statements}
}

// CreateDatabase implements Server.
func (s *PGServer) CreateDatabase(ctx context.Context, name string) (string, error) {
	return s.pg.CreateDatabase(ctx, name)
}

// CloneDatabase implements Server.
func (s *PGServer) CloneDatabase(ctx context.Context, name, template string) (string, error) {
	return s.pg.CloneDatabase(ctx, name, template)
}

// DropDatabase implements Server.
func (s *PGServer) DropDatabase(ctx context.Context, name string) error {
	return s.pg.DropDatabase(ctx, name)
}

// Restart implements Server.
func (s *PGServer) Restart(ctx context.Context) error { return s.pg.Restart(ctx) }

// Crash implements Server (dbenv.Postgres.Crash: an immediate shutdown).
func (s *PGServer) Crash(ctx context.Context) error { return s.pg.Crash(ctx) }

// Prepare creates pg_stat_statements in the window database, so its view
// can be read there.
func (s *PGServer) Prepare(ctx context.Context, dsn string) error {
	if !s.statements {
		return nil
	}
	return withConn(ctx, dsn, func(conn *pgx.Conn) error {
		_, err := pgmetrics.EnsurePgStatStatements(ctx, conn)
		return err
	})
}

// Settle vacuums and analyzes the window database and checkpoints: the
// preload's dirty pages are written here, while the previous window
// drains, instead of by the checkpoint that starts the measured window.
func (s *PGServer) Settle(ctx context.Context, dsn string) error {
	return withConn(ctx, dsn, func(conn *pgx.Conn) error {
		if err := pgmetrics.VacuumAnalyze(ctx, conn); err != nil {
			return err
		}
		return pgmetrics.Checkpoint(ctx, conn)
	})
}

// Snapshot implements Server.
func (s *PGServer) Snapshot(ctx context.Context, dsn string, checkpoint bool) (*pgmetrics.Snapshot, error) {
	var snap *pgmetrics.Snapshot
	err := withConn(ctx, dsn, func(conn *pgx.Conn) error {
		if checkpoint {
			if err := pgmetrics.Checkpoint(ctx, conn); err != nil {
				return err
			}
		}
		var err error
		if snap, err = pgmetrics.ReadSnapshot(ctx, conn, s.statements); err != nil {
			return err
		}
		if s.statements && s.StatementDetail {
			snap.ByStatement, err = pgmetrics.ReadStatements(ctx, conn)
		}
		return err
	})
	return snap, err
}

// probeTimeout bounds the wait for the workers' sessions to end.
const probeTimeout = time.Minute

// Probe implements Server.
func (s *PGServer) Probe(ctx context.Context, dsn string) (*pgmetrics.Probe, error) {
	var p *pgmetrics.Probe
	err := withConn(ctx, dsn, func(conn *pgx.Conn) error {
		var err error
		p, err = pgmetrics.ReadProbe(ctx, conn, probeTimeout)
		return err
	})
	return p, err
}

func withConn(ctx context.Context, dsn string, fn func(*pgx.Conn) error) error {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return fmt.Errorf("runner: %w", err)
	}
	cfg.RuntimeParams["application_name"] = "relaybus-bench"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("runner: connecting to the window database: %w", err)
	}
	defer conn.Close(context.Background())
	return fn(conn)
}
