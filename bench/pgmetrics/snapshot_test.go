package pgmetrics

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/berkcansavur/relaybus/internal/dbenv/dbtest"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// TestReadSnapshotTables: ReadSnapshot reads relaybus's and River's
// tables and no other, with their tuple counters.
func TestReadSnapshotTables(t *testing.T) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbtest.TestDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, q := range []string{
		"CREATE TABLE relaybus_deliveries (id int PRIMARY KEY, v int)",
		"CREATE TABLE river_job (id int PRIMARY KEY, v int)",
		"CREATE TABLE riverside (id int PRIMARY KEY)", // no underscore: not River's
		"CREATE TABLE other (id int PRIMARY KEY)",
		"INSERT INTO river_job SELECT g, 0 FROM generate_series(1, 5) g",
		"UPDATE river_job SET v = 1 WHERE id <= 2",
		"INSERT INTO other VALUES (1)",
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	// A backend flushes its statistics when it goes idle after this call
	// (PostgreSQL 15 and later), so the next query sees them.
	if _, err := conn.Exec(ctx, "SELECT pg_stat_force_next_flush()"); err != nil {
		t.Fatal(err)
	}
	s, err := ReadSnapshot(ctx, conn, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Tables) != 2 {
		t.Errorf("tables %v, want relaybus_deliveries and river_job only", s.Tables)
	}
	if got := s.Tables["river_job"]; got.Inserted != 5 || got.Updated != 2 {
		t.Errorf("river_job %+v, want 5 inserted, 2 updated", got)
	}
	if _, ok := s.Tables["relaybus_deliveries"]; !ok {
		t.Error("relaybus_deliveries not read")
	}
}

// TestReadSnapshotResets: a snapshot carries the evidence of a
// statistics reset, pg_stat_wal's stats_reset and the postmaster's start
// time, and two snapshots of one running server show none.
func TestReadSnapshotResets(t *testing.T) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbtest.TestDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	a, err := ReadSnapshot(ctx, conn, false)
	if err != nil {
		t.Fatal(err)
	}
	b, err := ReadSnapshot(ctx, conn, false)
	if err != nil {
		t.Fatal(err)
	}
	if a.ServerStart == "" || (a.HasWALStats && a.StatsReset == "") {
		t.Errorf("snapshot without its reset evidence: server start %q, stats_reset %q", a.ServerStart, a.StatsReset)
	}
	if CountersReset(a, b) || StatementsReset(a, b) {
		t.Errorf("two snapshots of a running server read as a reset: %+v, %+v", a, b)
	}
}
