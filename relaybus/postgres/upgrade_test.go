package postgres_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"text/template"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/berkcansavur/relaybus/relaybus"
	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/postgres"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

// install010 installs the verbatim 0.1.0 schema (testdata/schema-0.1.0.sql,
// the file as released) in schema "public" with the default prefix.
func install010(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	text, err := os.ReadFile("testdata/schema-0.1.0.sql")
	require.NoError(t, err)
	tmpl, err := template.New("0.1.0").Option("missingkey=error").Parse(string(text))
	require.NoError(t, err)
	var b strings.Builder
	require.NoError(t, tmpl.Execute(&b, struct{ Schema, Prefix string }{"public", "relaybus_"}))
	_, err = pool.Exec(t.Context(), b.String())
	require.NoError(t, err)
}

// row010 is a delivery as relaybus 0.1.0 stored it.
type row010 struct {
	event, key   string // key "" = unkeyed
	seq          int64
	handler      string
	status       string
	attempts     int
	maxAttempts  int
	wantRun      bool   // 0.2.0 must run it (it was not finished)
	wantStatus   string // after the upgrade
	wantSuspect  bool
	completedAgo time.Duration
}

// upgradeFixture holds deliveries in every 0.1.0 status, keyed and
// unkeyed, with keys and event ids whose lanes only a faithful FNV-1a of
// their UTF-8 bytes gets right. Every event has both handlers, so that
// publishing the same events again adds no delivery.
var upgradeFixture = []row010{
	{event: "pending-1", handler: "h1", status: "pending", maxAttempts: 5, wantRun: true, wantStatus: "pending"},
	{event: "pending-1", handler: "h2", status: "completed", attempts: 1, maxAttempts: 5, wantStatus: "completed", completedAgo: time.Hour},
	{event: "processing-é", handler: "h1", status: "processing", attempts: 2, maxAttempts: 5, wantRun: true, wantStatus: "pending", wantSuspect: true},
	{event: "processing-é", handler: "h2", status: "dead", attempts: 5, maxAttempts: 5, wantStatus: "dead"},
	// On its last attempt: no suspect in 0.1.0, so not buried, run once more alone.
	{event: "processing-last", handler: "h1", status: "processing", attempts: 3, maxAttempts: 3, wantRun: true, wantStatus: "pending", wantSuspect: true},
	{event: "processing-last", handler: "h2", status: "pending", maxAttempts: 3, wantRun: true, wantStatus: "pending"},
	{event: "completed-🙂", handler: "h1", status: "completed", attempts: 2, maxAttempts: 5, wantStatus: "completed", completedAgo: 2 * time.Hour},
	{event: "completed-🙂", handler: "h2", status: "completed", attempts: 1, maxAttempts: 5, wantStatus: "completed", completedAgo: time.Minute},
	// A key: its first event completed for h1, its second running when
	// 0.1.0 stopped, then two pending; h2 completed the first three.
	{event: "k-1", key: "клиент-7", seq: 1, handler: "h1", status: "completed", attempts: 1, maxAttempts: 5, wantStatus: "completed", completedAgo: time.Hour},
	{event: "k-1", key: "клиент-7", seq: 1, handler: "h2", status: "completed", attempts: 1, maxAttempts: 5, wantStatus: "completed", completedAgo: time.Hour},
	{event: "k-2", key: "клиент-7", seq: 2, handler: "h1", status: "processing", attempts: 1, maxAttempts: 5, wantRun: true, wantStatus: "pending", wantSuspect: true},
	{event: "k-2", key: "клиент-7", seq: 2, handler: "h2", status: "completed", attempts: 1, maxAttempts: 5, wantStatus: "completed", completedAgo: time.Hour},
	{event: "k-3", key: "клиент-7", seq: 3, handler: "h1", status: "pending", maxAttempts: 5, wantRun: true, wantStatus: "pending"},
	{event: "k-3", key: "клиент-7", seq: 3, handler: "h2", status: "completed", attempts: 1, maxAttempts: 5, wantStatus: "completed", completedAgo: time.Hour},
	{event: "k-4", key: "клиент-7", seq: 4, handler: "h1", status: "pending", maxAttempts: 5, wantRun: true, wantStatus: "pending"},
	{event: "k-4", key: "клиент-7", seq: 4, handler: "h2", status: "pending", maxAttempts: 5, wantRun: true, wantStatus: "pending"},
	// Another key, dead head: it does not block.
	{event: "d-1", key: "key with spaces", seq: 1, handler: "h1", status: "dead", attempts: 5, maxAttempts: 5, wantStatus: "dead"},
	{event: "d-1", key: "key with spaces", seq: 1, handler: "h2", status: "processing", attempts: 1, maxAttempts: 5, wantRun: true, wantStatus: "pending", wantSuspect: true},
	{event: "d-2", key: "key with spaces", seq: 2, handler: "h1", status: "pending", maxAttempts: 5, wantRun: true, wantStatus: "pending"},
	{event: "d-2", key: "key with spaces", seq: 2, handler: "h2", status: "completed", attempts: 3, maxAttempts: 5, wantStatus: "completed", completedAgo: time.Minute},
}

