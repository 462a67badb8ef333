package postgres_test

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/berkcansavur/relaybus/internal/dbenv/dbtest"
	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/postgres"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

// wire counts the round trips and the statements of the connections of
// one pool: a round trip is a write to the server followed by a read of
// its answer (however many packets either takes), a statement is a query
// pgx sends, alone or in a batch.
type wire struct {
	mu         sync.Mutex
	roundTrips int
	statements int
	batches    int
}

func (w *wire) reset() (roundTrips, statements int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	roundTrips, statements = w.roundTrips, w.statements
	w.roundTrips, w.statements, w.batches = 0, 0, 0
	return roundTrips, statements
}

// wireConn is a connection whose reads after a write count a round trip.
type wireConn struct {
	net.Conn
	w     *wire
	mu    sync.Mutex
	wrote bool
}

func (c *wireConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	c.wrote = true
	c.mu.Unlock()
	return c.Conn.Write(b)
}

func (c *wireConn) Read(b []byte) (int, error) {
	c.mu.Lock()
	if c.wrote {
		c.wrote = false
		c.w.mu.Lock()
		c.w.roundTrips++
		c.w.mu.Unlock()
	}
	c.mu.Unlock()
	return c.Conn.Read(b)
}

// The tracer counts statements.
func (w *wire) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	w.mu.Lock()
	w.statements++
	w.mu.Unlock()
	return ctx
}
func (w *wire) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (w *wire) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	w.mu.Lock()
	w.batches++
	w.mu.Unlock()
	return ctx
}

// batchCount returns the batches sent since the last reset.
func (w *wire) batchCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.batches
}
func (w *wire) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {
	w.mu.Lock()
	w.statements++
	w.mu.Unlock()
}
func (w *wire) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// wiredStore is a set-up store on a fresh database whose pool (one
// connection, never pinged) counts its round trips and statements.
func wiredStore(t *testing.T) (*postgres.Store, *pgxpool.Pool, *wire) {
	t.Helper()
	return wiredStoreConns(t, 1)
}

// wiredStoreConns is wiredStore with a pool of conns connections.
func wiredStoreConns(t *testing.T, conns int32) (*postgres.Store, *pgxpool.Pool, *wire) {
	t.Helper()
	w := &wire{}
	cfg, err := pgxpool.ParseConfig(dbtest.TestDatabase(t))
	require.NoError(t, err)
	cfg.MaxConns = conns
	cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
	cfg.ConnConfig.Tracer = w
	dial := cfg.ConnConfig.DialFunc
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &wireConn{Conn: c, w: w}, nil
	}
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s, err := postgres.New(pool, nil)
	require.NoError(t, err)
	require.NoError(t, s.Setup(t.Context()))
	return s, pool, w
}

// TestPublishRoundTrips pins what a publish costs on the wire: one round
// trip for PublishTx's statements and one for a whole EventPublish (its
// own transaction), whatever the events: new or republished, keyed or
// not, one or a thousand. Three statements per call (the planner
// settings, then the two of the publish), one more when the call tries to
// announce itself to wake-up listeners (at most once per wake-up
// interval), and in the caller's transaction one more that puts its
// planner settings back.
func TestPublishRoundTrips(t *testing.T) {
	t.Parallel()
	s, pool, w := wiredStore(t)
	ctx := t.Context()
	var seq int
	events := func(n int, keyed bool, ids ...string) []*driver.EventPublish {
		eps := make([]*driver.EventPublish, 0, n+len(ids))
		for range n {
			seq++
			ids = append(ids, fmt.Sprint("e", seq))
		}
		for i, id := range ids {
			e := &relaytype.Event{ID: id, Type: "t", Payload: []byte("p")}
			if keyed {
				e.Key = fmt.Sprint("k", i%7)
			}
			eps = append(eps, &driver.EventPublish{Event: e, Deliveries: []driver.DeliverySpec{{Handler: "a", MaxAttempts: 3}, {Handler: "b", MaxAttempts: 3}}})
		}
		return eps
	}
	own := func(eps []*driver.EventPublish) {
		_, err := s.EventPublish(ctx, &driver.EventPublishParams{Events: eps, Now: t0})
		require.NoError(t, err)
	}
	// A publish that adds deliveries may leave a notification to be sent
	// outside it, on the pool, up to wakeLateDelay (100 ms) later: wait
	// that out before a call is counted, or its round trips count too.
	quiet := func() { time.Sleep(150 * time.Millisecond) }
	check := true
	inTx := func(eps []*driver.EventPublish) {
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }() // a failed check leaves no connection held
		quiet()
		w.reset()
		_, err = s.EventPublishTx(ctx, tx, &driver.EventPublishParams{Events: eps, Now: t0})
		require.NoError(t, err)
		rt, st := w.reset()
		if check {
			require.Equal(t, 1, rt, "PublishTx of %d events: round trips", len(eps))
			require.LessOrEqual(t, st, 5, "PublishTx: statements")
			require.GreaterOrEqual(t, st, 4, "PublishTx: statements")
		}
		require.NoError(t, tx.Commit(ctx))
	}
	// The first use of each statement on a connection prepares it: one
	// more round trip, once.
	own(events(1, false))
	own(events(1, true))
	check = false
	inTx(events(1, true))
	check = true

	cases := []struct {
		name string
		eps  func() []*driver.EventPublish
	}{
		{"one unkeyed event", func() []*driver.EventPublish { return events(1, false) }},
		{"one keyed event", func() []*driver.EventPublish { return events(1, true) }},
		{"1000 keyed events", func() []*driver.EventPublish { return events(1000, true) }},
		{"republished and new", func() []*driver.EventPublish { return events(3, true, "e1", "e2", "e5") }},
	}
	for _, c := range cases {
		quiet()
		w.reset()
		own(c.eps())
		rt, st := w.reset()
		require.Equal(t, 1, rt, "EventPublish, %s: round trips", c.name)
		require.LessOrEqual(t, st, 4, "EventPublish, %s: statements", c.name)
		require.GreaterOrEqual(t, st, 3, "EventPublish, %s: statements", c.name)
		t.Logf("EventPublish, %s: %d round trip, %d statements", c.name, rt, st)
		inTx(c.eps())
	}
}

