package runner

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/berkcansavur/relaybus/bench/scenarios"
	"github.com/berkcansavur/relaybus/internal/dbenv/dbtest"
)

// TestHoldKeepsDeadTuples: each hold really holds the database's xmin
// horizon. With it open, a VACUUM after rows are deleted removes none of
// them (n_dead_tup stays at the deleted rows, the dead tuples vacuum
// found and could not remove), its session shows a backend_xmin, and a
// table sample sees the dead tuples and the old xmin; once released, the
// next VACUUM removes them all.
func TestHoldKeepsDeadTuples(t *testing.T) {
	for _, kind := range []string{scenarios.HoldRepeatableRead, scenarios.HoldLongQuery} {
		t.Run(kind, func(t *testing.T) {
			ctx := context.Background()
			dsn := dbtest.TestDatabase(t)
			conn, err := pgx.Connect(ctx, dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(ctx)
			exec := func(q string) {
				t.Helper()
				if _, err := conn.Exec(ctx, q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			dead := func() int64 {
				t.Helper()
				var n int64
				if err := conn.QueryRow(ctx, "SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'relaybus_hold_test'").Scan(&n); err != nil {
					t.Fatal(err)
				}
				return n
			}
			exec("CREATE TABLE relaybus_hold_test (id int PRIMARY KEY, v text)")
			exec("INSERT INTO relaybus_hold_test SELECT g, repeat('x', 100) FROM generate_series(1, 1000) g")
			exec("VACUUM relaybus_hold_test")

			srv := NewPGServer(nil, false)
			held, err := srv.Hold(ctx, dsn, kind, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			defer held.Release(ctx)
			if _, ok, err := held.Check(ctx); err != nil || !ok {
				t.Fatalf("Check: held %v, %v; want a backend_xmin", ok, err)
			}
			exec("DELETE FROM relaybus_hold_test")
			exec("VACUUM relaybus_hold_test")
			if n := dead(); n != 1000 {
				t.Errorf("n_dead_tup after VACUUM with the %s hold: %d, want 1000 (the hold must keep them)", kind, n)
			}
			p, err := srv.Tables(ctx, dsn)
			if err != nil {
				t.Fatal(err)
			}
			ts, ok := p.Tables["relaybus_hold_test"]
			if !ok || ts.Dead != 1000 || ts.HeapBytes <= 0 || ts.IndexBytes <= 0 || ts.Vacuums < 2 {
				t.Errorf("table sample %+v (found %v), want 1000 dead, heap and index bytes, 2 vacuums", ts, ok)
			}
			// Other transactions advance the counter; the held xmin stays.
			exec("SELECT txid_current()")
			exec("SELECT txid_current()")
			if p, err = srv.Tables(ctx, dsn); err != nil || p.OldestXminAge < 2 {
				t.Errorf("oldest xmin age %d (%v), want at least 2 with the hold open", p.OldestXminAge, err)
			}
			if age, ok, err := held.Check(ctx); err != nil || !ok || age < 2 {
				t.Errorf("Check after 2 transactions: age %d, held %v, %v", age, ok, err)
			}

			if err := held.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if err := held.Release(ctx); err != nil {
				t.Fatalf("second Release: %v", err)
			}
			exec("VACUUM relaybus_hold_test")
			if n := dead(); n != 0 {
				t.Errorf("n_dead_tup after VACUUM once released: %d, want 0", n)
			}
		})
	}
}

// TestHoldUnknownKind: a kind the server does not know is an error.
func TestHoldUnknownKind(t *testing.T) {
	if _, err := NewPGServer(nil, false).Hold(context.Background(), dbtest.TestDatabase(t), "serializable", time.Second); err == nil {
		t.Fatal("unknown kind accepted")
	}
}
