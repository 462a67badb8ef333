package lifecycle

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// harnessTag marks the lifecycle's own queries (pg_stat_statements,
// server logs).
const harnessTag = "/* relaybus-bench lifecycle */ "

// nextXid is the next transaction id the server will assign (xid8): the
// lifecycle's marks between steps. Reading it assigns none.
func nextXid(ctx context.Context, conn *pgx.Conn) (uint64, error) {
	var s string
	if err := conn.QueryRow(ctx, harnessTag+"SELECT pg_snapshot_xmax(pg_current_snapshot())::text").Scan(&s); err != nil {
		return 0, fmt.Errorf("lifecycle: reading the next transaction id: %w", err)
	}
	x, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("lifecycle: next transaction id %q: %w", s, err)
	}
	return x, nil
}

// read fills r from the database conn is connected to. The raw pages come
// first: the SELECTs that tell live versions set hint bits.
func read(ctx context.Context, conn *pgx.Conn, r *Report) error {
	if _, err := conn.Exec(ctx, harnessTag+"CREATE EXTENSION IF NOT EXISTS pageinspect"); err != nil {
		return fmt.Errorf("lifecycle: pageinspect (PostgreSQL's contrib) is needed: %w", err)
	}
	var err error
	if r.Deliveries, err = heapTuples(ctx, conn, TableDeliveries); err != nil {
		return err
	}
	indexes, err := indexesOf(ctx, conn, TableDeliveries)
	if err != nil {
		return err
	}
	for _, ix := range indexes {
		if err := readIndex(ctx, conn, &ix); err != nil {
			return err
		}
		r.Indexes = append(r.Indexes, ix)
	}
	var lanes []Tuple
	if err := conn.QueryRow(ctx, harnessTag+"SELECT to_regclass($1) IS NOT NULL", TableLanes).Scan(&r.HasLanes); err != nil {
		return fmt.Errorf("lifecycle: %w", err)
	}
	if r.HasLanes {
		if lanes, err = heapTuples(ctx, conn, TableLanes); err != nil {
			return err
		}
	}

	// Raw pages read; now what a SELECT sees.
	live, err := liveTIDs(ctx, conn, "SELECT ctid::text FROM "+TableDeliveries)
	if err != nil {
		return err
	}
	for i := range r.Deliveries {
		t := &r.Deliveries[i]
		t.Live = live[t.TID] != nil
		t.Step, t.XmaxStep = r.stepOf(t.Xmin), r.stepOf(t.Xmax)
	}
	if r.HasLanes {
		laneOf, err := liveTIDs(ctx, conn, "SELECT ctid::text, lane::int FROM "+TableLanes)
		if err != nil {
			return err
		}
		for i := range lanes {
			t := &lanes[i]
			t.Step, t.XmaxStep = r.stepOf(t.Xmin), r.stepOf(t.Xmax)
		}
		r.Lanes = writtenLanes(lanes, laneOf)
	}
	if r.Counters, err = counters(ctx, conn); err != nil {
		return err
	}
	r.summarize()
	return nil
}