// TestPublishOwnTransactionRollsBackWhole pins EventPublish's implicit
// transaction: when its second statement fails, what the first wrote is
// rolled back with it, and the connection goes back to the pool idle.
func TestPublishOwnTransactionRollsBackWhole(t *testing.T) {
	t.Parallel()
	s, pool, _ := wiredStore(t)
	ctx := t.Context()
	// A key counter at the top of bigint: numbering the key's next event
	// overflows in the second statement, after the first inserted it.
	_, err := pool.Exec(ctx, `INSERT INTO relaybus_keys (key, last_sequence) VALUES ('full', 9223372036854775807)`)
	require.NoError(t, err)
	eps := []*driver.EventPublish{
		{Event: &relaytype.Event{ID: "unkeyed", Type: "t"}, Deliveries: []driver.DeliverySpec{{Handler: "a", MaxAttempts: 3}}},
		{Event: &relaytype.Event{ID: "keyed", Type: "t", Key: "full"}, Deliveries: []driver.DeliverySpec{{Handler: "a", MaxAttempts: 3}}},
	}
	_, err = s.EventPublish(ctx, &driver.EventPublishParams{Events: eps, Now: t0})
	require.Error(t, err)
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM relaybus_events) + (SELECT count(*) FROM relaybus_deliveries)`).Scan(&n))
	require.Zero(t, n, "a failed EventPublish left rows")
	// The pool's only connection went back to it idle, outside any
	// transaction.
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	require.Equal(t, byte('I'), conn.Conn().PgConn().TxStatus(), "the connection is left in a transaction")
	conn.Release()
	res, err := s.EventPublish(ctx, &driver.EventPublishParams{Events: eps[:1], Now: t0})
	require.NoError(t, err)
	require.Equal(t, []bool{true}, res.Inserted)
}

// TestPublishLaneOfAStoredKey pins the lane publishNumber computes in SQL
// for a republished event whose stored key differs from the one given:
// driver.LaneOf of the stored key (or of the id when it is unkeyed).
func TestPublishLaneOfAStoredKey(t *testing.T) {
	t.Parallel()
	s, pool, _ := wiredStore(t)
	ctx := t.Context()
	keys := []string{"", "a", "customer-7", "ключ", "🔑 key with spaces", "k\u00e9y"}
	for i, stored := range keys {
		id := fmt.Sprint("ev-", i, "-ü")
		first := &driver.EventPublish{Event: &relaytype.Event{ID: id, Type: "t", Key: stored}, Deliveries: []driver.DeliverySpec{{Handler: "a", MaxAttempts: 3}}}
		_, err := s.EventPublish(ctx, &driver.EventPublishParams{Events: []*driver.EventPublish{first}, Now: t0})
		require.NoError(t, err)
		given := "other-key"
		if stored == "other-key" {
			given = ""
		}
		again := &driver.EventPublish{Event: &relaytype.Event{ID: id, Type: "t", Key: given}, Deliveries: []driver.DeliverySpec{{Handler: "a", MaxAttempts: 3}, {Handler: "b", MaxAttempts: 3}}}
		res, err := s.EventPublish(ctx, &driver.EventPublishParams{Events: []*driver.EventPublish{again}, Now: t0})
		require.NoError(t, err)
		require.Equal(t, 1, res.Deliveries)
		ds, err := s.DeliveryList(ctx, &driver.DeliveryListParams{EventID: id, Handler: "b"})
		require.NoError(t, err)
		require.Len(t, ds.Deliveries, 1)
		d := ds.Deliveries[0]
		require.Equal(t, stored, d.Key, "the stored key wins")
		var lane int
		require.NoError(t, pool.QueryRow(ctx, `SELECT lane FROM relaybus_deliveries WHERE id = $1::bigint`, d.ID).Scan(&lane))
		require.Equal(t, driver.LaneOf(stored, id), lane, "lane of stored key %q", stored)
	}
}