// fill010 writes the fixture as 0.1.0 did: events, key counters and
// delivery rows with their leases.
func fill010(t *testing.T, pool *pgxpool.Pool, now time.Time) {
	t.Helper()
	ctx := t.Context()
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	seen := map[string]bool{}
	lastSeq := map[string]int64{}
	for _, r := range upgradeFixture {
		if !seen[r.event] {
			seen[r.event] = true
			var key *string
			if r.key != "" {
				key = &r.key
				lastSeq[r.key] = max(lastSeq[r.key], r.seq)
			}
			_, err := tx.Exec(ctx, `INSERT INTO relaybus_events (id, type, key, sequence, payload, headers, created_at)
				VALUES ($1, 't', $2, $3, $4, '{"h":"v"}', $5)`, r.event, key, r.seq, []byte("payload of "+r.event), now.Add(-3*time.Hour))
			require.NoError(t, err)
		}
		var key, owner, token *string
		var expires, completed *time.Time
		if r.key != "" {
			key = &r.key
		}
		if r.status == "processing" {
			o, tok, exp := "worker-010", "00112233445566778899aabbccddeeff-x", now.Add(time.Minute)
			owner, token, expires = &o, &tok, &exp
		}
		if r.status == "completed" {
			c := now.Add(-r.completedAgo)
			completed = &c
		}
		_, err := tx.Exec(ctx, `INSERT INTO relaybus_deliveries (event_id, handler, event_type, key, sequence, status,
			attempts, max_attempts, available_at, lease_owner, lease_token, lease_expires_at, last_error,
			created_at, updated_at, completed_at)
			VALUES ($1, $2, 't', $3, $4, $5, $6, $7, $8, $9, $10, $11, NULL, $8, $8, $12)`,
			r.event, r.handler, key, r.seq, r.status, r.attempts, r.maxAttempts, now.Add(-3*time.Hour),
			owner, token, expires, completed)
		require.NoError(t, err)
	}
	for k, n := range lastSeq {
		_, err := tx.Exec(ctx, `INSERT INTO relaybus_keys (key, last_sequence) VALUES ($1, $2)`, k, n)
		require.NoError(t, err)
	}
	require.NoError(t, tx.Commit(ctx))
}

