package pgmetrics

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/berkcansavur/relaybus/bench/peer"
	"github.com/berkcansavur/relaybus/bench/result"
)

// ReadTableSizes reads the size on disk (heap, indexes, TOAST), the live
// and dead tuples and the vacuum count of every table of every kind of
// side (peer.TablePatterns) in conn's database, and the age of the oldest
// backend_xmin among that database's sessions: what a held snapshot and
// a long run do to a queue's tables (the bloat cells' samples). Sizes are
// exact when read; tuple counts are cumulative statistics (see Snapshot's
// counter lag). at is left 0: the caller stamps it.
func ReadTableSizes(ctx context.Context, conn *pgx.Conn) (result.TablePoint, error) {
	p := result.TablePoint{Tables: map[string]result.TableSize{}}
	rows, err := conn.Query(ctx, harnessTag+` SELECT c.relname, pg_relation_size(c.oid), pg_indexes_size(c.oid),
		coalesce(pg_total_relation_size(nullif(c.reltoastrelid, 0)), 0),
		s.n_live_tup, s.n_dead_tup, s.vacuum_count + s.autovacuum_count
		FROM pg_class c JOIN pg_stat_user_tables s ON s.relid = c.oid
		WHERE c.relname LIKE ANY($1)`, peer.TablePatterns())
	if err != nil {
		return p, fmt.Errorf("pgmetrics: reading table sizes: %w", err)
	}
	for rows.Next() {
		var name string
		var t result.TableSize
		if err := rows.Scan(&name, &t.HeapBytes, &t.IndexBytes, &t.ToastBytes, &t.Live, &t.Dead, &t.Vacuums); err != nil {
			rows.Close()
			return p, fmt.Errorf("pgmetrics: reading table sizes: %w", err)
		}
		// Several schemas could hold a table of one name; sum them.
		o := p.Tables[name]
		p.Tables[name] = result.TableSize{HeapBytes: o.HeapBytes + t.HeapBytes, IndexBytes: o.IndexBytes + t.IndexBytes,
			ToastBytes: o.ToastBytes + t.ToastBytes, Live: o.Live + t.Live, Dead: o.Dead + t.Dead, Vacuums: o.Vacuums + t.Vacuums}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return p, fmt.Errorf("pgmetrics: reading table sizes: %w", err)
	}
	if err := conn.QueryRow(ctx, harnessTag+` SELECT coalesce(max(age(backend_xmin)), 0)::bigint FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid()`).Scan(&p.OldestXminAge); err != nil {
		return p, fmt.Errorf("pgmetrics: reading the oldest xmin: %w", err)
	}
	return p, nil
}

// BackendXminAge is the age of session pid's backend_xmin (in
// transactions), and whether it has one: a session with one holds the
// xmin horizon of its database where that xmin is.
func BackendXminAge(ctx context.Context, conn *pgx.Conn, pid uint32) (int64, bool, error) {
	var age *int64
	err := conn.QueryRow(ctx, harnessTag+` SELECT age(backend_xmin)::bigint FROM pg_stat_activity WHERE pid = $1`, int64(pid)).Scan(&age)
	if err == pgx.ErrNoRows {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("pgmetrics: reading backend_xmin: %w", err)
	}
	if age == nil {
		return 0, false, nil
	}
	return *age, true, nil
}
