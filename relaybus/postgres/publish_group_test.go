package postgres_test

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/berkcansavur/relaybus/internal/dbenv/dbtest"
	"github.com/berkcansavur/relaybus/relaybus"
	"github.com/berkcansavur/relaybus/relaybus/postgres"
)

// groupBus is a Bus on s that declares handlers h1 and h2 for type t.
func groupBus(t *testing.T, s *postgres.Store, wait time.Duration) *relaybus.Bus[pgx.Tx] {
	t.Helper()
	b, err := relaybus.New(relaybus.Store[pgx.Tx](s), relaybus.Config{PublishGroupWait: wait})
	require.NoError(t, err)
	for _, h := range []string{"h1", "h2"} {
		require.NoError(t, b.Declare("t", h, nil))
	}
	return b
}

// sequenceOf reads the stored sequence of an event.
func sequenceOf(t *testing.T, pool *pgxpool.Pool, id string) int64 {
	t.Helper()
	var seq int64
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT sequence FROM relaybus_events WHERE id = $1`, id).Scan(&seq))
	return seq
}

// heldWrites is how many writes Publish has in flight at once
// (publishWritersMax in relaybus/publish_group.go): holdWrites holds that
// many so that the calls after them gather in a group.
const heldWrites = 2

// holdWrites takes, in a transaction it returns uncommitted, the key
// counters of keys k and held1 (at 100 and 0), then starts Publish calls
// of one event each, "first" of key k and "first1" of key held1, one after
// the other, each waiting for its key's counter before the next starts.
// The calls made after it gather in the next group until the transaction
// ends; the function it returns waits for the held calls and returns
// their errors joined (nil when all succeeded).
func holdWrites(t *testing.T, b *relaybus.Bus[pgx.Tx], pool *pgxpool.Pool) (pgx.Tx, func() error) {
	t.Helper()
	ctx := t.Context()
	lock, err := pool.Begin(ctx)
	require.NoError(t, err)
	_, err = lock.Exec(ctx, `INSERT INTO relaybus_keys (key, last_sequence) VALUES ('k', 100), ('held1', 0)`)
	require.NoError(t, err)
	outs := make([]chan error, heldWrites)
	for i := range heldWrites {
		id, key := "first", "k"
		if i > 0 {
			id, key = fmt.Sprint("first", i), fmt.Sprint("held", i)
		}
		outs[i] = make(chan error, 1)
		go func() { outs[i] <- b.Publish(ctx, &relaybus.Event{ID: id, Type: "t", Key: key}) }()
		waitFor(t, fmt.Sprintf("%d publishes waiting for their keys", i+1), func() bool {
			var waiting int
			require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting))
			return waiting == i+1
		})
	}
	return lock, func() error {
		var errs []error
		for _, out := range outs {
			errs = append(errs, <-out)
		}
		return errors.Join(errs...)
	}
}

// TestPublishGroupConcurrent publishes from many goroutines through one
// Bus: every call returns nil, every event is stored with a delivery per
// handler, each key's sequences are 1..n without gap or repeat, the
// events of one call in call order, and the calls were written in fewer
// transactions than calls.
func TestPublishGroupConcurrent(t *testing.T) {
	t.Parallel()
	s, pool, w := wiredStoreConns(t, 8)
	b := groupBus(t, s, 0)
	const goroutines, callsEach, keys = 32, 10, 3
	var wg sync.WaitGroup
	w.reset()
	for g := range goroutines {
		wg.Go(func() {
			for c := range callsEach {
				k := fmt.Sprint("k", (g+c)%keys)
				evs := []*relaybus.Event{
					{ID: fmt.Sprintf("g%d-c%d-0", g, c), Type: "t", Key: k},
					{ID: fmt.Sprintf("g%d-c%d-1", g, c), Type: "t", Key: k},
					{ID: fmt.Sprintf("g%d-c%d-2", g, c), Type: "t"},
				}
				if err := b.Publish(t.Context(), evs...); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	_, statements := w.reset()
	calls := goroutines * callsEach
	t.Logf("%d calls, %d statements (2 or 3 per transaction)", calls, statements)
	require.Less(t, statements, 2*calls, "no call was grouped with another")

	var deliveries int
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM relaybus_deliveries`).Scan(&deliveries))
	require.Equal(t, calls*3*2, deliveries)
	seqs := map[string][]int64{}
	for g := range goroutines {
		for c := range callsEach {
			s0 := sequenceOf(t, pool, fmt.Sprintf("g%d-c%d-0", g, c))
			s1 := sequenceOf(t, pool, fmt.Sprintf("g%d-c%d-1", g, c))
			require.Equal(t, s0+1, s1, "one call's events of a key in call order")
			k := fmt.Sprint("k", (g+c)%keys)
			seqs[k] = append(seqs[k], s0, s1)
		}
	}
	for k, s := range seqs {
		slices.Sort(s)
		for i, v := range s {
			require.Equal(t, int64(i+1), v, "key %s: sequences 1..n without gap or repeat", k)
		}
	}
}