// TestUpgradeFrom010 starts from the verbatim 0.1.0 schema holding
// deliveries in every status, keyed and unkeyed, runs Setup twice, and
// then runs a 0.2.0 bus on it: exactly the unfinished deliveries run, in
// key order, none of the completed ones runs again even when every event
// is published again, and 0.1.0's completed rows stay listable and
// purgeable.
func TestUpgradeFrom010(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := newPool(t)
	install010(t, pool)
	now := time.Now().UTC().Truncate(time.Microsecond)
	fill010(t, pool, now)

	s, err := postgres.New(pool, nil)
	require.NoError(t, err)
	require.NoError(t, s.Setup(ctx), "upgrade")
	upgraded := catalog(t, pool, "public")
	require.NoError(t, s.Setup(ctx), "a second Setup")
	require.Equal(t, upgraded, catalog(t, pool, "public"), "a second Setup changed the schema")

	// The upgraded schema is the schema of a fresh install.
	_, fresh := setup(t, nil)
	require.Equal(t, catalog(t, fresh, "public"), upgraded, "an upgraded schema differs from a fresh one")

	// Every row as planned: lanes by LaneOf, statuses, suspects, handlers.
	type stored struct {
		lane             int16
		status           string
		attempts         int
		suspect          bool
		lastError        *string
		claims           int64
		completedAt      *time.Time
		eventHandlersLen int
	}
	for _, r := range upgradeFixture {
		var got stored
		require.NoError(t, pool.QueryRow(ctx, `
SELECT d.lane, d.status, d.attempts, d.suspect, d.last_error, d.claims, d.completed_at, cardinality(e.handlers)
FROM relaybus_deliveries d JOIN relaybus_events e ON e.id = d.event_id
WHERE d.event_id = $1 AND d.handler = $2`, r.event, r.handler).Scan(
			&got.lane, &got.status, &got.attempts, &got.suspect, &got.lastError, &got.claims, &got.completedAt, &got.eventHandlersLen))
		what := r.event + "/" + r.handler
		require.Equal(t, int16(driver.LaneOf(r.key, r.event)), got.lane, "%s: lane", what)
		require.Equal(t, r.wantStatus, got.status, "%s: status", what)
		require.Equal(t, r.attempts, got.attempts, "%s: attempts stay counted", what)
		require.Equal(t, r.wantSuspect, got.suspect, "%s: suspect", what)
		require.Equal(t, 2, got.eventHandlersLen, "%s: events.handlers holds every handler, completed ones too", what)
		if r.status == "processing" && r.wantStatus == "dead" {
			require.NotNil(t, got.lastError, "%s: buried by the upgrade without a reason", what)
		}
		if r.status == "completed" {
			require.NotNil(t, got.completedAt, "%s", what)
		}
	}
	var flying int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM relaybus_lanes WHERE lease_owner IS NOT NULL OR cardinality(in_flight) > 0`).Scan(&flying))
	require.Zero(t, flying, "the upgrade leaves every lane free")

	// A 0.2.0 bus runs exactly the unfinished deliveries, after every
	// event is published again (a broker redelivering them all).
	var (
		mu   sync.Mutex
		runs = map[string]int{}
		seqs = map[string][]int64{} // handler/key -> sequences in run order
	)
	bus, err := relaybus.New[pgx.Tx](s, relaybus.Config{
		Owner: "upgraded", Concurrency: 4, BatchSize: 4, PollInterval: 5 * time.Millisecond,
		RetryBaseDelay: time.Millisecond, RetryMaxDelay: 5 * time.Millisecond,
	})
	require.NoError(t, err)
	for _, h := range []string{"h1", "h2"} {
		require.NoError(t, bus.Handle("t", h, func(_ context.Context, d *relaytype.Delivery) error {
			mu.Lock()
			defer mu.Unlock()
			runs[d.EventID+"/"+d.Handler]++
			if d.Key != "" {
				seqs[d.Handler+"/"+d.Key] = append(seqs[d.Handler+"/"+d.Key], d.Sequence)
			}
			return nil
		}, nil))
	}
	var republish []*relaytype.Event
	for id := range eventIDs(upgradeFixture) {
		republish = append(republish, &relaytype.Event{ID: id, Type: "t"})
	}
	require.NoError(t, bus.Publish(ctx, republish...))
	var deliveries int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM relaybus_deliveries`).Scan(&deliveries))
	require.Len(t, upgradeFixture, deliveries, "publishing the events again added deliveries")

	require.NoError(t, bus.Start(ctx))
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := bus.Statistics(ctx)
		require.NoError(t, err)
		if st.Pending+st.Processing == 0 {
			break
		}
		require.True(t, time.Now().Before(deadline), "the unfinished deliveries did not run: %+v", st.Counts)
		time.Sleep(10 * time.Millisecond)
	}
	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, bus.Stop(stopCtx))

	mu.Lock()
	defer mu.Unlock()
	want := map[string]int{}
	for _, r := range upgradeFixture {
		if r.wantRun {
			want[r.event+"/"+r.handler] = 1
		}
	}
	require.Equal(t, want, runs, "exactly the unfinished deliveries ran, once each")
	require.Equal(t, []int64{2, 3, 4}, seqs["h1/клиент-7"], "key order across the upgrade")
	require.Equal(t, []int64{2}, seqs["h1/key with spaces"], "a dead head does not block")

	// 0.1.0's completed rows are listed and counted as completed...
	page, err := s.DeliveryList(ctx, &driver.DeliveryListParams{Status: relaytype.StatusCompleted, Limit: driver.MaxListLimit})
	require.NoError(t, err)
	var legacy int
	for _, r := range upgradeFixture {
		if r.status == "completed" {
			legacy++
		}
	}
	require.Len(t, page.Deliveries, legacy)
	for _, d := range page.Deliveries {
		require.Equal(t, relaytype.StatusCompleted, d.Status)
		require.False(t, d.CompletedAt.IsZero())
		require.Equal(t, "payload of "+d.EventID, string(d.Payload))
	}
	st, err := s.Statistics(ctx, &driver.StatisticsParams{Now: now})
	require.NoError(t, err)
	require.Equal(t, int64(legacy), st.Completed)

	// ...and purged by completion time: those completed over 30 minutes
	// ago, then the rest.
	res, err := s.Purge(ctx, &driver.PurgeParams{CompletedBefore: now.Add(-30 * time.Minute), Now: now})
	require.NoError(t, err)
	var old int64
	for _, r := range upgradeFixture {
		if r.status == "completed" && r.completedAgo > 30*time.Minute {
			old++
		}
	}
	require.Equal(t, old, res.Deliveries)
	res, err = s.Purge(ctx, &driver.PurgeParams{CompletedBefore: now.Add(time.Minute), Now: now})
	require.NoError(t, err)
	require.Equal(t, int64(legacy)-old, res.Deliveries)
	page, err = s.DeliveryList(ctx, &driver.DeliveryListParams{Status: relaytype.StatusCompleted})
	require.NoError(t, err)
	require.Empty(t, page.Deliveries)

	// A dead 0.1.0 delivery can be requeued and runs under 0.2.0.
	var deadID int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT id FROM relaybus_deliveries WHERE event_id = 'processing-é' AND handler = 'h2'`).Scan(&deadID))
	require.NoError(t, s.DeliveryRequeue(ctx, &driver.DeliveryRequeueParams{DeliveryID: fmt.Sprint(deadID), Now: now}))
	ds, err := s.DeliveryClaim(ctx, &driver.DeliveryClaimParams{Owner: "o", Handlers: []string{"h2"}, Limit: 10, LeaseDuration: time.Minute, Now: now})
	require.NoError(t, err)
	require.Len(t, ds, 1)
	require.Equal(t, fmt.Sprint(deadID), ds[0].ID)
	require.Equal(t, 1, ds[0].Attempts)
}

func eventIDs(rows []row010) map[string]bool {
	out := map[string]bool{}
	for _, r := range rows {
		out[r.event] = true
	}
	return out
}

// TestUpgradeLaneHashMatchesLaneOf fills a 0.1.0 schema with keys and
// event ids of every kind of UTF-8 and checks that the upgrade's SQL hash
// gives each delivery the lane driver.LaneOf gives it.
func TestUpgradeLaneHashMatchesLaneOf(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := newPool(t)
	install010(t, pool)
	now := time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)
	texts := []string{"", "a", "foobar", "é", "日本語", "🙂🙃", "key with spaces", "\t\x7f", strings.Repeat("z", 255),
		"Ω≈ç√∫", "order-123456789", "\u00ff\u0100"}
	for i := range 300 {
		texts = append(texts, fmt.Sprintf("key-%d-%x", i, i*7919))
	}
	type want struct {
		event string
		lane  int
	}
	var wants []want
	for i, k := range texts {
		for _, keyed := range []bool{false, true} {
			if keyed && k == "" {
				continue
			}
			id := fmt.Sprintf("ev-%d-%v-%s", i, keyed, k)
			var key *string
			kk := ""
			if keyed {
				key, kk = &k, k
			}
			_, err := pool.Exec(ctx, `INSERT INTO relaybus_events (id, type, key, created_at) VALUES ($1, 't', $2, $3)`, id, key, now)
			require.NoError(t, err)
			_, err = pool.Exec(ctx, `INSERT INTO relaybus_deliveries (event_id, handler, event_type, key, status, max_attempts,
				available_at, created_at, updated_at) VALUES ($1, 'h', 't', $2, 'pending', 3, $3, $3, $3)`, id, key, now)
			require.NoError(t, err)
			wants = append(wants, want{id, driver.LaneOf(kk, id)})
		}
	}
	s, err := postgres.New(pool, nil)
	require.NoError(t, err)
	require.NoError(t, s.Setup(ctx))
	for _, w := range wants {
		var lane int
		require.NoError(t, pool.QueryRow(ctx, `SELECT lane FROM relaybus_deliveries WHERE event_id = $1`, w.event).Scan(&lane))
		require.Equal(t, w.lane, lane, "event %q", w.event)
	}
}

// TestSetupRefusesUnknownSchemas: a schema version above this store's,
// or relaybus tables that are neither 0.1.0 nor 0.2.0, make Setup fail
// with ErrUnknownSchema, and nothing is written.
func TestSetupRefusesUnknownSchemas(t *testing.T) {
	t.Parallel()
	ctx := t.Context()

	t.Run("NewerVersion", func(t *testing.T) {
		t.Parallel()
		s, pool := setup(t, nil)
		_, err := pool.Exec(ctx, `INSERT INTO relaybus_schema_version (version) VALUES ($1)`, postgres.SchemaVersion+1)
		require.NoError(t, err)
		// A newer version would have its own tables and columns: add one
		// this version does not know of, and see that it survives.
		_, err = pool.Exec(ctx, `ALTER TABLE relaybus_lanes DROP COLUMN in_flight; CREATE TABLE relaybus_future (x int)`)
		require.NoError(t, err)
		before := catalog(t, pool, "public")
		err = s.Setup(ctx)
		require.ErrorIs(t, err, postgres.ErrUnknownSchema)
		require.True(t, strings.HasPrefix(err.Error(), "relaybus/postgres: "), err.Error())
		require.Contains(t, err.Error(), fmt.Sprint(postgres.SchemaVersion+1))
		require.Equal(t, before, catalog(t, pool, "public"), "a refused Setup changed the schema")
	})

	t.Run("NoVersionNoMarker", func(t *testing.T) {
		t.Parallel()
		pool := newPool(t)
		_, err := pool.Exec(ctx, `CREATE TABLE relaybus_events (id text PRIMARY KEY);
			CREATE TABLE relaybus_deliveries (id bigserial PRIMARY KEY, event_id text, status text)`)
		require.NoError(t, err)
		before := catalog(t, pool, "public")
		s, err := postgres.New(pool, nil)
		require.NoError(t, err)
		require.ErrorIs(t, s.Setup(ctx), postgres.ErrUnknownSchema)
		require.Equal(t, before, catalog(t, pool, "public"), "a refused Setup changed the schema")
	})

	// A table with a relaybus name that relaybus did not make: refused by
	// name, nothing written. Creating the other tables beside a foreign
	// relaybus_events and recording the version would leave a schema
	// whose first publish fails (SQLSTATE 42703, an undefined column).
	for _, tc := range []struct {
		name, table string
		before      func(*testing.T, *pgxpool.Pool)
		ddl         string
	}{
		{"ForeignEventsAlone", "relaybus_events", nil,
			`CREATE TABLE relaybus_events (id serial PRIMARY KEY, title text, body text)`},
		{"ForeignKeysAlone", "relaybus_keys", nil, `CREATE TABLE relaybus_keys (k text, v text)`},
		{"ForeignLanesBesideNothing", "relaybus_lanes", nil, `CREATE TABLE relaybus_lanes (lane int)`},
		{"ForeignHistoryBeside010", "relaybus_history", install010,
			`CREATE TABLE relaybus_history (id bigint PRIMARY KEY, note text)`},
		{"ForeignEventsBeside020", "relaybus_events", func(t *testing.T, pool *pgxpool.Pool) {
			s, err := postgres.New(pool, nil)
			require.NoError(t, err)
			require.NoError(t, s.Setup(ctx))
			_, err = pool.Exec(ctx, `ALTER TABLE relaybus_deliveries DROP CONSTRAINT relaybus_deliveries_event_id_fkey;
				DROP TABLE relaybus_events`)
			require.NoError(t, err)
		}, `CREATE TABLE relaybus_events (id text PRIMARY KEY, payload jsonb)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pool := newPool(t)
			if tc.before != nil {
				tc.before(t, pool)
			}
			_, err := pool.Exec(ctx, tc.ddl)
			require.NoError(t, err)
			before := catalog(t, pool, "public")
			s, err := postgres.New(pool, nil)
			require.NoError(t, err)
			err = s.Setup(ctx)
			require.ErrorIs(t, err, postgres.ErrUnknownSchema)
			require.Contains(t, err.Error(), `"public"."`+tc.table+`"`, "the error names the table")
			require.Equal(t, before, catalog(t, pool, "public"), "a refused Setup changed the schema")
		})
	}

	t.Run("EmptyVersionTable", func(t *testing.T) {
		t.Parallel()
		s, pool := setup(t, nil)
		_, err := pool.Exec(ctx, `DELETE FROM relaybus_schema_version`)
		require.NoError(t, err)
		require.ErrorIs(t, s.Setup(ctx), postgres.ErrUnknownSchema)
	})

	t.Run("OtherSchemaUntouched", func(t *testing.T) {
		t.Parallel()
		// The guard reads only its own schema and prefix: a newer
		// installation under another prefix does not stop this one.
		_, pool := setup(t, &postgres.Options{TablePrefix: "other_"})
		_, err := pool.Exec(ctx, `INSERT INTO other_schema_version (version) VALUES ($1)`, postgres.SchemaVersion+1)
		require.NoError(t, err)
		s, err := postgres.New(pool, nil)
		require.NoError(t, err)
		require.NoError(t, s.Setup(ctx))
	})
}

