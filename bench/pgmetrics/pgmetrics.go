// Package pgmetrics reads what a window cost a PostgreSQL server: WAL
// bytes, records and full-page images, per-table tuple counters, dead
// tuples and statements, from two snapshots around the window. It also
// holds the harness's other direct queries of the window database
// (CHECKPOINT, VACUUM ANALYZE, pg_stat_statements) and the checks on the
// server itself (fsync).
package pgmetrics

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/berkcansavur/relaybus/bench/peer"
	"github.com/berkcansavur/relaybus/bench/result"
)

// harnessTag marks every query the harness sends, so the statement count
// of a window (pg_stat_statements) leaves the harness's own queries out.
// pg_stat_statements keeps a statement's first text, comments included,
// and the harness's statements are never the workers' statements.
const harnessTag = HarnessTag

// HarnessTag is harnessTag, for the harness's queries sent from other
// packages (the runner's held snapshot).
const HarnessTag = "/* relaybus-bench */"

// TableLabels maps each table role to the table of t that s has, for
// run.json (result.Sample.Tables), so a report can say which table a
// per-table metric of each side came from. t is the side's
// (peer.Descriptor.Tables, chosen by its worker's hello).
func TableLabels(t peer.Tables, s *Snapshot) map[string]string {
	m := map[string]string{}
	for role, name := range map[string]string{result.TableRoleDeliveries: t.Deliveries, result.TableRoleLanes: t.Lanes} {
		if _, ok := s.Tables[name]; ok && name != "" {
			m[role] = name
		}
	}
	return m
}

// TableStats are the cumulative counters of one table.
type TableStats struct {
	Inserted, Updated, HotUpdated, Deleted, Dead int64
}

// Snapshot is the server's cumulative counters at one instant.
//
// # Counter lag
//
// WAL position is exact at the instant it is read. The other counters
// (pg_stat_wal, pg_stat_user_tables, pg_stat_statements calls) are
// cumulative statistics that each backend flushes to shared memory at
// most once per PGSTAT_MIN_INTERVAL (1 s, PostgreSQL 15 and later) when it
// ends a transaction; pg_stat_force_next_flush() flushes only the calling
// backend, so it cannot help. The harness reads both snapshots while the
// workers are still running, so both ends of the difference lag by at
// most about a second and the difference covers a window-length interval
// of steady state; per-delivery ratios divide it by the deliveries of the
// window itself (from the records). Reading "after" only once the workers
// have stopped would instead add their shutdown work to the window.
//
// # Crash recovery
//
// A start through crash recovery (the fault scenario's database crash,
// an immediate shutdown) discards the cumulative statistics: pg_stat_wal
// and pg_stat_user_tables start again from zero, and pg_stat_wal's
// stats_reset becomes the time of the start, so a difference across it
// means nothing (a window with three crashes read -441 WAL records and
// -0.16 deletes per delivery). A clean shutdown (the restart fault, a
// fast shutdown) writes them out and the next start reads them back
// (PostgreSQL 15: pg_stat_wal, pg_stat_user_tables and
// pg_stat_statements all went on across one, stats_reset unchanged).
// pg_stat_statements keeps its own counts, which the postmaster writes
// out when it exits, an immediate shutdown included (on PostgreSQL
// 15.18 they went on across a SIGQUIT to the postmaster; they are lost
// only when the postmaster is killed outright, SIGKILL, and then
// pg_stat_statements_info's stats_reset moves). WAL positions go on
// across a crash: recovery ends at the end of the WAL written before it
// and new WAL follows. WindowMetrics leaves out what a reset between the
// snapshots made meaningless (CountersReset, StatementsReset).
type Snapshot struct {
	// WALPos is pg_current_wal_lsn() as a byte position.
	WALPos      uint64
	WALRecords  int64
	WALFPI      int64
	HasWALStats bool // pg_stat_wal has wal_records (PostgreSQL 14+)
	// StatsReset is pg_stat_wal's stats_reset as text ("" without
	// pg_stat_wal): a start through crash recovery sets it to its own
	// time, with every cumulative statistic back at zero.
	StatsReset string
	// ServerStart is pg_postmaster_start_time() as text, the evidence of
	// a restart where StatsReset is not available.
	ServerStart string
	// StatementsReset is pg_stat_statements_info's stats_reset as text
	// ("" when not read): it moves when pg_stat_statements' counts are
	// lost or reset.
	StatementsReset string
	Tables          map[string]TableStats
	// Statements is the sum of calls of the window database's statements
	// (transaction control and the harness's own queries excluded); -1
	// when pg_stat_statements is not available.
	Statements int64
	// ByStatement holds each statement's counters when they were asked
	// for (bench --profile), by query id.
	ByStatement map[int64]StatementStat
}

