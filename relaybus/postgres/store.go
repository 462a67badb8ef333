package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

// ErrUnknownSchema is wrapped by the error of a Setup that found relaybus
// tables it cannot place: a schema version newer than SchemaVersion,
// tables that are neither 0.1.0 nor 0.2.0, or a table with a relaybus
// name that relaybus did not make (its columns are not the ones that
// version has; the error names the table). Setup writes nothing then.
var ErrUnknownSchema = errors.New("relaybus/postgres: unknown schema version")

// Defaults of Options.
const (
	// DefaultSchema is Options.Schema when empty.
	DefaultSchema = "public"
	// DefaultTablePrefix is Options.TablePrefix when empty.
	DefaultTablePrefix = "relaybus_"
)

// Limits on Options.
const (
	// MaxSchemaBytes bounds Options.Schema: PostgreSQL truncates longer
	// identifiers (NAMEDATALEN - 1).
	MaxSchemaBytes = 63
	// MaxTablePrefixBytes bounds Options.TablePrefix so that the longest
	// name derived from it ("<prefix>deliveries_event_handler_unique",
	// 31 bytes after the prefix) still fits in 63 bytes. A longer prefix
	// would be truncated by PostgreSQL and two index names could collide.
	MaxTablePrefixBytes = MaxSchemaBytes - len("deliveries_event_handler_unique")
)

// Options configure a Store. The zero value is valid.
type Options struct {
	// Schema is the PostgreSQL schema of the tables; "" means
	// DefaultSchema. It must match ^[a-z_][a-z0-9_]*$ and be at most
	// MaxSchemaBytes long.
	Schema string
	// TablePrefix starts every table and index name; "" means
	// DefaultTablePrefix. Same pattern as Schema, at most
	// MaxTablePrefixBytes long.
	TablePrefix string
	// MaxPayloadBytes bounds event payloads; 0 means
	// driver.DefaultMaxPayloadBytes, at most driver.MaxPayloadBytesLimit.
	MaxPayloadBytes int
	// CompletionHistory keeps a row per completed delivery in the history
	// table (<prefix>history), listed and counted as completed until Purge
	// deletes it. It costs one insert (three index entries) per
	// completion, so it is off by default: a completed delivery is then
	// simply deleted. Stores with and without it can share a schema; the
	// table exists either way.
	CompletionHistory bool
	// DisableWakeups stops the store announcing work: a publish then runs
	// no wake-up statement and sends no NOTIFY, WakeSend sends nothing,
	// and WakeListen returns an error wrapping driver.ErrWakeDisabled at
	// once, on which a Bus stops listening, says so once at Info and
	// polls (Config.PollInterval). For publishers whose dispatchers poll
	// anyway (Config.DisableWakeups), or where a NOTIFY cannot reach a
	// listener (PgBouncer in transaction pooling): a notifying commit
	// holds a database-wide lock from its commit until its WAL flush ends
	// (docs/wakeups.md), which a store that announces nothing never
	// takes. Set it in every process of a deployment, or in none: a store
	// with it never announces to the others' listeners.
	DisableWakeups bool
}

// identifierPattern is what Schema and TablePrefix may hold. Lower case
// letters, digits and underscores only: they are put into SQL text (always
// double quoted), so the pattern is what keeps that text safe.
var identifierPattern = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)

func validateIdentifier(what, s string, maxBytes int) error {
	if len(s) > maxBytes {
		return fmt.Errorf("relaybus/postgres: %s %q is %d bytes, over the limit of %d: %w", what, s, len(s), maxBytes, relaytype.ErrInvalid)
	}
	if !identifierPattern.MatchString(s) {
		return fmt.Errorf("relaybus/postgres: %s %q must match %s: %w", what, s, identifierPattern, relaytype.ErrInvalid)
	}
	return nil
}

// Store is the 0.2.0 PostgreSQL store: lane leases, delete on complete.
// See the package documentation for the schema, the protocol and what it
// costs.
type Store struct {
	pool            *pgxpool.Pool
	schema          string
	prefix          string
	maxPayloadBytes int
	history         bool
	noWakeups       bool // Options.DisableWakeups
	schemaSQL       string
	q               queries
	// holder names this store instance in the lanes it holds: a lane is
	// held by (owner, holder), so a process restarted with the same owner
	// name does not adopt the lanes of its dead predecessor (it takes them
	// over when their lease expires, charging what they had in flight).
	holder string
	// takeCursor is the lane at which a claim's next take starts its walk
	// of the ring of lanes (see claimTake); random at New, so that the
	// claimers of several processes start in different places.
	takeCursor atomic.Int32
	// publishBothLeft is how many more calls with no keyed event send
	// both publish statements in one batch, as a call with a keyed
	// event does, instead of the first alone: set when such a call found
	// that an event of it existed (publish.go's run).
	publishBothLeft atomic.Int32
	// wake is the wake-up statements and the coalescing of the
	// announcements of publishes (listen.go).
	wake wakeState
	// ledger is what the instance knows of the lanes it holds (ledger.go).
	ledger ledger
	// held are the lanes it may hold, per owner (held.go).
	held heldLanes
}

// holderBytes is the entropy of a store instance's holder name.
const holderBytes = 12

var _ driver.Store[pgx.Tx] = (*Store)(nil)

