package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// EnableStatisticsCounters makes Statistics read counters instead of
// scanning the deliveries table: a table <prefix>counts of counts per
// handler and status, kept by statement-level triggers on the deliveries
// and history tables, and an index of the pending deliveries by
// (handler, available_at), through which each handler's oldest due one
// is found. With them a Statistics call reads O(handlers) rows and the
// deliveries in flight, whatever the backlog; without them it reads
// every delivery (docs/operations.md, "What Statistics costs", has both
// measured).
//
// They cost every writer: each publish, completion, bury, requeue and
// purge statement runs a trigger that inserts a counter row per handler
// and status it changed (folded into one every 256th), and each delivery
// published adds one more index entry. The counters are a property of the schema, not
// of a store instance: once enabled, every process writing to the
// tables keeps them, whatever its version or options; the roles that
// write deliveries need INSERT and UPDATE on <prefix>counts and USAGE
// on its id sequence. Measure the cost before turning them on in a
// write-heavy deployment (the figures are in docs/operations.md).
//
// It first builds the index concurrently (writers go on; an invalid
// index left by a failed build is dropped and built again), then, in one
// transaction, locks the deliveries and history tables against writers
// (readers go on), installs the table and triggers and counts both
// tables once: writers wait for that count (about as long as one
// scanning Statistics call), for at most 10 s of waiting for the lock
// (lock_timeout), after which it fails and changes nothing. It is
// idempotent: run again, it counts again. The schema must be set up
// (Setup) first. Run it from one process (a migration step or an admin
// command), not from every process at start: two index builds of the
// same name at once can fail, and a concurrent build, like any CREATE
// INDEX CONCURRENTLY, also waits for the transactions that were open when
// it started.
func (s *Store) EnableStatisticsCounters(ctx context.Context) error {
	var exists, valid bool
	if err := s.pool.QueryRow(ctx, s.q.countersDueIndexState).Scan(&exists, &valid); err != nil {
		return errorFrom("enable statistics counters: due index", err)
	}
	if exists && !valid {
		if _, err := s.pool.Exec(ctx, s.q.countersDueIndexDrop); err != nil {
			return errorFrom("enable statistics counters: drop the invalid due index", err)
		}
	}
	if _, err := s.pool.Exec(ctx, s.q.countersDueIndex); err != nil {
		return errorFrom("enable statistics counters: build the due index", err)
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, s.q.setupLock, setupLockKey); err != nil {
			return err
		}
		// A script of several statements: the simple protocol.
		_, err := tx.Exec(ctx, s.q.countersInstall)
		return err
	})
	if err != nil {
		return errorFrom("enable statistics counters", lockTimeout(err))
	}
	return nil
}

// DisableStatisticsCounters removes what EnableStatisticsCounters
// installed: the triggers, the counts table and the due index. Statistics
// then scans again. Idempotent.
func (s *Store) DisableStatisticsCounters(ctx context.Context) error {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, s.q.setupLock, setupLockKey); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, s.q.countersRemove)
		return err
	})
	if err != nil {
		return errorFrom("disable statistics counters", lockTimeout(err))
	}
	if _, err := s.pool.Exec(ctx, s.q.countersDueIndexDrop); err != nil {
		return errorFrom("disable statistics counters: drop the due index", err)
	}
	return nil
}

// StatisticsCountersEnabled reports whether Statistics reads counters:
// the counts table, the due index (valid) and every trigger are there.
func (s *Store) StatisticsCountersEnabled(ctx context.Context) (bool, error) {
	var on bool
	if err := s.pool.QueryRow(ctx, s.q.countersState).Scan(&on); err != nil {
		return false, errorFrom("statistics counters", err)
	}
	return on, nil
}

// lockTimeout names what a lock_timeout (55P03) means here.
func lockTimeout(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "55P03" {
		return fmt.Errorf("the deliveries and history tables stayed locked by writers for 10 s (a long transaction that wrote them?); nothing was changed: %w", err)
	}
	return err
}
