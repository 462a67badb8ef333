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
	sql        []string // the statements' texts, in the order sent
}

func (w *wire) reset() (roundTrips, statements int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	roundTrips, statements = w.roundTrips, w.statements
	w.roundTrips, w.statements, w.batches, w.sql = 0, 0, 0, nil
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
func (w *wire) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	w.mu.Lock()
	w.statements++
	w.sql = append(w.sql, d.SQL)
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
func (w *wire) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	w.mu.Lock()
	w.statements++
	w.sql = append(w.sql, d.SQL)
	w.mu.Unlock()
}
func (w *wire) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// sent returns how many statements of text sql were sent since the last
// reset.
func (w *wire) sent(sql string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, s := range w.sql {
		if s == sql {
			n++
		}
	}
	return n
}

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

// TestPublishRoundTrips pins what a publish costs on the wire, for
// EventPublish (its own transaction) and EventPublishTx. A call with a
// keyed event is one round trip whatever its size: three statements in
// its own transaction (the planner settings, then the two of the
// publish), and in the caller's one more that puts the planner settings
// back. A call with no keyed event whose events are all new is one
// round trip of one statement less: the first alone. One with no keyed
// event of which an event existed takes two round trips: in its own
// transaction the first alone fails and the call is sent again whole; in
// the caller's, the second statement follows in a round trip of its own.
// Any call that adds deliveries may add one statement (in its first
// batch) that announces it to wake-up listeners, at most once per
// wake-up interval.
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
	// A publish that adds deliveries may leave a notification to be sent
	// outside it, on the pool, up to wakeLateDelay (100 ms) later: wait
	// that out before a call is counted, or its round trips count too.
	quiet := func() { time.Sleep(150 * time.Millisecond) }
	// stale is how many times the last call counted sent publishStale.
	var stale int
	own := func(eps []*driver.EventPublish) (rt, st int) {
		quiet()
		w.reset()
		_, err := s.EventPublish(ctx, &driver.EventPublishParams{Events: eps, Now: t0})
		require.NoError(t, err)
		stale = w.sent(s.PublishStaleSQL())
		return w.reset()
	}
	inTx := func(eps []*driver.EventPublish) (rt, st int) {
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }() // a failed check leaves no connection held
		quiet()
		w.reset()
		_, err = s.EventPublishTx(ctx, tx, &driver.EventPublishParams{Events: eps, Now: t0})
		require.NoError(t, err)
		stale = w.sent(s.PublishStaleSQL())
		rt, st = w.reset()
		require.NoError(t, tx.Commit(ctx))
		return rt, st
	}
	// The first use of each statement on a connection prepares it: one
	// more round trip, once. A statement that failed is prepared again
	// at its next use (pgx forgets it): the first statement alone of the
	// republished unkeyed call in its own transaction, so the fresh call
	// after that one warms it up again.
	// A call of one event sends publishInsertOne where one of more
	// sends publishInsert: both are warmed up.
	for _, n := range []int{1, 2} {
		own(events(n, false))
		own(events(n, true))
		inTx(events(n, true))
		inTx(events(n, false))
	}
	for _, eps := range [][]*driver.EventPublish{events(0, false, "e1"), events(1, false, "e1")} {
		own(eps)
		s.SetPublishBothLeft(0)
		own(events(1, false))
		own(events(2, false))
		inTx(eps)
		s.SetPublishBothLeft(0)
		inTx(events(1, false))
		inTx(events(2, false))
	}

	// cost is a call's round trips, its statements (at least, at most),
	// whether it sent publishStale, and when not 0 the round trips it may
	// take at most (rt is then the least).
	type cost struct {
		rt, minSt, maxSt int
		stale            bool
		maxRt            int
	}
	cases := []struct {
		name    string
		eps     func() []*driver.EventPublish
		own, tx cost
	}{
		{"one unkeyed event", func() []*driver.EventPublish { return events(1, false) }, cost{1, 2, 3, false, 0}, cost{1, 3, 4, false, 0}},
		{"1000 unkeyed events", func() []*driver.EventPublish { return events(1000, false) }, cost{1, 2, 3, false, 0}, cost{1, 3, 4, false, 0}},
		{"one keyed event", func() []*driver.EventPublish { return events(1, true) }, cost{1, 3, 4, false, 0}, cost{1, 4, 5, false, 0}},
		{"1000 keyed events", func() []*driver.EventPublish { return events(1000, true) }, cost{1, 3, 4, false, 0}, cost{1, 4, 5, false, 0}},
		{"republished and new, keyed", func() []*driver.EventPublish { return events(3, true, "e1", "e2", "e5") }, cost{1, 3, 4, false, 0}, cost{1, 4, 5, false, 0}},
		// In its own transaction: the batch of the first alone fails (its
		// statements after the failure are not run, and pgx may not report
		// them), pgx deallocates the batch's statements, prepares them
		// again, and sends both.
		{"republished and new, unkeyed", func() []*driver.EventPublish { return events(3, false, "e1", "e2", "e5") }, cost{4, 4, 8, true, 0}, cost{2, 6, 7, true, 0}},
		{"one unkeyed event, republished", func() []*driver.EventPublish { return events(0, false, "e2") }, cost{4, 4, 8, true, 0}, cost{2, 6, 7, true, 0}},
	}
	check := func(what string, c cost, rt, st int) {
		t.Helper()
		t.Logf("%s: %d round trips, %d statements, publishStale %d", what, rt, st, stale)
		if c.maxRt == 0 {
			require.Equal(t, c.rt, rt, "%s: round trips", what)
		} else {
			require.GreaterOrEqual(t, rt, c.rt, "%s: round trips", what)
			require.LessOrEqual(t, rt, c.maxRt, "%s: round trips", what)
		}
		require.GreaterOrEqual(t, st, c.minSt, "%s: statements", what)
		require.LessOrEqual(t, st, c.maxSt, "%s: statements", what)
		require.Equal(t, c.stale, stale == 1, "%s: publishStale sent %d times", what, stale)
	}
	for _, c := range cases {
		s.SetPublishBothLeft(0)
		rt, st := own(c.eps())
		check("EventPublish, "+c.name, c.own, rt, st)
		if c.own.stale {
			// After a call that found an event existed, the next calls
			// with no keyed event send both statements in one batch.
			require.Positive(t, s.PublishBothLeft(), "after %s", c.name)
			rt, st = own(events(1, false))
			// One more round trip when it tries to announce itself: the
			// failed batch's wake-up statement is prepared again.
			check("EventPublish, a new unkeyed event after it", cost{1, 3, 4, true, 2}, rt, st)
		}
		s.SetPublishBothLeft(0)
		rt, st = inTx(c.eps())
		check("EventPublishTx, "+c.name, c.tx, rt, st)
		if c.tx.stale {
			require.Positive(t, s.PublishBothLeft(), "after %s", c.name)
			rt, st = inTx(events(1, false))
			check("EventPublishTx, a new unkeyed event after it", cost{1, 4, 5, true, 0}, rt, st)
		}
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

// TestPublishSameNewIDConcurrently pins the race a publish's second
// statement is for: a call of a new unkeyed event whose insert waits for
// another transaction that publishes the same id, and which then
// commits. The waiting insert skips the event, and the call must still
// give it the delivery of the handler the other call did not have: in
// the store's own transaction (its first statement alone fails, and the
// call is sent again whole) and in the caller's (the second statement,
// in a round trip of its own). The second call publishes the event
// alone (publishInsertOne) or with a new one (publishInsert).
func TestPublishSameNewIDConcurrently(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		own  bool
		with bool // the second call also publishes a new event, y
	}{{true, false}, {false, false}, {true, true}, {false, true}} {
		own := c.own
		t.Run(fmt.Sprintf("own=%v/with-a-new-event=%v", c.own, c.with), func(t *testing.T) {
			t.Parallel()
			s, pool, _ := wiredStoreConns(t, 3)
			ctx := t.Context()
			params := func(second bool, handlers ...string) *driver.EventPublishParams {
				ep := &driver.EventPublish{Event: &relaytype.Event{ID: "x", Type: "t", Payload: []byte("p")}}
				for _, h := range handlers {
					ep.Deliveries = append(ep.Deliveries, driver.DeliverySpec{Handler: h, MaxAttempts: 3})
				}
				eps := []*driver.EventPublish{ep}
				if second && c.with {
					eps = append(eps, &driver.EventPublish{Event: &relaytype.Event{ID: "y", Type: "t", Payload: []byte("p")},
						Deliveries: []driver.DeliverySpec{{Handler: "a", MaxAttempts: 3}}})
				}
				return &driver.EventPublishParams{Events: eps, Now: t0}
			}
			first, err := pool.Begin(ctx)
			require.NoError(t, err)
			defer func() { _ = first.Rollback(ctx) }()
			res, err := s.EventPublishTx(ctx, first, params(false, "a"))
			require.NoError(t, err)
			require.Equal(t, []bool{true}, res.Inserted)

			type outcome struct {
				res *driver.EventPublishResult
				err error
			}
			done := make(chan outcome, 1)
			go func() {
				if own {
					res, err := s.EventPublish(ctx, params(true, "a", "b"))
					done <- outcome{res, err}
					return
				}
				var res *driver.EventPublishResult
				err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					var err error
					res, err = s.EventPublishTx(ctx, tx, params(true, "a", "b"))
					return err
				})
				done <- outcome{res, err}
			}()
			// The second call's insert waits for the first's row.
			require.Eventually(t, func() bool {
				var waiting int
				err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE NOT granted`).Scan(&waiting)
				return err == nil && waiting > 0
			}, 10*time.Second, 5*time.Millisecond, "the second publish never waited for the first")
			require.NoError(t, first.Commit(ctx))

			got := <-done
			require.NoError(t, got.err)
			wantInserted, wantDeliveries := []bool{false}, 1
			if c.with {
				wantInserted, wantDeliveries = []bool{false, true}, 2
			}
			require.Equal(t, wantInserted, got.res.Inserted, "the event existed when the second call's insert went on")
			require.Equal(t, wantDeliveries, got.res.Deliveries, "the second call adds the delivery of b alone to x")
			var handlers []string
			require.NoError(t, pool.QueryRow(ctx, `SELECT array_agg(handler ORDER BY handler) FROM relaybus_deliveries WHERE event_id = 'x'`).Scan(&handlers))
			require.Equal(t, []string{"a", "b"}, handlers)
			require.NoError(t, pool.QueryRow(ctx, `SELECT handlers FROM relaybus_events WHERE id = 'x'`).Scan(&handlers))
			require.ElementsMatch(t, []string{"a", "b"}, handlers)
		})
	}
}
