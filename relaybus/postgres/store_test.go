package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
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

var t0 = time.Date(2031, time.January, 1, 12, 0, 0, 0, time.UTC)

func TestNewValidatesOptions(t *testing.T) {
	t.Parallel()
	// New does not touch the database, so a pool that never connects is
	// enough.
	cfg, err := pgxpool.ParseConfig("postgres://127.0.0.1:1/none")
	require.NoError(t, err)
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	for _, tc := range []struct {
		name string
		opts postgres.Options
	}{
		{"schema with SQL", postgres.Options{Schema: "x; drop table"}},
		{"schema with a quote", postgres.Options{Schema: `x"y`}},
		{"upper case schema", postgres.Options{Schema: "Relaybus"}},
		{"schema starting with a digit", postgres.Options{Schema: "1x"}},
		{"schema too long", postgres.Options{Schema: strings.Repeat("s", postgres.MaxSchemaBytes+1)}},
		{"prefix with SQL", postgres.Options{TablePrefix: "p; drop"}},
		{"prefix too long", postgres.Options{TablePrefix: strings.Repeat("p", postgres.MaxTablePrefixBytes+1)}},
		{"negative payload limit", postgres.Options{MaxPayloadBytes: -1}},
		{"payload limit over the bound", postgres.Options{MaxPayloadBytes: driver.MaxPayloadBytesLimit + 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := postgres.New(pool, &tc.opts)
			require.ErrorIs(t, err, relaytype.ErrInvalid)
			require.Nil(t, s)
			require.True(t, strings.HasPrefix(err.Error(), "relaybus/postgres: "), err.Error())
		})
	}

	_, err = postgres.New(nil, nil)
	require.ErrorIs(t, err, relaytype.ErrInvalid)

	// The longest allowed names are accepted and end up in the SQL.
	long := strings.Repeat("p", postgres.MaxTablePrefixBytes)
	s, err := postgres.New(pool, &postgres.Options{Schema: strings.Repeat("s", postgres.MaxSchemaBytes), TablePrefix: long})
	require.NoError(t, err)
	require.Contains(t, s.SchemaSQL(), `"`+long+`deliveries_event_handler_unique"`)

	s, err = postgres.New(pool, nil)
	require.NoError(t, err)
	require.Contains(t, s.SchemaSQL(), `"public"."relaybus_deliveries"`)
	require.NotContains(t, s.SchemaSQL(), "{{", "template left unrendered")
}

func TestSetupIsIdempotentAndConcurrent(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	const setups = 6
	errs := make(chan error, setups)
	for range setups {
		go func() {
			s, err := postgres.New(pool, &postgres.Options{Schema: "concurrent"})
			if err == nil {
				err = s.Setup(t.Context())
			}
			errs <- err
		}()
	}
	for range setups {
		require.NoError(t, <-errs)
	}
	s, err := postgres.New(pool, &postgres.Options{Schema: "concurrent"})
	require.NoError(t, err)
	before := catalog(t, pool, "concurrent")
	require.NoError(t, s.Setup(t.Context()), "a second Setup")
	require.Equal(t, before, catalog(t, pool, "concurrent"))
}

// TestSchemaSQLIsWhatSetupRuns installs the schema once with Setup and
// once by running SchemaSQL by hand, and compares the catalogs.
func TestSchemaSQLIsWhatSetupRuns(t *testing.T) {
	t.Parallel()
	_, setupPool := setup(t, nil)

	byHand := newPool(t)
	s, err := postgres.New(byHand, nil)
	require.NoError(t, err)
	_, err = byHand.Exec(t.Context(), s.SchemaSQL())
	require.NoError(t, err)

	want := catalog(t, setupPool, "public")
	require.Len(t, want, 50+11+13+2, "50 columns, 11 constraints, 13 indexes, 2 tables with storage parameters")
	require.Equal(t, want, catalog(t, byHand, "public"))
}

// catalog describes the tables, columns, constraints and indexes of a
// schema as sorted text, for comparing two installations.
func catalog(t *testing.T, pool *pgxpool.Pool, schema string) []string {
	t.Helper()
	rows, err := pool.Query(t.Context(), `
SELECT 'column ' || table_name || '.' || column_name || ' ' || data_type || ' ' || is_nullable || ' ' || coalesce(column_default, '')
FROM information_schema.columns WHERE table_schema = $1
UNION ALL
SELECT 'constraint ' || conrelid::regclass::text || ' ' || conname || ' ' || pg_get_constraintdef(oid)
FROM pg_constraint WHERE connamespace = $1::regnamespace
UNION ALL
SELECT 'index ' || indexdef FROM pg_indexes WHERE schemaname = $1
UNION ALL
SELECT 'options ' || relname || ' ' || array_to_string(reloptions, ',')
FROM pg_class WHERE relnamespace = $1::regnamespace AND reloptions IS NOT NULL
ORDER BY 1`, schema)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return out
}