// heapTuples reads every line pointer of every page of table.
func heapTuples(ctx context.Context, conn *pgx.Conn, table string) ([]Tuple, error) {
	rows, err := conn.Query(ctx, harnessTag+`
		SELECT b::int, p.lp::int, p.lp_flags::int, coalesce(p.t_xmin::text, '0'), coalesce(p.t_xmax::text, '0'),
			coalesce(p.t_ctid::text, ''), coalesce(p.t_infomask, 0), coalesce(p.t_infomask2, 0)
		FROM generate_series(0, pg_relation_size($1::regclass) / current_setting('block_size')::bigint - 1) AS b,
			LATERAL heap_page_items(get_raw_page($1::text, 'main', b)) AS p
		ORDER BY b, p.lp`, table)
	if err != nil {
		return nil, fmt.Errorf("lifecycle: reading the heap of %s: %w", table, err)
	}
	var out []Tuple
	for rows.Next() {
		var t Tuple
		var flags int
		var xmin, xmax string
		if err := rows.Scan(&t.Block, &t.LP, &flags, &xmin, &xmax, &t.Ctid, &t.Infomask, &t.Infomask2); err != nil {
			rows.Close()
			return nil, fmt.Errorf("lifecycle: reading the heap of %s: %w", table, err)
		}
		t.State, t.TID = lpState(flags), tid(t.Block, t.LP)
		if flags == lpNormal {
			x1, err1 := strconv.ParseUint(xmin, 10, 32)
			x2, err2 := strconv.ParseUint(xmax, 10, 32)
			if err1 != nil || err2 != nil {
				rows.Close()
				return nil, fmt.Errorf("lifecycle: %s %s: transaction ids %q, %q", table, t.TID, xmin, xmax)
			}
			t.Xmin, t.Xmax = uint32(x1), uint32(x2)
			t.Flags = Flags(t.Infomask, t.Infomask2)
		} else {
			t.Ctid, t.Infomask, t.Infomask2 = "", 0, 0
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("lifecycle: reading the heap of %s: %w", table, err)
	}
	return out, nil
}

func tid(block, lp int) string { return "(" + strconv.Itoa(block) + "," + strconv.Itoa(lp) + ")" }

// indexesOf lists the indexes of table by name.
func indexesOf(ctx context.Context, conn *pgx.Conn, table string) ([]Index, error) {
	rows, err := conn.Query(ctx, harnessTag+`
		SELECT c.relname::text, am.amname::text, (pg_relation_size(c.oid) / current_setting('block_size')::bigint)::int
		FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am am ON am.oid = c.relam
		WHERE i.indrelid = $1::regclass ORDER BY c.relname`, table)
	if err != nil {
		return nil, fmt.Errorf("lifecycle: listing the indexes of %s: %w", table, err)
	}
	ixs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Index, error) {
		var ix Index
		err := row.Scan(&ix.Name, &ix.Method, &ix.Pages)
		return ix, err
	})
	if err != nil {
		return nil, fmt.Errorf("lifecycle: listing the indexes of %s: %w", table, err)
	}
	return ixs, nil
}

// readIndex reads the entries of every leaf page of a B-tree index.
// Page 0 is the metapage; the first item of a page with a right sibling
// is its high key, not an entry.
func readIndex(ctx context.Context, conn *pgx.Conn, ix *Index) error {
	ix.TIDs = []string{}
	if ix.Method != "btree" {
		ix.Unread = "not a B-tree: pageinspect's bt_page_items cannot read it"
		return nil
	}
	type page struct {
		block   int
		highKey bool
	}
	rows, err := conn.Query(ctx, harnessTag+`
		SELECT b::int, s.btpo_next <> 0
		FROM generate_series(1, $2::bigint - 1) AS b, LATERAL bt_page_stats($1, b) AS s
		WHERE s.btpo_level = 0 AND s.type IN ('l', 'r') ORDER BY b`, ix.Name, ix.Pages)
	if err != nil {
		return fmt.Errorf("lifecycle: index %s: %w", ix.Name, err)
	}
	pages, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (page, error) {
		var p page
		err := row.Scan(&p.block, &p.highKey)
		return p, err
	})
	if err != nil {
		return fmt.Errorf("lifecycle: index %s: %w", ix.Name, err)
	}
	for _, p := range pages {
		ix.Leaves++
		rows, err := conn.Query(ctx, harnessTag+`
			SELECT itemoffset::int, coalesce(array_to_string(tids, ' '), htid::text, ''), coalesce(dead, false)
			FROM bt_page_items($1, $2::bigint) ORDER BY itemoffset`, ix.Name, p.block)
		if err != nil {
			return fmt.Errorf("lifecycle: index %s page %d: %w", ix.Name, p.block, err)
		}
		for rows.Next() {
			var off int
			var tids string
			var dead bool
			if err := rows.Scan(&off, &tids, &dead); err != nil {
				rows.Close()
				return fmt.Errorf("lifecycle: index %s page %d: %w", ix.Name, p.block, err)
			}
			if off == 1 && p.highKey {
				continue
			}
			fields := strings.Fields(tids)
			ix.TIDs = append(ix.TIDs, fields...)
			if dead {
				ix.DeadTIDs = append(ix.DeadTIDs, fields...)
			}
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("lifecycle: index %s page %d: %w", ix.Name, p.block, err)
		}
	}
	return nil
}