// ReadSnapshot reads the counters, of the tables of every kind of side
// (peer.TablePatterns). conn must be connected to the window's
// database (pg_stat_user_tables is per database).
func ReadSnapshot(ctx context.Context, conn *pgx.Conn, statements bool) (*Snapshot, error) {
	s := &Snapshot{Tables: map[string]TableStats{}, Statements: -1}
	var lsn string
	if err := conn.QueryRow(ctx, harnessTag+" SELECT pg_current_wal_lsn()::text, pg_postmaster_start_time()::text").Scan(&lsn, &s.ServerStart); err != nil {
		return nil, fmt.Errorf("pgmetrics: reading the WAL position: %w", err)
	}
	pos, err := ParseLSN(lsn)
	if err != nil {
		return nil, err
	}
	s.WALPos = pos
	err = conn.QueryRow(ctx, harnessTag+" SELECT wal_records, wal_fpi, coalesce(stats_reset::text, '') FROM pg_stat_wal").Scan(&s.WALRecords, &s.WALFPI, &s.StatsReset)
	if err == nil {
		s.HasWALStats = true
	}
	rows, err := conn.Query(ctx, harnessTag+` SELECT relname, n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del, n_dead_tup
		FROM pg_stat_user_tables WHERE relname LIKE ANY($1)`, peer.TablePatterns())
	if err != nil {
		return nil, fmt.Errorf("pgmetrics: reading table statistics: %w", err)
	}
	for rows.Next() {
		var name string
		var t TableStats
		if err := rows.Scan(&name, &t.Inserted, &t.Updated, &t.HotUpdated, &t.Deleted, &t.Dead); err != nil {
			rows.Close()
			return nil, fmt.Errorf("pgmetrics: reading table statistics: %w", err)
		}
		// Several schemas could hold a table of one name; sum them.
		old := s.Tables[name]
		s.Tables[name] = TableStats{old.Inserted + t.Inserted, old.Updated + t.Updated,
			old.HotUpdated + t.HotUpdated, old.Deleted + t.Deleted, old.Dead + t.Dead}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pgmetrics: reading table statistics: %w", err)
	}
	if statements {
		err := conn.QueryRow(ctx, harnessTag+` SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_statements
			WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
			  AND query NOT LIKE '%relaybus-bench%'
			  AND query !~* '^\s*(BEGIN|COMMIT|ROLLBACK|START TRANSACTION|SAVEPOINT|RELEASE|END|SET|SHOW|RESET|DISCARD|DEALLOCATE)\M'`).Scan(&s.Statements)
		if err != nil {
			return nil, fmt.Errorf("pgmetrics: reading pg_stat_statements: %w", err)
		}
		// pg_stat_statements 1.9 and later (PostgreSQL 14+); without the
		// view StatementsReset stays "".
		if err := conn.QueryRow(ctx, harnessTag+" SELECT coalesce(stats_reset::text, '') FROM pg_stat_statements_info").Scan(&s.StatementsReset); err != nil {
			s.StatementsReset = ""
		}
	}
	return s, nil
}

// ResetByCrash are the metrics WindowMetrics reads from cumulative
// statistics that crash recovery discards (pg_stat_wal,
// pg_stat_user_tables): none of them is measured in a window the server
// crashed in. WAL bytes (WAL positions)
// and statements (pg_stat_statements, kept across an immediate shutdown)
// are not among them.
var ResetByCrash = []string{
	result.MetricWALRecordsPerDelivery, result.MetricWALFPIPerDelivery,
	result.MetricHOTPctDeliveries, result.MetricHOTPctLanes,
	result.MetricUpdatesPerDelivery, result.MetricInsertsPerDelivery, result.MetricDeletesPerDelivery,
	result.MetricDeadTuplesAfter, result.MetricDeadTuplesPerDelivery,
}

// CountersReset reports whether the server's cumulative statistics were
// discarded between before and after (a start through crash recovery, or
// pg_stat_reset_shared): pg_stat_wal's stats_reset moved, or, on a
// server without it, the server was started again (a clean restart
// would have kept them, but nothing tells the two apart there).
func CountersReset(before, after *Snapshot) bool {
	if before.StatsReset != "" && after.StatsReset != "" {
		return before.StatsReset != after.StatsReset
	}
	return before.ServerStart != after.ServerStart
}

// StatementsReset reports whether pg_stat_statements' counts were lost
// or reset between before and after (pg_stat_statements_info's
// stats_reset moved, or, without it, the statistics were reset and the
// server restarted, which a lost dump file cannot be told apart from).
func StatementsReset(before, after *Snapshot) bool {
	if before.StatementsReset != "" && after.StatementsReset != "" {
		return before.StatementsReset != after.StatementsReset
	}
	return CountersReset(before, after)
}