// New returns a store on pool. It does not touch the database: call Setup
// (or run SchemaSQL yourself) before using it.
func New(pool *pgxpool.Pool, opts *Options) (*Store, error) {
	if pool == nil {
		return nil, fmt.Errorf("relaybus/postgres: pool is nil: %w", relaytype.ErrInvalid)
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Schema == "" {
		o.Schema = DefaultSchema
	}
	if o.TablePrefix == "" {
		o.TablePrefix = DefaultTablePrefix
	}
	if err := validateIdentifier("schema", o.Schema, MaxSchemaBytes); err != nil {
		return nil, err
	}
	if err := validateIdentifier("table prefix", o.TablePrefix, MaxTablePrefixBytes); err != nil {
		return nil, err
	}
	switch {
	case o.MaxPayloadBytes == 0:
		o.MaxPayloadBytes = driver.DefaultMaxPayloadBytes
	case o.MaxPayloadBytes < 0 || o.MaxPayloadBytes > driver.MaxPayloadBytesLimit:
		return nil, fmt.Errorf("relaybus/postgres: max payload bytes %d out of range [1, %d]: %w", o.MaxPayloadBytes, driver.MaxPayloadBytesLimit, relaytype.ErrInvalid)
	}
	schemaSQL, err := renderSchema(o.Schema, o.TablePrefix)
	if err != nil {
		return nil, err
	}
	q, err := buildQueries(o.Schema, o.TablePrefix)
	if err != nil {
		return nil, err
	}
	var h [holderBytes]byte
	if _, err := rand.Read(h[:]); err != nil {
		return nil, fmt.Errorf("relaybus/postgres: holder name: %w", err)
	}
	st := &Store{
		pool:            pool,
		schema:          o.Schema,
		prefix:          o.TablePrefix,
		maxPayloadBytes: o.MaxPayloadBytes,
		history:         o.CompletionHistory,
		noWakeups:       o.DisableWakeups,
		schemaSQL:       schemaSQL,
		q:               q,
		holder:          hex.EncodeToString(h[:]),
	}
	// The holder's first byte is random: the first lane of the walk.
	st.takeCursor.Store(int32(h[0]))
	return st, nil
}

// SchemaSQL returns the statements Setup runs, with the schema and table
// prefix applied, as one script. Apply it in one transaction to install
// the schema with a migration tool of your own.
func (s *Store) SchemaSQL() string { return s.schemaSQL }

// setupLockKey is the transaction-level advisory lock Setup holds ("rlybus01"
// in ASCII). Concurrent CREATE ... IF NOT EXISTS statements can fail on
// catalog unique indexes; the lock makes concurrent Setups run one after
// the other. Advisory locks are per database.
const setupLockKey int64 = 0x726c796275733031

// Setup installs the 0.2.0 schema, or upgrades a 0.1.0 one in place, in
// one transaction under an advisory lock (the statements of SchemaSQL). It
// is idempotent and safe to run from several processes at once. It
// refuses, and changes nothing, when the schema holds relaybus tables of
// a version it does not know (a newer one) or of no version it can tell,
// or a table with a relaybus name that relaybus did not make: the error
// wraps ErrUnknownSchema and names the table.
//
// Upgrading from 0.1.0 needs every 0.1.0 worker stopped first, and
// rewrites every delivery row once; see the package documentation.
func (s *Store) Setup(ctx context.Context) error {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, s.q.setupLock, setupLockKey); err != nil {
			return err
		}
		// Exec without arguments uses the simple protocol, which runs a
		// script of several statements.
		_, err := tx.Exec(ctx, s.schemaSQL)
		return err
	})
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "55000" && strings.HasPrefix(pgErr.Message, "relaybus: ") {
		// The schema's own guard (object_not_in_prerequisite_state).
		return fmt.Errorf("relaybus/postgres: setup: %w: %s", ErrUnknownSchema, pgErr.Message)
	}
	if err != nil {
		return errorFrom("setup", err)
	}
	return nil
}

// TxBegin starts a transaction on the store's pool.
func (s *Store) TxBegin(ctx context.Context) (pgx.Tx, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, errorFrom("begin", err)
	}
	return tx, nil
}

// TxCommit commits tx.
func (s *Store) TxCommit(ctx context.Context, tx pgx.Tx) error {
	if tx == nil {
		return fmt.Errorf("relaybus/postgres: commit: tx is nil: %w", relaytype.ErrInvalid)
	}
	if err := tx.Commit(ctx); err != nil {
		return errorFrom("commit", err)
	}
	return nil
}

// TxRollback rolls tx back.
func (s *Store) TxRollback(ctx context.Context, tx pgx.Tx) error {
	if tx == nil {
		return fmt.Errorf("relaybus/postgres: rollback: tx is nil: %w", relaytype.ErrInvalid)
	}
	if err := tx.Rollback(ctx); err != nil {
		return errorFrom("rollback", err)
	}
	return nil
}

// errorFrom maps a driver error onto the relaybus sentinels, so callers
// can use errors.Is whatever the store, and prefixes it with the
// operation. The driver error stays in the chain.
func errorFrom(op string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("relaybus/postgres: %s: %w: %w", op, relaytype.ErrNotFound, err)
	}
	if errors.Is(err, pgx.ErrTxClosed) {
		return fmt.Errorf("relaybus/postgres: %s: transaction already ended: %w: %w", op, relaytype.ErrInvalid, err)
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "22P05", // untranslatable_character
			"22021", // character_not_in_repertoire
			"22001", // string_data_right_truncation
			"22003", // numeric_value_out_of_range
			"54000": // program_limit_exceeded (for example an oversized index row)
			return fmt.Errorf("relaybus/postgres: %s: %w: %w", op, relaytype.ErrInvalid, err)
		}
		if notSetUp(pgErr.Code) {
			return fmt.Errorf("relaybus/postgres: %s: %w: %w", op, ErrNotSetUp, err)
		}
	}
	return fmt.Errorf("relaybus/postgres: %s: %w", op, err)
}
