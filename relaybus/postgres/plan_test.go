package postgres

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/berkcansavur/relaybus/internal/dbenv/dbtest"
	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

// Sizes of the plan tests' backlog: a deep keyed backlog (four hot keys
// and many keys with a few events each) beside unkeyed work.
const (
	planHotKeys       = 4
	planHotPerKey     = 2_000
	planManyKeys      = 2_000
	planManyPerKey    = 3
	planUnkeyed       = 20_000
	planLimit         = 200
	planPublishBatch  = 1_000
	planCompleteBatch = 200
)

// planNode is one node of EXPLAIN (FORMAT JSON).
type planNode struct {
	NodeType   string     `json:"Node Type"`
	Relation   string     `json:"Relation Name"`
	Index      string     `json:"Index Name"`
	Parent     string     `json:"Parent Relationship"`
	SharedHit  int64      `json:"Shared Hit Blocks"`
	SharedRead int64      `json:"Shared Read Blocks"`
	ActualRows float64    `json:"Actual Rows"`
	Loops      float64    `json:"Actual Loops"`
	Plans      []planNode `json:"Plans"`
}

// walk calls fn for n and every node below it, telling it whether the
// node is inside a subplan (a correlated or initial subquery).
func (n *planNode) walk(inSubplan bool, fn func(n *planNode, inSubplan bool)) {
	fn(n, inSubplan)
	for i := range n.Plans {
		c := &n.Plans[i]
		c.walk(inSubplan || c.Parent == "SubPlan" || c.Parent == "InitPlan", fn)
	}
}

// planOf is the plan and text of one EXPLAIN.
type planOf struct {
	root planNode
	text string
}

// scans lists "node on relation using index" for every scan of table.
func (p *planOf) scans(table string) []string {
	var out []string
	p.root.walk(false, func(n *planNode, _ bool) {
		if n.Relation == table && n.NodeType != "ModifyTable" {
			out = append(out, strings.TrimSpace(n.NodeType+" "+n.Index))
		}
	})
	return out
}

// buffers is the root's shared blocks, hit and read: what the statement
// touched.
func (p *planOf) buffers() int64 { return p.root.SharedHit + p.root.SharedRead }

// explain runs sql as a prepared statement with args under EXPLAIN
// (ANALYZE, BUFFERS, FORMAT JSON), in a transaction that is rolled back,
// with PostgreSQL forced to a generic plan (the one a pgx statement cache
// runs after five executions) or a custom one (the first five). pre are
// statements run in the same transaction first, with their own args.
func explain(t *testing.T, pool *pgxpool.Pool, generic bool, sql string, types string, args []any, pre ...func(tx pgx.Tx)) *planOf {
	t.Helper()
	ctx := t.Context()
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	mode := "force_custom_plan"
	if generic {
		mode = "force_generic_plan"
	}
	_, err = tx.Exec(ctx, "SET LOCAL plan_cache_mode = "+mode)
	require.NoError(t, err)
	for _, f := range pre {
		f(tx)
	}
	name := fmt.Sprintf("plan_test_%d", time.Now().UnixNano())
	_, err = tx.Exec(ctx, fmt.Sprintf("PREPARE %s(%s) AS %s", name, types, sql))
	require.NoError(t, err)
	// EXECUTE takes no bind parameters: each argument goes in as a
	// literal (NULL for a nil one), rendered by the server from the value
	// pgx sends.
	typeList := strings.Split(types, ",")
	require.Len(t, typeList, len(args))
	params := make([]string, len(args))
	for i, a := range args {
		typ := strings.TrimSpace(typeList[i])
		var lit string
		require.NoError(t, tx.QueryRow(ctx, fmt.Sprintf("SELECT quote_nullable($1::%s::text)", typ), a).Scan(&lit))
		params[i] = lit + "::" + typ
	}
	var raw []byte
	require.NoError(t, tx.QueryRow(ctx, fmt.Sprintf("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE %s(%s)", name, strings.Join(params, ", "))).Scan(&raw))
	var doc []struct {
		Plan planNode `json:"Plan"`
	}
	require.NoError(t, json.Unmarshal(raw, &doc))
	require.Len(t, doc, 1)
	rows, err := tx.Query(ctx, fmt.Sprintf("EXPLAIN (COSTS OFF) EXECUTE %s(%s)", name, strings.Join(params, ", ")))
	require.NoError(t, err)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return &planOf{root: doc[0].Plan, text: strings.Join(lines, "\n")}
}

