// Package lifecycle shows what one delivery leaves behind in PostgreSQL:
// the row versions in the heap of the deliveries table, the entries of
// every one of its indexes and the row versions they point at, the versions
// of the lane rows where the store has lanes, and the tables' tuple
// counters. It is the evidence of the 0.2 write-amplification design
// ("What one delivery leaves behind"), produced for any ref by that ref's
// own worker (`bench lifecycle --ref v0.1.0 --ref HEAD`).
//
// # How one ref is run
//
// On a fresh database of a server with autovacuum off (the harness's own
// server runs with autovacuum=off; each relaybus table also gets
// autovacuum_enabled=false after the setup, which covers a server given by
// DSN), the ref's worker runs, through protocol 1 only, so that a v0.1.0
// worker works unchanged: setup, a preload of ONE event with ONE handler,
// and a dispatcher (concurrency 1, batch 1) whose handler takes one second,
// until it has completed the delivery; then it is stopped (SIGTERM). The
// harness reads the next transaction id at each step, so every row version
// is placed in the step whose transaction wrote it: setup, publish, claim
// (until the claim was seen), complete (until the completion was seen) or
// stop (the dispatcher's shutdown). The one-second handler is what keeps
// the claim and the completion apart: the harness checks that the
// delivery's handle record did not exist yet when it read the claim's mark,
// and says so when it did.
//
// # What is read
//
// Once the worker's sessions have ended (a backend flushes its table
// statistics when it exits), with pageinspect: every line pointer of every
// page of the deliveries table (heap_page_items), every page of every
// index of it (bt_page_stats, bt_page_items; posting lists expanded, the
// high key of a non-rightmost page skipped) with the heap tids its entries
// point at, and every page of the lanes table, whose row versions are
// chained through t_ctid from the live version (SELECT ctid) back to the
// first; then pg_stat_user_tables. A version is live when a plain SELECT
// returns its tid, which the harness asks only after the raw pages were
// read (a read sets hint bits). Nothing is counted from a guess: a
// version's step is its xmin's, an index entry's is that of the version it
// points at (an index entry is added by the transaction that writes a
// version that is not heap-only).
package lifecycle

// Tables the lifecycle reads (the worker's store: schema public, prefix
// relaybus_).
const (
	TableDeliveries = "relaybus_deliveries"
	TableLanes      = "relaybus_lanes"
)

// Steps of the lifecycle, in order: the step of a transaction is the one
// during which its id was assigned.
const (
	StepSetup    = "setup"
	StepPublish  = "publish"
	StepClaim    = "claim"
	StepComplete = "complete"
	StepStop     = "stop"
)

// Steps lists the steps in order.
var Steps = []string{StepSetup, StepPublish, StepClaim, StepComplete, StepStop}

// Report is what one ref's delivery left behind.
type Report struct {
	Ref     string `json:"ref"`
	SHA     string `json:"sha"`
	Version string `json:"version"`
	// Marks are the next transaction id (xid8) when each step began, and
	// End when the last ended: a transaction belongs to the step whose
	// range holds its id.
	Marks map[string]uint64 `json:"marks"`
	End   uint64            `json:"end"`
	// ClaimApart: the handle record did not exist yet when the claim's
	// mark was read, so the claim and the completion are told apart.
	ClaimApart bool `json:"claim_apart"`
	// Autovacuum says how autovacuum was kept off.
	Autovacuum string `json:"autovacuum"`
	// Deliveries are the line pointers of the deliveries table.
	Deliveries []Tuple `json:"deliveries"`
	// Indexes of the deliveries table, by name.
	Indexes []Index `json:"indexes"`
	// HasLanes: the ref's store has a lanes table; Lanes are the rows of
	// it that were written after the setup, each with its versions.
	HasLanes bool       `json:"has_lanes"`
	Lanes    []LaneRows `json:"lanes,omitempty"`
	// Counters are pg_stat_user_tables of every relaybus table.
	Counters []TableCounters `json:"counters"`
	Summary  Summary         `json:"summary"`
}