// TestSchemaSQLUpgrades applies SchemaSQL by hand (a migration tool of
// the user's) to a 0.1.0 schema: the same upgrade as Setup.
func TestSchemaSQLUpgrades(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := newPool(t)
	install010(t, pool)
	fill010(t, pool, time.Now().UTC())
	s, err := postgres.New(pool, nil)
	require.NoError(t, err)
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, s.SchemaSQL())
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	_, fresh := setup(t, nil)
	require.Equal(t, catalog(t, fresh, "public"), catalog(t, pool, "public"))
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM relaybus_deliveries WHERE status = 'pending' AND suspect`).Scan(&n))
	require.Equal(t, 4, n, "the processing rows (the one on its last attempt too: it was no suspect)")
}

// install022 installs the schema of the 0.2.2 release
// (testdata/schema-0.2.2.sql, verbatim) in schema "public" with the
// default prefix.
func install022(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	text, err := os.ReadFile("testdata/schema-0.2.2.sql")
	require.NoError(t, err)
	_, err = pool.Exec(t.Context(), string(text))
	require.NoError(t, err)
}

// laneColumns returns the columns of schema's lanes table in their
// order in the row (dropped ones left out).
func laneColumns(t *testing.T, pool *pgxpool.Pool, schema string) []string {
	t.Helper()
	rows, err := pool.Query(t.Context(), `SELECT column_name::text FROM information_schema.columns
		WHERE table_schema = $1 AND table_name = 'relaybus_lanes' ORDER BY ordinal_position`, schema)
	require.NoError(t, err)
	cols, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return cols
}

// laneRow is a lane as the claim path reads it, and the page it is on.
type laneRow struct {
	Lane     int16
	Epoch    int64
	Owner    *string
	Holder   *string
	Expires  *time.Time
	Picks    int
	InFlight []int64
	Page     int64
}

func laneRows(t *testing.T, pool *pgxpool.Pool) []laneRow {
	t.Helper()
	rows, err := pool.Query(t.Context(), `SELECT lane, epoch, lease_owner, lease_holder, lease_expires_at, picks, in_flight,
		(ctid::text::point)[0]::bigint FROM relaybus_lanes ORDER BY lane`)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (laneRow, error) {
		var l laneRow
		err := r.Scan(&l.Lane, &l.Epoch, &l.Owner, &l.Holder, &l.Expires, &l.Picks, &l.InFlight, &l.Page)
		return l, err
	})
	require.NoError(t, err)
	return out
}

// TestUpgradeFrom022 starts from the schema of the 0.2.2 release
// (testdata/schema-0.2.2.sql, verbatim) with a claim in flight, runs
// Setup twice, and checks that the lanes table gets in_flight as its last
// column, as a fresh install has it (a claim's update record then shares
// the ids already in flight with the old row: BENCHMARKS.md, "The lane
// row's update record"), with every lane's lease, epoch, picks and
// in_flight kept and every lane still on a page of its own; and that the
// claim made before the upgrade holds across it: its deliveries are not
// handed out again, the key behind them waits, and their completions
// under the old tokens are accepted.
func TestUpgradeFrom022(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := newPool(t)
	install022(t, pool)
	old := laneColumns(t, pool, "public")
	require.Equal(t, []string{"lane", "epoch", "lease_owner", "lease_holder", "lease_expires_at", "in_flight", "picks"}, old,
		"the 0.2.2 fixture's lanes")

	s, err := postgres.New(pool, nil)
	require.NoError(t, err)
	ev := func(id, key string) *driver.EventPublish {
		return &driver.EventPublish{Event: &relaytype.Event{ID: id, Type: "t", Key: key},
			Deliveries: []driver.DeliverySpec{{Handler: "h1", MaxAttempts: 5}}}
	}
	publish(t, s, pool, []*driver.EventPublish{ev("k-1", "k"), ev("k-2", "k"), ev("u-1", ""), ev("u-2", ""), ev("u-3", "")})
	first := claim(t, s, "owner-a", 10, t0, "h1")
	got := map[string]*relaytype.Delivery{}
	for _, d := range first {
		got[d.EventID] = d
	}
	require.Len(t, got, 4, "the claim before the upgrade: the key's head and the three unkeyed")
	require.Contains(t, got, "k-1")
	before := laneRows(t, pool)

	require.NoError(t, s.Setup(ctx), "upgrade")
	upgraded := catalog(t, pool, "public")
	upgradedColumns := laneColumns(t, pool, "public")
	require.NoError(t, s.Setup(ctx), "a second Setup")
	require.Equal(t, upgraded, catalog(t, pool, "public"), "a second Setup changed the schema")
	require.Equal(t, upgradedColumns, laneColumns(t, pool, "public"), "a second Setup moved a column")
	var dropped int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_catalog.pg_attribute
		WHERE attrelid = 'relaybus_lanes'::regclass AND attisdropped`).Scan(&dropped))
	require.Equal(t, 1, dropped, "the upgrade drops the old in_flight once, and a second Setup nothing")

	_, fresh := setup(t, nil)
	freshColumns := laneColumns(t, fresh, "public")
	require.Equal(t, "in_flight", freshColumns[len(freshColumns)-1], "a fresh install's lanes: in_flight last")
	require.Equal(t, freshColumns, upgradedColumns, "the upgraded lanes' columns in a fresh install's order")
	require.Equal(t, catalog(t, fresh, "public"), upgraded, "an upgraded schema differs from a fresh one")

	after := laneRows(t, pool)
	pages := map[int64]bool{}
	for i := range after {
		pages[after[i].Page] = true
		b, a := before[i], after[i]
		b.Page, a.Page = 0, 0
		require.Equal(t, b, a, "lane %d: the upgrade changed its state", i)
	}
	require.Len(t, pages, 256, "every lane on a page of its own after the upgrade")

	// The claim made before the upgrade holds across it.
	for _, d := range claim(t, s, "owner-a", 10, t0.Add(time.Second), "h1") {
		require.NotContains(t, got, d.EventID, "handed out again after the upgrade: %s", d.EventID)
		require.NotEqual(t, "k-2", d.EventID, "the key's second event was handed out while its first runs")
	}
	for _, d := range first {
		done, err := s.DeliveryComplete(ctx, &driver.DeliveryCompleteParams{Lease: d.Lease(), Now: t0.Add(2 * time.Second)})
		require.NoError(t, err)
		require.True(t, done, "%s: the completion under the token issued before the upgrade was refused", d.EventID)
	}
	next := claim(t, s, "owner-a", 10, t0.Add(3*time.Second), "h1")
	require.Len(t, next, 1)
	require.Equal(t, "k-2", next[0].EventID)
}

