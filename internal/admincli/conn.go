package admincli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/berkcansavur/relaybus/relaybus"
	"github.com/berkcansavur/relaybus/relaybus/postgres"
)

// Limits of a database command.
const (
	// DefaultTimeout bounds each database call of a command (--timeout).
	DefaultTimeout = time.Minute
	// MaxTimeout bounds --timeout: a call that takes longer is a hung
	// connection, not an admin query.
	MaxTimeout = time.Hour
	// poolConnsMax bounds the command's pool: it makes one call at a
	// time.
	poolConnsMax = 2
)

// connFlags are the flags of every database command.
type connFlags struct {
	dsn, schema, prefix string
	json                bool
	timeout             time.Duration
}

func (f *connFlags) bind(fs *flag.FlagSet) {
	fs.StringVar(&f.dsn, "dsn", "", "the PostgreSQL DSN (postgres://user:pass@host:5432/db or key=value); empty: $"+EnvDSN)
	fs.StringVar(&f.schema, "schema", postgres.DefaultSchema, "the PostgreSQL schema of the relaybus tables (the store's Options.Schema)")
	fs.StringVar(&f.prefix, "table-prefix", postgres.DefaultTablePrefix, "the prefix of the relaybus tables (the store's Options.TablePrefix)")
	fs.BoolVar(&f.json, "json", false, "write machine-readable JSON on stdout")
	fs.DurationVar(&f.timeout, "timeout", DefaultTimeout, "bound on each database call")
}

// session is an open store and the Bus its admin calls go through.
type session struct {
	pool    *pgxpool.Pool
	store   *postgres.Store
	bus     *relaybus.Bus[pgx.Tx]
	timeout time.Duration
	// now is the time of the command: every call's Now (requeue's due
	// time, purge's cutoffs), so what a confirmation names is what is
	// done.
	now time.Time
}

// open connects to the store the flags name. The pool is closed by
// close.
func (c *call) open(ctx context.Context) (*session, error) {
	f := &c.conn
	if f.timeout <= 0 || f.timeout > MaxTimeout {
		return nil, usagef("relaybus %s: --timeout %v out of range (0, %v]", c.name, f.timeout, MaxTimeout)
	}
	dsn := f.dsn
	if dsn == "" {
		dsn = c.env.getenv(EnvDSN)
	}
	if dsn == "" {
		return nil, usagef("relaybus %s: no database: give --dsn or set %s", c.name, EnvDSN)
	}
	if strings.HasPrefix(dsn, "mongodb://") || strings.HasPrefix(dsn, "mongodb+srv://") {
		return nil, usagef("relaybus %s: a MongoDB DSN: this command administers PostgreSQL stores only for now (the MongoDB store is not wired into it)", c.name)
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		// pgx's message hides the password.
		return nil, usagef("relaybus %s: bad DSN: %v", c.name, err)
	}
	cfg.MaxConns = poolConnsMax
	cfg.MinConns = 0
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, usagef("relaybus %s: bad DSN: %v", c.name, err)
	}
	s, err := newSession(pool, f)
	if err != nil {
		pool.Close()
		return nil, usagef("relaybus %s: %v", c.name, err)
	}
	pctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("relaybus %s: cannot connect to %s: %w", c.name, redactedHost(cfg), err)
	}
	return s, nil
}

// newSession is the store and the bus on pool, with the schema and
// prefix of f. It does not touch the database.
func newSession(pool *pgxpool.Pool, f *connFlags) (*session, error) {
	store, err := postgres.New(pool, &postgres.Options{Schema: f.schema, TablePrefix: f.prefix})
	if err != nil {
		return nil, err
	}
	now := time.Now()
	bus, err := relaybus.New[pgx.Tx](store, relaybus.Config{Now: func() time.Time { return now }})
	if err != nil {
		return nil, err
	}
	return &session{pool: pool, store: store, bus: bus, timeout: f.timeout, now: now}, nil
}

func (s *session) close() { s.pool.Close() }

// withCall opens the store, runs fn with a context that bounds its one
// database call by --timeout, and closes the store: the frame of every
// command that makes one call.
func (c *call) withCall(ctx context.Context, fn func(ctx context.Context, s *session) error) error {
	s, err := c.open(ctx)
	if err != nil {
		return err
	}
	defer s.close()
	cctx, cancel := s.callCtx(ctx)
	defer cancel()
	return fn(cctx, s)
}

// callCtx bounds one database call by --timeout.
func (s *session) callCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.timeout)
}

// storeError is the error of a failed store call: it says what was
// asked, and, when the tables are missing, where they come from.
func (c *call) storeError(what string, err error) error {
	if errors.Is(err, postgres.ErrNotSetUp) {
		return fmt.Errorf("relaybus %s: %s: %w\n(no relaybus tables of this version in schema %q with prefix %q: check --schema and --table-prefix, or install or upgrade them: relaybus schema prints the SQL, Bus.Setup runs it)",
			c.name, what, err, c.conn.schema, c.conn.prefix)
	}
	return fmt.Errorf("relaybus %s: %s: %w", c.name, what, err)
}

// redactedHost names the server of cfg without its credentials.
func redactedHost(cfg *pgxpool.Config) string {
	cc := cfg.ConnConfig
	return fmt.Sprintf("%s:%d/%s", cc.Host, cc.Port, cc.Database)
}