// EnsurePgStatStatements creates the extension in the window database so
// its view can be read there. It reports false (not an error) when the
// server does not load the library.
func EnsurePgStatStatements(ctx context.Context, conn *pgx.Conn) (bool, error) {
	var loaded bool
	if err := conn.QueryRow(ctx, harnessTag+` SELECT 'pg_stat_statements' = ANY(string_to_array(replace(current_setting('shared_preload_libraries'), ' ', ''), ','))`).Scan(&loaded); err != nil {
		return false, fmt.Errorf("pgmetrics: %w", err)
	}
	if !loaded {
		return false, nil
	}
	if _, err := conn.Exec(ctx, harnessTag+" CREATE EXTENSION IF NOT EXISTS pg_stat_statements"); err != nil {
		return false, fmt.Errorf("pgmetrics: creating pg_stat_statements: %w", err)
	}
	return true, nil
}

// ParseLSN turns a WAL position as PostgreSQL prints it ("16/B374D848":
// the high and low 32 bits in hex) into a byte position.
func ParseLSN(s string) (uint64, error) {
	hi, lo, ok := strings.Cut(s, "/")
	if !ok || hi == "" || lo == "" || len(hi) > 8 || len(lo) > 8 {
		return 0, fmt.Errorf("pgmetrics: bad WAL position %q", s)
	}
	h, err1 := strconv.ParseUint(hi, 16, 32)
	l, err2 := strconv.ParseUint(lo, 16, 32)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("pgmetrics: bad WAL position %q", s)
	}
	return h<<32 | l, nil
}

// VacuumAnalyze vacuums and analyzes the window database, so both sides
// start their window from the same planner statistics and visibility
// map whatever autovacuum happened to do during the preload (an A/A
// window once ran 9x faster than its peers without it).
func VacuumAnalyze(ctx context.Context, conn *pgx.Conn) error {
	if _, err := conn.Exec(ctx, harnessTag+" VACUUM ANALYZE"); err != nil {
		return fmt.Errorf("pgmetrics: VACUUM ANALYZE: %w", err)
	}
	return nil
}

// Checkpoint forces a checkpoint so every window starts with the same
// full-page-image debt (the first change of each page after a checkpoint
// logs the whole page).
func Checkpoint(ctx context.Context, conn *pgx.Conn) error {
	if _, err := conn.Exec(ctx, harnessTag+" CHECKPOINT"); err != nil {
		return fmt.Errorf("pgmetrics: CHECKPOINT: %w", err)
	}
	return nil
}

// WindowMetrics turns two snapshots into per-unit metrics. units is the
// number of deliveries (or events, for publish-only cells) of the window;
// perEvent selects the publish metric names. The per-table metrics are
// read from tables, the side's (peer.Descriptor.Tables); WAL and
// statements are the database's and compare across sides as they are.
//
// When the cumulative statistics were reset between the snapshots (the
// server crashed: CountersReset), the metrics of ResetByCrash are left
// out, so the report shows them as not measured; WAL bytes, a difference
// of WAL positions, are kept, and so are statements unless
// pg_stat_statements lost its counts too (StatementsReset).
func WindowMetrics(m map[string]float64, before, after *Snapshot, units float64, perEvent bool, tables peer.Tables) {
	if units <= 0 {
		return
	}
	wal := float64(after.WALPos - before.WALPos)
	if perEvent {
		m[result.MetricWALBytesPerEvent] = wal / units
		return
	}
	m[result.MetricWALBytesPerDelivery] = wal / units
	if before.Statements >= 0 && after.Statements >= 0 && !StatementsReset(before, after) {
		m[result.MetricStmtsPerDelivery] = float64(after.Statements-before.Statements) / units
	}
	if CountersReset(before, after) {
		return
	}
	if before.HasWALStats && after.HasWALStats {
		m[result.MetricWALRecordsPerDelivery] = float64(after.WALRecords-before.WALRecords) / units
		m[result.MetricWALFPIPerDelivery] = float64(after.WALFPI-before.WALFPI) / units
	}
	d := diffTable(before, after, tables.Deliveries)
	m[result.MetricInsertsPerDelivery] = float64(d.Inserted) / units
	m[result.MetricUpdatesPerDelivery] = float64(d.Updated) / units
	m[result.MetricDeletesPerDelivery] = float64(d.Deleted) / units
	if pct, ok := hotPct(d); ok {
		m[result.MetricHOTPctDeliveries] = pct
	}
	if tables.Lanes != "" {
		if pct, ok := hotPct(diffTable(before, after, tables.Lanes)); ok {
			m[result.MetricHOTPctLanes] = pct
		}
	}
	if t, ok := after.Tables[tables.Deliveries]; ok {
		// Per delivery of the window, as the seed's tables read it; the
		// absolute count too, since autovacuum may have run mid-window.
		m[result.MetricDeadTuplesPerDelivery] = float64(t.Dead) / units
		m[result.MetricDeadTuplesAfter] = float64(t.Dead)
	}
}