// liveTIDs runs a query that returns a tid and, optionally, an integer,
// and maps each tid to its row's values.
func liveTIDs(ctx context.Context, conn *pgx.Conn, query string) (map[string][]int, error) {
	rows, err := conn.Query(ctx, harnessTag+query)
	if err != nil {
		return nil, fmt.Errorf("lifecycle: %w", err)
	}
	defer rows.Close()
	out := map[string][]int{}
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			return nil, fmt.Errorf("lifecycle: %w", err)
		}
		s, _ := vals[0].(string)
		var rest []int
		for _, v := range vals[1:] {
			n, ok := v.(int32)
			if !ok {
				return nil, fmt.Errorf("lifecycle: %s: want an integer, got %T", query, v)
			}
			rest = append(rest, int(n))
		}
		out[s] = append([]int{}, rest...)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("lifecycle: %w", err)
	}
	return out, nil
}

// writtenLanes follows every live lane row back through its versions
// (t_ctid points at the next version, whose xmin is the previous one's
// xmax) and keeps the lanes that a transaction after the setup wrote or
// locked: the lane rows the delivery touched.
func writtenLanes(tuples []Tuple, laneOf map[string][]int) []LaneRows {
	byTID := map[string]*Tuple{}
	for i := range tuples {
		if tuples[i].State == "normal" {
			byTID[tuples[i].TID] = &tuples[i]
		}
	}
	prev := map[string]string{}
	for _, t := range byTID {
		// A multixact xmax (a lock and an update) is not the updater's id.
		if next, ok := byTID[t.Ctid]; ok && t.Ctid != t.TID && (next.Xmin == t.Xmax || t.Infomask&heapXmaxIsMulti != 0) {
			prev[t.Ctid] = t.TID
		}
	}
	var out []LaneRows
	for liveTID, vals := range laneOf {
		if len(vals) == 0 || byTID[liveTID] == nil {
			continue
		}
		chain := []Tuple{*byTID[liveTID]}
		chain[0].Live = true
		for at := liveTID; prev[at] != ""; at = prev[at] {
			chain = append(chain, *byTID[prev[at]])
			if len(chain) > len(byTID) {
				break // a cycle would be a bug in the chain rule above
			}
		}
		slices.Reverse(chain)
		if !writtenAfterSetup(chain) {
			continue
		}
		out = append(out, LaneRows{Lane: vals[0], Versions: chain})
	}
	slices.SortFunc(out, func(a, b LaneRows) int { return a.Lane - b.Lane })
	return out
}

// counters reads pg_stat_user_tables of the relaybus tables. The caller
// makes sure the workers' sessions have ended (a backend flushes its
// counters when it exits); a new snapshot is taken for the read.
func counters(ctx context.Context, conn *pgx.Conn) ([]TableCounters, error) {
	if _, err := conn.Exec(ctx, harnessTag+"SELECT pg_stat_clear_snapshot()"); err != nil {
		return nil, fmt.Errorf("lifecycle: %w", err)
	}
	rows, err := conn.Query(ctx, harnessTag+`
		SELECT relname::text, n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del, n_live_tup, n_dead_tup
		FROM pg_stat_user_tables WHERE relname LIKE 'relaybus\_%' ORDER BY relname`)
	if err != nil {
		return nil, fmt.Errorf("lifecycle: reading pg_stat_user_tables: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (TableCounters, error) {
		var c TableCounters
		err := row.Scan(&c.Table, &c.Inserted, &c.Updated, &c.HotUpdated, &c.Deleted, &c.Live, &c.Dead)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("lifecycle: reading pg_stat_user_tables: %w", err)
	}
	return out, nil
}

// writtenAfterSetup: a version of the chain was made, or deleted or
// locked, by a transaction of a step after the setup.
func writtenAfterSetup(chain []Tuple) bool {
	for _, t := range chain {
		if (t.Step != "" && t.Step != StepSetup) || (t.XmaxStep != "" && t.XmaxStep != StepSetup) {
			return true
		}
	}
	return false
}