// Tuple is one line pointer of a heap page and the tuple it holds.
type Tuple struct {
	Block int    `json:"block"`
	LP    int    `json:"lp"`
	State string `json:"state"` // normal, redirect, dead, unused
	// TID is "(block,lp)".
	TID       string `json:"tid"`
	Xmin      uint32 `json:"xmin,omitempty"`
	Xmax      uint32 `json:"xmax,omitempty"`
	Ctid      string `json:"ctid,omitempty"`
	Infomask  int    `json:"infomask,omitempty"`
	Infomask2 int    `json:"infomask2,omitempty"`
	Flags     string `json:"flags,omitempty"`
	// Live: a plain SELECT returns this version.
	Live bool `json:"live"`
	// Step is the step of xmin's transaction; XmaxStep of xmax's.
	Step     string `json:"step,omitempty"`
	XmaxStep string `json:"xmax_step,omitempty"`
}

// Index is one index of the deliveries table.
type Index struct {
	Name   string `json:"name"`
	Method string `json:"method"`
	// Pages is the index's size in pages, the metapage included; Leaves
	// are the leaf pages read.
	Pages  int `json:"pages"`
	Leaves int `json:"leaves"`
	// TIDs are the heap tids of its entries, in index order (a posting
	// list contributes one per tid); DeadTIDs those of the entries an
	// index scan has marked dead (LP_DEAD: still there, skipped by scans).
	TIDs     []string `json:"tids"`
	DeadTIDs []string `json:"dead_tids,omitempty"`
	// Unread says why the entries were not read (an index that is not a
	// B-tree).
	Unread string `json:"unread,omitempty"`
}

// LaneRows is one lane row and its versions, first to live.
type LaneRows struct {
	Lane     int     `json:"lane"`
	Versions []Tuple `json:"versions"`
}

// TableCounters are a table's cumulative pg_stat_user_tables counters.
type TableCounters struct {
	Table      string `json:"table"`
	Inserted   int64  `json:"inserted"`
	Updated    int64  `json:"updated"`
	HotUpdated int64  `json:"hot_updated"`
	Deleted    int64  `json:"deleted"`
	Live       int64  `json:"live"`
	Dead       int64  `json:"dead"`
}

// Summary counts what the delivery left in the deliveries table.
type Summary struct {
	// HeapTuples are normal line pointers; Dead those no SELECT returns.
	HeapTuples int `json:"heap_tuples"`
	Dead       int `json:"dead"`
	// Indexes of the table, and those with at least one entry.
	Indexes            int `json:"indexes"`
	IndexesWithEntries int `json:"indexes_with_entries"`
	// IndexEntries over every index, and by the step of the version each
	// points at.
	IndexEntries int            `json:"index_entries"`
	EntriesBy    map[string]int `json:"entries_by_step"`
	// LaneVersions: versions of the written lane rows (0 without lanes).
	LaneVersions int `json:"lane_versions"`
}

// summarize fills r.Summary from the rest of r.
func (r *Report) summarize() {
	s := Summary{Indexes: len(r.Indexes), EntriesBy: map[string]int{}}
	step := map[string]string{}
	for _, t := range r.Deliveries {
		if t.State != "normal" {
			continue
		}
		s.HeapTuples++
		if !t.Live {
			s.Dead++
		}
		step[t.TID] = t.Step
	}
	for _, ix := range r.Indexes {
		if len(ix.TIDs) > 0 {
			s.IndexesWithEntries++
		}
		s.IndexEntries += len(ix.TIDs)
		for _, tid := range ix.TIDs {
			st := step[tid]
			if st == "" {
				st = "unknown"
			}
			s.EntriesBy[st]++
		}
	}
	for _, l := range r.Lanes {
		s.LaneVersions += len(l.Versions)
	}
	r.Summary = s
}

// stepOf places a 32-bit transaction id among the marks (xid8 values
// read during the run): the step whose range holds it, "" for 0 (none)
// and "before" or "after" outside the run.
func (r *Report) stepOf(xid uint32) string {
	if xid == 0 || len(r.Marks) == 0 {
		return ""
	}
	first := r.Marks[StepSetup]
	full := first&^0xffffffff | uint64(xid)
	// The run spans far fewer than 2^31 transactions: an id that reads
	// as far below the first mark wrapped into the next epoch.
	if full+(1<<31) < first {
		full += 1 << 32
	}
	switch {
	case full < first:
		return "before"
	case r.End > 0 && full >= r.End:
		return "after"
	}
	for i := len(Steps) - 1; i >= 0; i-- {
		if m, ok := r.Marks[Steps[i]]; ok && full >= m {
			return Steps[i]
		}
	}
	return "before"
}
