package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// statisticsMinRows is how many deliveries the table must hold before the
// store analyzes it itself (see ensureStatistics). Below it a claim is
// cheap whatever its plan, as the plan made without statistics costs one
// ordering check per keyed row; and a sample of this many rows describes
// the workload better than its first few rows would.
const statisticsMinRows = 1000

// statisticsLockKey is the transaction-level advisory lock under which one
// process at a time analyzes ("rlybus02" in ASCII): several dispatchers
// that start together on a full table would otherwise each run ANALYZE,
// one after the other.
const statisticsLockKey int64 = 0x726c796275733032

// ensureStatistics makes sure the planner has statistics for the
// deliveries table before a claim relies on them, by running ANALYZE once
// when the table holds statisticsMinRows rows and has none.
//
// Without statistics PostgreSQL takes its default selectivities (0.5% for
// status = 'pending', and for each handler), estimates that about one
// keyed delivery is due, and plans the keyed selection as a scan of every
// unfinished keyed row through the ordering index, the ordering check run
// for each, then a sort: the whole backlog at every claim, instead of a
// walk of the due index that stops at the limit. (BenchmarkKeyedClaimFreshTable
// measures both.) Rewriting the statement does not remove the risk: as
// long as the planner believes the set tiny, sorting it looks cheapest,
// and an index on status or handler offers it a cheap-looking way to
// read it; a LIMIT it cannot see, a recursive walk of the keys, or
// planner settings for the claim each lost elsewhere (in plan or speed).
// Autovacuum analyzes a table only at its next round (autovacuum_naptime,
// a minute by default), and an ANALYZE at Setup sees an empty table,
// which leaves the planner with the defaults again.
//
// It costs one query per claim until the table is big enough, then one
// ANALYZE (a sample of at most 300 x default_statistics_target rows) per
// database, and nothing after that. Its errors are not the claim's: a
// failed check is tried again at the next claim, and an ANALYZE that the
// role may not run (PostgreSQL warns and skips it) is not repeated;
// autovacuum analyzes the table in time.
func (s *Store) ensureStatistics(ctx context.Context) {
	if s.statisticsReady.Load() {
		return
	}
	var analyzed bool
	var rows int
	err := s.pool.QueryRow(ctx, s.q.statisticsCheck, s.schema, s.prefix+"deliveries", statisticsMinRows).Scan(&analyzed, &rows)
	if err != nil || (!analyzed && rows < statisticsMinRows) {
		return
	}
	if !analyzed {
		err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", statisticsLockKey); err != nil {
				return err
			}
			// Another process may have analyzed while we waited.
			if err := tx.QueryRow(ctx, s.q.statisticsCheck, s.schema, s.prefix+"deliveries", 0).Scan(&analyzed, &rows); err != nil {
				return err
			}
			if analyzed {
				return nil
			}
			_, err := tx.Exec(ctx, s.q.analyze)
			return err
		})
		if err != nil {
			return
		}
	}
	s.statisticsReady.Store(true)
}