// TestIndexSet pins the 0.2.0 index set of the deliveries table and the
// cost of one delivery on the happy path: the claim and the completion
// write no delivery row (one insert, one delete), and every write of a
// lane row is a HOT update.
func TestIndexSet(t *testing.T) {
	t.Parallel()
	_, pool := setup(t, nil)
	rows, err := pool.Query(t.Context(),
		`SELECT indexname FROM pg_indexes WHERE schemaname = 'public' AND tablename = 'relaybus_deliveries' ORDER BY 1`)
	require.NoError(t, err)
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{
		"relaybus_deliveries_dead_idx",
		"relaybus_deliveries_event_handler_unique",
		"relaybus_deliveries_lane_key_idx",
		"relaybus_deliveries_lane_unkeyed_idx",
		"relaybus_deliveries_pkey",
	}, names)
	rows, err = pool.Query(t.Context(),
		`SELECT indexname FROM pg_indexes WHERE schemaname = 'public' AND tablename = 'relaybus_lanes' ORDER BY 1`)
	require.NoError(t, err)
	names, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"relaybus_lanes_pkey"}, names, "the lanes have no secondary index")
	var pages, filler int
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(DISTINCT (ctid::text::point)[0]),
		count(*) FILTER (WHERE cardinality(in_flight) > 0) FROM relaybus_lanes`).Scan(&pages, &filler))
	require.Equal(t, driver.LaneCount, pages, "each lane in a page of its own")
	require.Zero(t, filler, "a lane kept its filler")

	// One connection, so that pg_stat_force_next_flush below reaches the
	// backend that holds the counters.
	cfg := pool.Config()
	cfg.MaxConns = 1
	one, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	defer one.Close()
	s, err := postgres.New(one, nil)
	require.NoError(t, err)
	for i, key := range []string{"", "k"} {
		publish(t, s, pool, []*driver.EventPublish{{
			Event:      &relaytype.Event{ID: fmt.Sprintf("e%d", i), Type: "t", Key: key},
			Deliveries: []driver.DeliverySpec{{Handler: "h", MaxAttempts: 3}},
		}})
	}
	ds := claim(t, s, "w", 10, t0.Add(time.Second), "h")
	require.Len(t, ds, 2)
	ok, err := s.DeliveryCompleteMany(t.Context(), &driver.DeliveryCompleteManyParams{Leases: []relaytype.Lease{ds[0].Lease(), ds[1].Lease()}, Now: t0.Add(2 * time.Second)})
	require.NoError(t, err)
	require.Equal(t, []bool{true, true}, ok)
	require.Empty(t, claim(t, s, "w", 10, t0.Add(3*time.Second), "h"), "the claim that hands the drained lanes back")
	_, err = one.Exec(t.Context(), "SELECT pg_stat_force_next_flush()")
	require.NoError(t, err)
	type counters struct{ ins, upd, hot, del int64 }
	read := func(table string) counters {
		var c counters
		require.NoError(t, one.QueryRow(t.Context(),
			`SELECT n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del FROM pg_stat_user_tables WHERE relname = $1`, table).
			Scan(&c.ins, &c.upd, &c.hot, &c.del))
		return c
	}
	require.Equal(t, counters{ins: 2, del: 2}, read("relaybus_deliveries"), "deliveries: inserted and deleted, never updated")
	lanes := read("relaybus_lanes")
	require.Positive(t, lanes.upd)
	require.Equal(t, lanes.upd, lanes.hot, "every update of a lane row is HOT")
}

func TestCustomSchemaAndPrefix(t *testing.T) {
	t.Parallel()
	s, pool := setup(t, &postgres.Options{Schema: "rb_custom", TablePrefix: "app_"})
	var tables []string
	rows, err := pool.Query(t.Context(), `SELECT table_schema || '.' || table_name FROM information_schema.tables
		WHERE table_schema NOT IN ('pg_catalog', 'information_schema') ORDER BY 1`)
	require.NoError(t, err)
	tables, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"rb_custom.app_deliveries", "rb_custom.app_events", "rb_custom.app_history",
		"rb_custom.app_keys", "rb_custom.app_lanes", "rb_custom.app_paused_handlers", "rb_custom.app_schema_version"}, tables)

	res := publish(t, s, pool, []*driver.EventPublish{{
		Event:      &relaytype.Event{ID: "e1", Type: "t", Key: "k"},
		Deliveries: []driver.DeliverySpec{{Handler: "h", MaxAttempts: 3}},
	}})
	require.Equal(t, []int64{1}, res.Sequences)
	ds := claim(t, s, "w", 10, t0.Add(time.Second), "h")
	require.Len(t, ds, 1)
	ok, err := s.DeliveryComplete(t.Context(), &driver.DeliveryCompleteParams{Lease: ds[0].Lease(), Now: t0.Add(2 * time.Second)})
	require.NoError(t, err)
	require.True(t, ok)
	var n int
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM rb_custom.app_deliveries`).Scan(&n))
	require.Zero(t, n, "a completed delivery is deleted")
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM rb_custom.app_lanes`).Scan(&n))
	require.Equal(t, driver.LaneCount, n)
	// Nothing was written outside the schema.
	require.NoError(t, pool.QueryRow(t.Context(),
		`SELECT count(*) FROM pg_class WHERE relnamespace = 'public'::regnamespace`).Scan(&n))
	require.Zero(t, n)
}

// queryCounter counts the statements and batches a pool sends.
type queryCounter struct{ n atomic.Int64 }

func (c *queryCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}
func (c *queryCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (c *queryCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.n.Add(1)
	return ctx
}
func (c *queryCounter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (c *queryCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// maxPublishCalls bounds the statements and batches of one publish call,
// whatever its size.
const maxPublishCalls = 4

func TestPublishBatchIsAFewRoundTrips(t *testing.T) {
	t.Parallel()
	cfg, err := pgxpool.ParseConfig(dbtest.TestDatabase(t))
	require.NoError(t, err)
	counter := &queryCounter{}
	cfg.ConnConfig.Tracer = counter
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s, err := postgres.New(pool, nil)
	require.NoError(t, err)
	require.NoError(t, s.Setup(t.Context()))

	const events, keys = 1000, 7
	eps := make([]*driver.EventPublish, events)
	for i := range eps {
		e := &relaytype.Event{ID: fmt.Sprintf("e%04d", i), Type: "t", Payload: []byte{byte(i)}}
		if i%3 != 0 {
			e.Key = fmt.Sprintf("k%d", i%keys)
		}
		eps[i] = &driver.EventPublish{Event: e, Deliveries: []driver.DeliverySpec{
			{Handler: "a", MaxAttempts: 3}, {Handler: "b", MaxAttempts: 3}}}
	}
	tx, err := s.TxBegin(t.Context())
	require.NoError(t, err)
	before := counter.n.Load()
	res, err := s.EventPublishTx(t.Context(), tx, &driver.EventPublishParams{Events: eps, Now: t0})
	require.NoError(t, err)
	calls := counter.n.Load() - before
	require.NoError(t, s.TxCommit(t.Context(), tx))
	require.LessOrEqual(t, calls, int64(maxPublishCalls), "statements and batches of one publish of %d events", events)
	require.Equal(t, 2*events, res.Deliveries)

	// Sequences run 1, 2, 3 ... per key in call order.
	next := map[string]int64{}
	for i, ep := range eps {
		require.True(t, res.Inserted[i])
		if ep.Event.Key == "" {
			require.Zero(t, res.Sequences[i])
			continue
		}
		next[ep.Event.Key]++
		require.Equal(t, next[ep.Event.Key], res.Sequences[i], "event %s", ep.Event.ID)
	}

	// Republishing takes no sequence and adds only the new handler.
	for _, ep := range eps {
		ep.Deliveries = append(ep.Deliveries, driver.DeliverySpec{Handler: "c", MaxAttempts: 1})
	}
	tx, err = s.TxBegin(t.Context())
	require.NoError(t, err)
	res2, err := s.EventPublishTx(t.Context(), tx, &driver.EventPublishParams{Events: eps, Now: t0})
	require.NoError(t, err)
	require.NoError(t, s.TxCommit(t.Context(), tx))
	require.Equal(t, events, res2.Deliveries)
	require.Equal(t, res.Sequences, res2.Sequences)
	for _, ins := range res2.Inserted {
		require.False(t, ins)
	}
}

// TestConcurrentKeyedClaims runs several claimers over many keys and
// checks that no delivery is claimed while an earlier one of its handler
// and key has not started completing, and that every delivery runs once.
func TestConcurrentKeyedClaims(t *testing.T) {
	t.Parallel()
	s, pool := setup(t, nil)
	const events, keys, workers, batch = 400, 25, 6, 7
	handlers := []string{"a", "b"}
	eps := make([]*driver.EventPublish, events)
	for i := range eps {
		e := &relaytype.Event{ID: fmt.Sprintf("e%04d", i), Type: "t"}
		if i%5 != 0 {
			e.Key = fmt.Sprintf("k%d", i%keys)
		}
		eps[i] = &driver.EventPublish{Event: e, Deliveries: []driver.DeliverySpec{
			{Handler: "a", MaxAttempts: 3}, {Handler: "b", MaxAttempts: 3}}}
	}
	// Several transactions, so keys span commits.
	for i := 0; i < events; i += 50 {
		publish(t, s, pool, eps[i:i+50])
	}

	type slot struct{ handler, key string }
	var mu sync.Mutex
	completing := map[slot]map[int64]bool{} // sequences whose completion has started
	claimed := map[string]int{}
	var violations []string
	now := t0.Add(time.Second)

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			owner := fmt.Sprintf("w%d", w)
			for idle := 0; idle < 3; {
				ds, err := s.DeliveryClaim(ctx, &driver.DeliveryClaimParams{
					Owner: owner, Handlers: handlers, Limit: batch, LeaseDuration: time.Hour, Now: now})
				if err != nil {
					errs <- err
					return
				}
				if len(ds) == 0 {
					idle++
					time.Sleep(5 * time.Millisecond)
					continue
				}
				idle = 0
				mu.Lock()
				for _, d := range ds {
					claimed[d.ID]++
					if d.Key == "" {
						continue
					}
					sl := slot{d.Handler, d.Key}
					for seq := int64(1); seq < d.Sequence; seq++ {
						if !completing[sl][seq] {
							violations = append(violations, fmt.Sprintf("%s/%s seq %d claimed before seq %d completed", d.Handler, d.Key, d.Sequence, seq))
						}
					}
					if completing[sl] == nil {
						completing[sl] = map[int64]bool{}
					}
					completing[sl][d.Sequence] = true
				}
				mu.Unlock()
				ls := make([]relaytype.Lease, len(ds))
				for i, d := range ds {
					ls[i] = d.Lease()
				}
				oks, err := s.DeliveryCompleteMany(ctx, &driver.DeliveryCompleteManyParams{Leases: ls, Now: now})
				if err != nil {
					errs <- err
					return
				}
				for i, ok := range oks {
					if !ok {
						errs <- fmt.Errorf("completion of %s lost its lease", ls[i].DeliveryID)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Empty(t, violations)
	require.Len(t, claimed, events*len(handlers))
	for id, n := range claimed {
		require.Equal(t, 1, n, "delivery %s claimed %d times", id, n)
	}
	st, err := s.Statistics(t.Context(), &driver.StatisticsParams{Now: now})
	require.NoError(t, err)
	require.Equal(t, relaytype.Counts{}, st.Counts, "everything completed, and completed deliveries are deleted")
}

func TestListRejectsMalformedCursor(t *testing.T) {
	t.Parallel()
	s, _ := setup(t, nil)
	for _, after := range []string{"abc", "-1", "0", "1.5", "99999999999999999999"} {
		_, err := s.DeliveryList(t.Context(), &driver.DeliveryListParams{After: after})
		require.ErrorIs(t, err, relaytype.ErrInvalid, "cursor %q", after)
	}
	err := s.DeliveryRequeue(t.Context(), &driver.DeliveryRequeueParams{DeliveryID: "not-an-id", Now: t0})
	require.ErrorIs(t, err, relaytype.ErrNotFound)
	for _, id := range []string{"not-an-id", "007", "0", "-1", "99999999999999999999"} {
		_, err = s.DeliveryComplete(t.Context(), &driver.DeliveryCompleteParams{
			Lease: relaytype.Lease{DeliveryID: id, Token: "1:0:0"}, Now: t0})
		require.ErrorIs(t, err, relaytype.ErrInvalid, "delivery id %q is not one of this store's", id)
		require.True(t, strings.HasPrefix(err.Error(), "relaybus/postgres: "), err.Error())
	}
}

func TestErrorsNameThePackage(t *testing.T) {
	t.Parallel()
	s, _ := setup(t, nil)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := s.Statistics(ctx, &driver.StatisticsParams{Now: t0})
	require.Error(t, err)
	require.True(t, errors.Is(err, context.Canceled), "%v", err)
	require.True(t, strings.HasPrefix(err.Error(), "relaybus/postgres: "), err.Error())
}

func publish(t *testing.T, s *postgres.Store, _ *pgxpool.Pool, eps []*driver.EventPublish) *driver.EventPublishResult {
	t.Helper()
	tx, err := s.TxBegin(t.Context())
	require.NoError(t, err)
	res, err := s.EventPublishTx(t.Context(), tx, &driver.EventPublishParams{Events: eps, Now: t0})
	require.NoError(t, err)
	require.NoError(t, s.TxCommit(t.Context(), tx))
	return res
}

func claim(t *testing.T, s *postgres.Store, owner string, limit int, now time.Time, handlers ...string) []*relaytype.Delivery {
	t.Helper()
	ds, err := s.DeliveryClaim(t.Context(), &driver.DeliveryClaimParams{
		Owner: owner, Handlers: handlers, Limit: limit, LeaseDuration: time.Minute, Now: now})
	require.NoError(t, err)
	return ds
}

// eventInLane returns an event id whose unkeyed deliveries live in lane.
func eventInLane(prefix string, lane int) string {
	for i := 0; ; i++ {
		if id := fmt.Sprintf("%s-%d", prefix, i); driver.LaneOf("", id) == lane {
			return id
		}
	}
}

// TestClaimRoundTrips: a claim is one round trip whether its held lanes
// fill it (then it takes no lane, although free lanes have work) or not
// (then it takes lanes and picks from them in the same round trip).
func TestClaimRoundTrips(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	cfg, err := pgxpool.ParseConfig(dbtest.TestDatabase(t))
	require.NoError(t, err)
	counter := &queryCounter{}
	cfg.ConnConfig.Tracer = counter
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s, err := postgres.New(pool, nil)
	require.NoError(t, err)
	require.NoError(t, s.Setup(ctx))
	one := func(id string) *driver.EventPublish {
		return &driver.EventPublish{Event: &relaytype.Event{ID: id, Type: "t"}, Deliveries: []driver.DeliverySpec{{Handler: "h", MaxAttempts: 3}}}
	}
	publish(t, s, pool, []*driver.EventPublish{one(eventInLane("a1", 10)), one(eventInLane("a2", 10))})
	epochs := func() map[int]int64 {
		rows, err := pool.Query(ctx, `SELECT lane, epoch FROM relaybus_lanes`)
		require.NoError(t, err)
		out := map[int]int64{}
		var lane int16
		var epoch int64
		_, err = pgx.ForEachRow(rows, []any{&lane, &epoch}, func() error { out[int(lane)] = epoch; return nil })
		require.NoError(t, err)
		return out
	}
	claimCounted := func(limit int) ([]*relaytype.Delivery, int64) {
		before := counter.n.Load()
		ds := claim(t, s, "w", limit, t0.Add(time.Second), "h")
		return ds, counter.n.Load() - before
	}

	// Nothing held: the claim takes lane 10 and picks from it, one round
	// trip.
	ds, calls := claimCounted(1)
	require.Len(t, ds, 1)
	require.EqualValues(t, 1, calls, "round trips of a claim that takes a lane")

	// Lane 10 still has work and fills the next claim: no lane is taken,
	// although lane 20 has work now.
	publish(t, s, pool, []*driver.EventPublish{one(eventInLane("b", 20))})
	before := epochs()
	ds, calls = claimCounted(1)
	require.Len(t, ds, 1)
	require.Equal(t, 10, driver.LaneOf("", ds[0].EventID))
	require.EqualValues(t, 1, calls, "round trips of a claim its held lanes fill")
	require.Equal(t, before, epochs(), "a claim its held lanes filled took a lane")

	// Not filled by lane 10 (now drained): lane 20 is taken in the same
	// round trip.
	ds, calls = claimCounted(5)
	require.Len(t, ds, 1)
	require.Equal(t, 20, driver.LaneOf("", ds[0].EventID))
	require.EqualValues(t, 1, calls, "round trips of a claim that takes a lane after its own")
}
