package pgmetrics

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// sessionsPoll is how often WaitSessionsGone looks.
const sessionsPoll = 5 * time.Millisecond

// WaitSessionsGone waits until no other session is connected to conn's
// database. A backend flushes its table statistics (pg_stat_user_tables)
// when it exits, before it leaves pg_stat_activity, so counters read
// afterwards hold all the work of the workers that were connected.
func WaitSessionsGone(ctx context.Context, conn *pgx.Conn, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var n int
		if err := conn.QueryRow(ctx, harnessTag+` SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid()`).Scan(&n); err != nil {
			return fmt.Errorf("pgmetrics: %w", err)
		}
		if n == 0 {
			// The next read of the statistics takes a new snapshot.
			if _, err := conn.Exec(ctx, harnessTag+" SELECT pg_stat_clear_snapshot()"); err != nil {
				return fmt.Errorf("pgmetrics: %w", err)
			}
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pgmetrics: %d sessions still connected after %s", n, timeout)
		}
		t := time.NewTimer(sessionsPoll)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// FileNodes maps each relaybus table of conn's database to its
// relfilenode: a table rewritten whole (ALTER TABLE ... that rewrites,
// VACUUM FULL, CLUSTER) gets a new one.
func FileNodes(ctx context.Context, conn *pgx.Conn) (map[string]uint32, error) {
	rows, err := conn.Query(ctx, harnessTag+` SELECT relname::text, relfilenode::bigint FROM pg_class
		WHERE relkind = 'r' AND relname LIKE 'relaybus\_%' AND pg_table_is_visible(oid)`)
	if err != nil {
		return nil, fmt.Errorf("pgmetrics: %w", err)
	}
	defer rows.Close()
	out := map[string]uint32{}
	for rows.Next() {
		var name string
		var node int64
		if err := rows.Scan(&name, &node); err != nil {
			return nil, fmt.Errorf("pgmetrics: %w", err)
		}
		out[name] = uint32(node)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pgmetrics: %w", err)
	}
	return out, nil
}

// Probe is what an in-place upgrade changes on the server: the WAL
// position, every relaybus table's counters and its file node.
type Probe struct {
	WALPos    uint64
	Tables    map[string]TableStats
	FileNodes map[string]uint32
}

// ReadProbe waits until no other session is connected to conn's
// database (so the workers' counters are flushed), then reads a Probe.
func ReadProbe(ctx context.Context, conn *pgx.Conn, timeout time.Duration) (*Probe, error) {
	if err := WaitSessionsGone(ctx, conn, timeout); err != nil {
		return nil, err
	}
	snap, err := ReadSnapshot(ctx, conn, false)
	if err != nil {
		return nil, err
	}
	nodes, err := FileNodes(ctx, conn)
	if err != nil {
		return nil, err
	}
	return &Probe{WALPos: snap.WALPos, Tables: snap.Tables, FileNodes: nodes}, nil
}