// TestUpgradeFrom022BesideARunningClaim runs the upgrade of a 0.2.2
// lanes table while another session is inside a claim-shaped transaction
// (a lane locked, then a write of the deliveries): the upgrade waits for
// it and both commit. The lanes' exclusive lock must be the first lock
// the upgrade takes: taken after one on the deliveries (step 4's CREATE
// INDEX IF NOT EXISTS holds a SHARE lock even when the index exists),
// the two would deadlock and the server would abort one of them.
func TestUpgradeFrom022BesideARunningClaim(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := newPool(t)
	install022(t, pool)
	s, err := postgres.New(pool, nil)
	require.NoError(t, err)

	claimTx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = claimTx.Rollback(ctx) }()
	_, err = claimTx.Exec(ctx, `SELECT lane FROM relaybus_lanes WHERE lane = 7 FOR NO KEY UPDATE`)
	require.NoError(t, err)

	setupDone := make(chan error, 1)
	go func() { setupDone <- s.Setup(ctx) }()
	// Wait until the upgrade waits for a lock the claim holds.
	require.Eventually(t, func() bool {
		var waiting int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%relaybus%'`).Scan(&waiting)
		return err == nil && waiting > 0
	}, 10*time.Second, 10*time.Millisecond, "the upgrade never waited for the claim's lane lock")
	// The claim goes on to the deliveries, as a claim does after its
	// lanes, and commits.
	_, err = claimTx.Exec(ctx, `UPDATE relaybus_deliveries SET claims = claims + 1 WHERE id = -1`)
	require.NoError(t, err, "the claim's write of the deliveries, while the upgrade waits")
	require.NoError(t, claimTx.Commit(ctx))
	select {
	case err := <-setupDone:
		require.NoError(t, err, "the upgrade beside a running claim")
	case <-time.After(30 * time.Second):
		t.Fatal("the upgrade did not finish after the claim committed")
	}
	cols := laneColumns(t, pool, "public")
	require.Equal(t, "in_flight", cols[len(cols)-1])
}