func diffTable(before, after *Snapshot, name string) TableStats {
	a, b := after.Tables[name], before.Tables[name]
	return TableStats{a.Inserted - b.Inserted, a.Updated - b.Updated, a.HotUpdated - b.HotUpdated, a.Deleted - b.Deleted, a.Dead}
}

// hotPct is HOT updates as a percentage of updates; with no updates it is
// undefined (absent), never 0, so "no updates" does not read as "no HOT".
func hotPct(t TableStats) (float64, bool) {
	if t.Updated <= 0 {
		return math.NaN(), false
	}
	return 100 * float64(t.HotUpdated) / float64(t.Updated), true
}

// CheckFsync refuses a server with fsync off unless allowed: its numbers
// would not be comparable with any real deployment.
func CheckFsync(settings map[string]string, allow bool) error {
	v, ok := settings["fsync"]
	if !ok {
		return errors.New("pgmetrics: the server did not report its fsync setting")
	}
	if strings.EqualFold(v, "off") && !allow {
		return errors.New("pgmetrics: the PostgreSQL server runs with fsync=off; benchmark numbers would not mean anything (pass --allow-fsync-off to run anyway)")
	}
	return nil
}

// StatementStat is one statement's cumulative pg_stat_statements counters
// (the query text is the normalized one, with $n for constants).
type StatementStat struct {
	Query   string
	Calls   int64
	TotalMs float64
}

// ReadStatements reads every statement of conn's database but the
// harness's own and transaction control, by query id.
func ReadStatements(ctx context.Context, conn *pgx.Conn) (map[int64]StatementStat, error) {
	rows, err := conn.Query(ctx, harnessTag+` SELECT queryid, query, sum(calls)::bigint, sum(total_exec_time)::float8
		FROM pg_stat_statements
		WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) AND queryid IS NOT NULL
		  AND query NOT LIKE '%relaybus-bench%'
		  AND query !~* '^\s*(BEGIN|COMMIT|ROLLBACK|START TRANSACTION|SAVEPOINT|RELEASE|END|SET|SHOW|RESET|DISCARD|DEALLOCATE)\M'
		GROUP BY queryid, query`)
	if err != nil {
		return nil, fmt.Errorf("pgmetrics: reading pg_stat_statements: %w", err)
	}
	defer rows.Close()
	out := map[int64]StatementStat{}
	for rows.Next() {
		var id int64
		var s StatementStat
		if err := rows.Scan(&id, &s.Query, &s.Calls, &s.TotalMs); err != nil {
			return nil, fmt.Errorf("pgmetrics: reading pg_stat_statements: %w", err)
		}
		old := out[id]
		out[id] = StatementStat{Query: s.Query, Calls: old.Calls + s.Calls, TotalMs: old.TotalMs + s.TotalMs}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pgmetrics: reading pg_stat_statements: %w", err)
	}
	return out, nil
}

// maxStatementText bounds a statement's text in the results.
const maxStatementText = 110

// TopStatements is the window's statements (after minus before) by total
// time, at most n of them, with their text on one line and shortened,
// and the total time of every statement of the window.
func TopStatements(before, after map[int64]StatementStat, n int) (top []result.Statement, totalMs float64) {
	for id, a := range after {
		b := before[id]
		calls, ms := a.Calls-b.Calls, a.TotalMs-b.TotalMs
		if calls <= 0 {
			continue
		}
		totalMs += ms
		top = append(top, result.Statement{Query: ShortQuery(a.Query), Calls: calls, TotalMs: ms})
	}
	sort.Slice(top, func(i, j int) bool {
		if top[i].TotalMs != top[j].TotalMs {
			return top[i].TotalMs > top[j].TotalMs
		}
		return top[i].Query < top[j].Query
	})
	if len(top) > n {
		top = top[:n]
	}
	return top, totalMs
}

// ShortQuery puts a query on one line, its runs of white space made one
// space, cut at maxStatementText characters.
func ShortQuery(q string) string {
	q = strings.Join(strings.Fields(q), " ")
	if r := []rune(q); len(r) > maxStatementText {
		q = string(r[:maxStatementText-3]) + "..."
	}
	return q
}