// TestPublishGroupSameKeyInCallOrder: calls that gather while another
// publish of their key waits for the key's counter get that key's
// sequences in the order they came, in one transaction.
func TestPublishGroupSameKeyInCallOrder(t *testing.T) {
	t.Parallel()
	s, pool, w := wiredStoreConns(t, 4)
	b := groupBus(t, s, relaybus.MaxPublishGroupWait)
	ctx := t.Context()
	// Another transaction holds the keys' counters: the first Publish
	// calls wait for it, and the calls after them gather in the next group.
	lock, first := holdWrites(t, b, pool)
	w.reset()
	var outs []chan error
	for i := range 4 {
		out := make(chan error, 1)
		outs = append(outs, out)
		go func() { out <- b.Publish(ctx, &relaybus.Event{ID: fmt.Sprint("c", i), Type: "t", Key: "k"}) }()
		time.Sleep(50 * time.Millisecond) // the calls join in this order
	}
	require.NoError(t, lock.Commit(ctx))
	require.NoError(t, first())
	for _, out := range outs {
		require.NoError(t, <-out)
	}
	batches := w.batchCount()
	require.Equal(t, 1, batches, "the four calls are one transaction")
	require.Equal(t, int64(101), sequenceOf(t, pool, "first"))
	for i := range 4 {
		require.Equal(t, int64(102+i), sequenceOf(t, pool, fmt.Sprint("c", i)), "call %d", i)
	}
}

// TestPublishGroupRefusedEventFailsOnlyItsCall runs on a LATIN1 database,
// which cannot store every character a valid event holds: the group that
// holds one is refused, its calls are written again alone, and only the
// call with the character fails.
func TestPublishGroupRefusedEventFailsOnlyItsCall(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dsn := dbtest.TestDatabase(t)
	admin, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	name := fmt.Sprintf("relaybus_latin1_%d", time.Now().UnixNano())
	_, err = admin.Exec(ctx, fmt.Sprintf(`CREATE DATABASE %s ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0`, name))
	require.NoError(t, err)
	cfg, err := pgxpool.ParseConfig(dsn)
	require.NoError(t, err)
	cfg.ConnConfig.Database = name
	// The client speaks UTF-8 (left to itself the session would take
	// the database's encoding, and store the bytes unconverted).
	cfg.ConnConfig.RuntimeParams["client_encoding"] = "UTF8"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		pool.Close()
		_, _ = admin.Exec(t.Context(), `DROP DATABASE IF EXISTS `+name)
		_ = admin.Close(t.Context())
	})
	s, err := postgres.New(pool, nil)
	require.NoError(t, err)
	require.NoError(t, s.Setup(ctx))
	b := groupBus(t, s, relaybus.MaxPublishGroupWait)

	lock, first := holdWrites(t, b, pool)
	calls := [][]*relaybus.Event{
		{{ID: "good1", Type: "t", Key: "k"}},
		{{ID: "bad", Type: "t", Key: "k"}, {ID: "bad-sibling", Type: "t", Payload: []byte("x"), Headers: map[string]string{"currency": "€"}}},
		{{ID: "good2", Type: "t", Key: "k"}},
	}
	outs := make([]chan error, len(calls))
	for i, evs := range calls {
		outs[i] = make(chan error, 1)
		go func() { outs[i] <- b.Publish(ctx, evs...) }()
		time.Sleep(50 * time.Millisecond)
	}
	require.NoError(t, lock.Commit(ctx))
	require.NoError(t, first())
	require.NoError(t, <-outs[0])
	err = <-outs[1]
	require.ErrorIs(t, err, relaybus.ErrInvalid, "LATIN1 has no euro sign")
	require.NoError(t, <-outs[2])
	var ids []string
	rows, err := pool.Query(ctx, `SELECT id FROM relaybus_events ORDER BY sequence, id`)
	require.NoError(t, err)
	ids, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"first1", "first", "good1", "good2"}, ids, "the refused call wrote nothing, and took no sequence")
	require.Equal(t, int64(103), sequenceOf(t, pool, "good2"))
}

// waitFor polls cond until it holds, failing the test after 10s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