// unanalyzedStore returns a new store whose tables relaybus_<name>, for
// each name of tables, autovacuum leaves alone: never analyzed.
func unanalyzedStore(t *testing.T, tables ...string) (*Store, *pgxpool.Pool) {
	t.Helper()
	ctx := t.Context()
	pool, err := pgxpool.New(ctx, dbtest.TestDatabase(t))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s, err := New(pool, nil)
	require.NoError(t, err)
	require.NoError(t, s.Setup(ctx))
	for _, table := range tables {
		_, err := pool.Exec(ctx, fmt.Sprintf(`ALTER TABLE relaybus_%s SET (autovacuum_enabled = false)`, table))
		require.NoError(t, err)
	}
	return s, pool
}

// planStore is a store on a fresh database whose deliveries table is
// never analyzed (autovacuum off for it), holding the plan tests'
// backlog, with a claimer ("w") holding lanes: the state the hot
// statements run in.
func planStore(t *testing.T) (*Store, *pgxpool.Pool) {
	t.Helper()
	ctx := t.Context()
	s, pool := unanalyzedStore(t, "deliveries", "events", "lanes")
	// The hot keys are due first, so that the claimer takes their lanes.
	now := time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC).Add(-time.Hour)
	n := 0
	var eps []*driver.EventPublish
	flush := func() {
		if len(eps) == 0 {
			return
		}
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		_, err = s.EventPublishTx(ctx, tx, &driver.EventPublishParams{Events: eps, Now: now})
		require.NoError(t, err)
		require.NoError(t, tx.Commit(ctx))
		eps = nil
	}
	add := func(key string) {
		n++
		eps = append(eps, &driver.EventPublish{
			Event:      &relaytype.Event{ID: fmt.Sprintf("e%d", n), Type: "t", Key: key},
			Deliveries: []driver.DeliverySpec{{Handler: "h", MaxAttempts: 3}},
		})
		if len(eps) == planPublishBatch {
			flush()
		}
	}
	for i := range planHotPerKey * planHotKeys {
		add(fmt.Sprintf("hot-%d", i%planHotKeys))
	}
	flush()
	now = now.Add(time.Hour)
	for i := range planManyKeys * planManyPerKey {
		add(fmt.Sprintf("many-%d", i%planManyKeys))
	}
	for range planUnkeyed {
		add("")
	}
	flush()
	var analyzed int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_user_tables
		WHERE relname = 'relaybus_deliveries' AND (last_analyze IS NOT NULL OR last_autoanalyze IS NOT NULL)`).Scan(&analyzed))
	require.Zero(t, analyzed, "the deliveries table must never have been analyzed")
	return s, pool
}

// claimArgs are claimOwn's arguments for owner "w" at now, from all the
// lanes it holds, as a busy caller (a dispatcher under load) claims, with
// the store's ledger as its hints, for a batch handler: key runs of up to
// 20 (driver.KeyRun), so that the plan includes the runs' probes of the
// key index.
func (s *Store) claimArgs(now time.Time) []any {
	h := s.ledger.hints()
	return []any{"w", s.holder, now, []string{"h"}, planLimit, false, now.Add(time.Minute), true,
		h.lanes, h.epochs, h.picks, h.outstanding, []string{"h"}, []int32{20}}
}

// claimLocked returns what a claim's first round trip runs before
// claimOwn, for explain: the prelude (with the planner settings) and the
// lock of owner's held lanes at now.
func (s *Store) claimLocked(t *testing.T, owner string, now time.Time) func(tx pgx.Tx) {
	return func(tx pgx.Tx) {
		_, err := tx.Exec(t.Context(), s.q.claimPrelude, 0)
		require.NoError(t, err)
		_, err = tx.Exec(t.Context(), s.q.claimLock, owner, s.holder, now)
		require.NoError(t, err)
	}
}

const claimOwnTypes = "text, text, timestamptz, text[], int, bool, timestamptz, bool, smallint[], bigint[], int[], int[], text[], int[]"

// TestPlans checks the plan of every hot statement on a table that has
// never been analyzed, with a deep keyed backlog, both as a custom plan
// and as the generic plan a statement cache switches to. It asserts what
// matters for the cost: the index each table is read through, that
// deliveries are never scanned sequentially, that the lanes are never
// the outer side of a join with the deliveries, and a bound on the
// buffers each touches, which the plan and buffer counts it logs show
// the margin of.
func TestPlans(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, pool := planStore(t)
	now := time.Date(2031, 1, 1, 0, 1, 0, 0, time.UTC)

	// The claimer takes lanes until it holds some hot keys: their heads
	// run, the rest of each hot key is a backlog that cannot.
	var held []*relaytype.Delivery
	for range 20 {
		ds, err := s.DeliveryClaim(ctx, &driver.DeliveryClaimParams{Owner: "w", Handlers: []string{"h"}, Limit: planLimit, LeaseDuration: time.Hour, Now: now})
		require.NoError(t, err)
		held = append(held, ds...)
	}
	hot := 0
	for _, d := range held {
		if strings.HasPrefix(d.Key, "hot-") {
			hot++
		}
	}
	t.Logf("the claimer holds %d deliveries, %d of them hot keys' heads", len(held), hot)
	require.GreaterOrEqual(t, len(held), planCompleteBatch)

	for _, generic := range []bool{false, true} {
		t.Run(fmt.Sprintf("generic=%v", generic), func(t *testing.T) {
			// The claim from held lanes, after its lock statement.
			p := explain(t, pool, generic, s.q.claimOwn, claimOwnTypes, s.claimArgs(now), s.claimLocked(t, "w", now))
			require.Contains(t, p.text, "One-Time Filter", "claim: relaybus.claimed is set once, whatever the rows")
			for _, scan := range p.scans("relaybus_deliveries") {
				require.NotContains(t, scan, "Seq Scan", "claim:\n%s", p.text)
			}
			require.Contains(t, p.text, "relaybus_deliveries_lane_unkeyed_idx", "claim: unkeyed work by the lane index")
			require.Contains(t, p.text, "relaybus_deliveries_lane_key_idx", "claim: heads by the key index")
			require.Less(t, p.buffers(), int64(20_000), "claim: buffers\n%s", p.text)
			t.Logf("claim from held lanes: %d buffers\n%s", p.buffers(), p.text)

			// Taking more lanes.
			p = explain(t, pool, generic, s.q.claimTake,
				"int, smallint[], timestamptz, text[], int, int",
				[]any{4, []int16{}, now, []string{"h"}, planLimit, 0})
			for _, scan := range p.scans("relaybus_deliveries") {
				require.NotContains(t, scan, "Seq Scan", "take:\n%s", p.text)
			}
			require.Less(t, p.buffers(), int64(10_000), "take: buffers\n%s", p.text)
			t.Logf("take lanes: %d buffers", p.buffers())

			// CompleteMany of a full batch: looked up through the primary
			// key, deleted by address, the lanes only in the per-row fence.
			ls := leasesOf(t, held[:planCompleteBatch])
			p = explain(t, pool, generic, s.q.completeMany, "bigint[], smallint[], bigint[], bigint[]", ls.args())
			requireFencedDelete(t, p, "complete")
			var deleted float64
			p.root.walk(false, func(n *planNode, _ bool) {
				if n.NodeType == "ModifyTable" {
					deleted = n.ActualRows
				}
			})
			require.Equal(t, float64(planCompleteBatch), deleted, "complete: every lease held\n%s", p.text)
			require.Less(t, p.buffers(), int64(40*planCompleteBatch), "complete: buffers\n%s", p.text)
			t.Logf("complete %d: %d buffers\n%s", planCompleteBatch, p.buffers(), p.text)

			// Renewal: lanes, and the deliveries by primary key only.
			p = explain(t, pool, generic, s.q.extend, "text, text, bigint[], smallint[], bigint[], bigint[], timestamptz",
				[]any{"w", s.holder, ls.ids, ls.lanes, ls.epochs, ls.claims, now.Add(time.Hour)})
			for _, scan := range p.scans("relaybus_deliveries") {
				require.Contains(t, scan, "relaybus_deliveries_pkey", "renew:\n%s", p.text)
			}
			t.Logf("renew %d: %d buffers", planCompleteBatch, p.buffers())

			// Publish: a republish that adds a handler reads events by
			// their primary key and no deliveries (the foreign key checks
			// read events, by its primary key).
			// The call is unkeyed, so it is publishStale's; publishNumber
			// (a call with keyed events) does the same for it.
			handlers := `["new-handler"]`
			for _, q := range []string{s.q.publishStale, s.q.publishNumber} {
				p = explain(t, pool, generic, q,
					"text[], text[], smallint[], jsonb[], text[], text[], int[], timestamptz, timestamptz[]",
					[]any{[]string{"e1"}, []*string{nil}, []int16{3}, []*string{&handlers}, []string{"e1"}, []string{"new-handler"}, []int32{3}, now, []time.Time{now}})
				for _, table := range []string{"relaybus_deliveries", "relaybus_events"} {
					for _, scan := range p.scans(table) {
						require.NotContains(t, scan, "Seq Scan", "publish:\n%s", p.text)
					}
				}
			}
		})
	}
}

// requireFencedDelete checks the plan of a fenced delete: the deliveries
// looked up through the primary key and deleted by their addresses (a TID
// scan), never scanned; the lanes read only inside subplans, never as a
// side of a join.
func requireFencedDelete(t *testing.T, p *planOf, what string) {
	t.Helper()
	scans := p.scans("relaybus_deliveries")
	require.ElementsMatch(t, []string{"Index Scan relaybus_deliveries_pkey", "Tid Scan"}, scans, "%s:\n%s", what, p.text)
	p.root.walk(false, func(n *planNode, inSubplan bool) {
		if n.Relation == "relaybus_lanes" {
			require.True(t, inSubplan, "%s: lanes read outside a subplan (%s):\n%s", what, n.NodeType, p.text)
		}
		require.NotContains(t, n.NodeType, "Semi Join", "%s: the claims re-check became a join:\n%s", what, p.text)
	})
	require.Contains(t, p.text, "hashed SubPlan", "%s: the claims re-check is not hashed:\n%s", what, p.text)
}

// leaseCols are leases as completeMany's four arrays.
type leaseCols struct {
	ids, claims, epochs []int64
	lanes               []int16
}

func (c leaseCols) args() []any { return []any{c.ids, c.lanes, c.claims, c.epochs} }

func leasesOf(t *testing.T, ds []*relaytype.Delivery) leaseCols {
	t.Helper()
	var c leaseCols
	for _, d := range ds {
		l, err := parseLease("test", d.Lease())
		require.NoError(t, err)
		c.ids = append(c.ids, l.ID)
		c.lanes = append(c.lanes, int16(l.Token.Lane))
		c.claims = append(c.claims, l.Token.Claims)
		c.epochs = append(c.epochs, l.Token.Epoch)
	}
	return c
}

// TestPublishPlansOnAFreshTable checks the publish statements' generic
// plans where they are made in practice: on tables that are new, small
// and never analyzed, where a statement cache's sixth execution fixes the
// plan it then keeps as the table grows. The call is the harness's
// publish of a new unkeyed event, a new keyed one, and a republish that
// adds a handler: the lookups of events are probes of the primary key,
// and only the UPDATE of a call with keyed events or a republish may
// scan (see upd in publish.sql), so that a call of new unkeyed events
// costs the same however large the table.
func TestPublishPlansOnAFreshTable(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, pool := unanalyzedStore(t, "deliveries", "events", "keys")
	now := time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)
	// A few events, so that a republish has one to find.
	for i := range 20 {
		key := ""
		if i%2 == 0 {
			key = fmt.Sprint("k", i%3)
		}
		_, err := s.EventPublish(ctx, &driver.EventPublishParams{Now: now, Events: []*driver.EventPublish{{
			Event:      &relaytype.Event{ID: fmt.Sprint("old", i), Type: "t", Key: key},
			Deliveries: []driver.DeliverySpec{{Handler: "h", MaxAttempts: 3}},
		}}})
		require.NoError(t, err)
	}

	const insertTypes = "text[], text[], text[], bytea[], jsonb[], timestamptz[], jsonb[], smallint[], text[], text[], int[], timestamptz, timestamptz[]"
	const numberTypes = "text[], text[], smallint[], jsonb[], text[], text[], int[], timestamptz, timestamptz[]"
	for _, c := range []struct {
		name, id, key string
		handlers      []string
	}{
		{"new unkeyed", "n1", "", []string{"h"}},
		{"new keyed", "n2", "k0", []string{"h"}},
		{"republish adding a handler", "old4", "k1", []string{"h", "h2"}},
		{"unkeyed republish adding a handler", "old1", "", []string{"h", "h2"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, err := s.newPublish(&driver.EventPublishParams{Now: now, Events: []*driver.EventPublish{{
				Event:      &relaytype.Event{ID: c.id, Type: "t", Key: c.key},
				Deliveries: specs(c.handlers...),
			}}})
			require.NoError(t, err)
			if p.unkeyed.eventIDs == nil { // EXPLAIN's literals: empty, not NULL
				p.unkeyed = deliveryCols{eventIDs: array[textElem]{}, handlers: array[textElem]{}, maxAttempts: []int32{}}
			}
			insert := func(tx pgx.Tx) {
				_, err := tx.Exec(ctx, s.q.publishInsert, p.ids, p.types, p.keys, p.payloads, p.headers, p.createdAts, p.handlers, p.lanes,
					p.unkeyed.eventIDs, p.unkeyed.handlers, p.unkeyed.maxAttempts, now, p.dues)
				require.NoError(t, err)
			}
			// The second statement the call sends (publish.go).
			second, name := s.q.publishNumber, "publishNumber"
			if !p.keyed {
				second, name = s.q.publishStale, "publishStale"
			}
			plan := explain(t, pool, true, second, numberTypes,
				[]any{p.ids, p.keys, p.lanes, p.handlers, p.all.eventIDs, p.all.handlers, p.all.maxAttempts, now, p.dues}, insert)
			// The scans of events that ran: by primary key, except the
			// sequential scan of the UPDATE that numbers new keyed events
			// and extends republished ones (see the note on upd in
			// publish.sql), which a call of new unkeyed events never runs.
			var ran []string
			plan.root.walk(false, func(n *planNode, _ bool) {
				if n.Relation == "relaybus_events" && n.NodeType != "ModifyTable" && n.Loops > 0 {
					ran = append(ran, strings.TrimSpace(n.NodeType+" "+n.Index))
				}
			})
			want := []string{"Index Scan relaybus_events_pkey"}
			if c.key != "" || strings.HasPrefix(c.id, "old") {
				want = append(want, "Seq Scan")
			}
			for _, scan := range ran {
				require.Contains(t, want, scan, name+":\n%s", plan.text)
			}
			if c.key == "" && !strings.HasPrefix(c.id, "old") {
				require.NotContains(t, ran, "Seq Scan", name+":\n%s", plan.text)
			}
			for _, table := range []string{"relaybus_deliveries", "relaybus_keys"} {
				require.Empty(t, plan.scans(table), name+" reads %s:\n%s", table, plan.text)
			}
			t.Logf("%s, generic, %d buffers, events read by %v", name, plan.buffers(), ran)
			plan = explain(t, pool, true, s.q.publishInsert, insertTypes,
				[]any{p.ids, p.types, p.keys, p.payloads, p.headers, p.createdAts, p.handlers, p.lanes,
					p.unkeyed.eventIDs, p.unkeyed.handlers, p.unkeyed.maxAttempts, now, p.dues})
			for _, table := range []string{"relaybus_events", "relaybus_deliveries", "relaybus_keys"} {
				require.Empty(t, plan.scans(table), "publishInsert reads %s:\n%s", table, plan.text)
			}
			// The call's own first statement: one event (publish.go).
			plan = explain(t, pool, true, s.q.publishOne, "text, text, text, bytea, jsonb, timestamptz, text[], smallint, timestamptz, int[], timestamptz",
				[]any{&p.ids[0], &p.types[0], &p.keys[0], &p.payloads[0], p.headers[0], &p.createdAts[0], p.all.handlers, p.lanes[0], &p.dues[0],
					p.all.maxAttempts, now})
			for _, table := range []string{"relaybus_events", "relaybus_deliveries", "relaybus_keys"} {
				require.Empty(t, plan.scans(table), "publishInsertOne reads %s:\n%s", table, plan.text)
			}
		})
	}
}

func specs(handlers ...string) []driver.DeliverySpec {
	out := make([]driver.DeliverySpec, len(handlers))
	for i, h := range handlers {
		out[i] = driver.DeliverySpec{Handler: h, MaxAttempts: 3}
	}
	return out
}

// TestPlansAfterAnEmptyAnalyze checks the hot statements where their
// plans go wrong in practice: tables analyzed while empty (a fresh
// install, or autovacuum's ANALYZE of a queue that had drained), then
// grown, with the plans kept from when they were small (a statement
// cache keeps its generic plan, and PostgreSQL plans a connection's
// foreign-key checks once). The store's planner settings (planSettings
// in claim.sql) keep every lookup on an index: the claim's reads of
// deliveries, the completion's, and a publish's reads of events,
// including the foreign-key check of each delivery it inserts, which
// without them scans every event once per delivery.
//
// The blocks a publish reads are counted as the change, inside its
// transaction, of pg_stat_get_xact_blocks_fetched: that function returns
// what the backend has not yet sent to the statistics system, which since
// PostgreSQL 15 includes the transactions before it that were run within
// the last second or whose statistics could not be flushed at once. Read
// once, after a load, it counted the load too (17,485 and 34,669 blocks
// in runs of the whole package, against 304 for the publish itself).
func TestPlansAfterAnEmptyAnalyze(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	cfg, err := pgxpool.ParseConfig(dbtest.TestDatabase(t))
	require.NoError(t, err)
	cfg.MaxConns = 1 // one connection: the plans it made while the tables were empty are the ones it keeps
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s, err := New(pool, nil)
	require.NoError(t, err)
	require.NoError(t, s.Setup(ctx))
	for _, table := range []string{"deliveries", "events", "lanes", "keys"} {
		_, err := pool.Exec(ctx, fmt.Sprintf(`ALTER TABLE relaybus_%s SET (autovacuum_enabled = false)`, table))
		require.NoError(t, err)
		_, err = pool.Exec(ctx, fmt.Sprintf(`VACUUM ANALYZE relaybus_%s`, table))
		require.NoError(t, err)
	}
	now := time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)
	n := 0
	publish := func(tx pgx.Tx, events, keys int) {
		var eps []*driver.EventPublish
		for i := range events {
			n++
			key := ""
			if keys > 0 {
				key = fmt.Sprint("k", i%keys)
			}
			eps = append(eps, &driver.EventPublish{
				Event:      &relaytype.Event{ID: fmt.Sprint("e", n), Type: "t", Key: key, Payload: make([]byte, 64)},
				Deliveries: []driver.DeliverySpec{{Handler: "h", MaxAttempts: 3}},
			})
		}
		_, err := s.EventPublishTx(ctx, tx, &driver.EventPublishParams{Events: eps, Now: now})
		require.NoError(t, err)
	}
	inTx := func(f func(tx pgx.Tx)) {
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }() // a failed check leaves no connection held
		f(tx)
		require.NoError(t, tx.Commit(ctx))
	}
	// The plans are made on the empty tables: more than five calls of
	// each statement, each shape (unkeyed, keyed).
	for range 8 {
		inTx(func(tx pgx.Tx) { publish(tx, 1, 0) })
		inTx(func(tx pgx.Tx) { publish(tx, 1, 1) })
	}
	// Then the tables grow: 20,000 events, half of them keyed.
	for range 10 {
		inTx(func(tx pgx.Tx) { publish(tx, 1000, 0) })
		inTx(func(tx pgx.Tx) { publish(tx, 1000, 500) })
	}

	// A publish of 20 unkeyed and 20 keyed events reads events through
	// its primary key: a few blocks an event, not the table.
	var eventPages int64
	require.NoError(t, pool.QueryRow(ctx, "SELECT pg_relation_size('relaybus_events') / 8192").Scan(&eventPages))
	var fetched int64
	inTx(func(tx pgx.Tx) {
		blocksFetched := func() (n int64) {
			require.NoError(t, tx.QueryRow(ctx, "SELECT pg_stat_get_xact_blocks_fetched('relaybus_events'::regclass)").Scan(&n))
			return n
		}
		before := blocksFetched() // what earlier transactions left unflushed
		publish(tx, 20, 0)
		publish(tx, 20, 10)
		fetched = blocksFetched() - before
		t.Logf("publish of 40 events: %d blocks of events fetched (the table has %d pages)", fetched, eventPages)
		require.Less(t, fetched, int64(40*20), "the publish of 40 events read %d blocks of events (%d pages): scans, not probes", fetched, eventPages)
		// The caller's transaction keeps its own planner settings.
		var seqscan, cacheMode string
		require.NoError(t, tx.QueryRow(ctx, "SELECT current_setting('enable_seqscan'), current_setting('plan_cache_mode')").Scan(&seqscan, &cacheMode))
		require.Equal(t, "on", seqscan)
		require.Equal(t, "auto", cacheMode)
	})

	// The claim's statements and the completion, as generic plans made
	// under the store's settings, read deliveries through indexes.
	ds, err := s.DeliveryClaim(ctx, &driver.DeliveryClaimParams{Owner: "w", Handlers: []string{"h"}, Limit: 50, LeaseDuration: time.Hour, Now: now.Add(time.Minute)})
	require.NoError(t, err)
	require.NotEmpty(t, ds)
	at := now.Add(time.Minute)
	p := explain(t, pool, true, s.q.claimOwn, claimOwnTypes, s.claimArgs(at), s.claimLocked(t, "w", at))
	for _, scan := range p.scans("relaybus_deliveries") {
		require.NotContains(t, scan, "Seq Scan", "claim:\n%s", p.text)
	}
	prelude := func(tx pgx.Tx) {
		_, err := tx.Exec(ctx, s.q.claimPrelude, 0)
		require.NoError(t, err)
	}
	p = explain(t, pool, true, s.q.claimTake, "int, smallint[], timestamptz, text[], int, int",
		[]any{4, []int16{}, at, []string{"h"}, planLimit, 0}, prelude)
	for _, scan := range p.scans("relaybus_deliveries") {
		require.NotContains(t, scan, "Seq Scan", "take:\n%s", p.text)
	}
	completePlan := func(tx pgx.Tx) {
		_, err := tx.Exec(ctx, s.q.completePlan)
		require.NoError(t, err)
	}
	p = explain(t, pool, true, s.q.completeMany, "bigint[], smallint[], bigint[], bigint[]", leasesOf(t, ds).args(), completePlan)
	requireFencedDelete(t, p, "complete")
}
