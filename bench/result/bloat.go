package result

import "slices"

// The bloat cells' metrics (scenarios 8 and 9; bench/scenarios/bloat.go).
const (
	// MetricTableBytesGrowth is how much the heap and indexes of every
	// table of the side grew over the window, in bytes (TOAST included),
	// from the first table sample to the last.
	MetricTableBytesGrowth = "table_bytes_growth"
	// MetricDeadTuplesMax is the most dead tuples the side's tables held
	// together at any table sample of the window (n_dead_tup).
	MetricDeadTuplesMax = "dead_tuples_max"
	// MetricDeliveriesLastFirst is the deliveries per second of the
	// window's last minute over its first (Bloat.Steps, EdgeSteps): 1 when
	// the rate holds, below 1 when the queue slows down as it runs.
	MetricDeliveriesLastFirst = "deliveries_last_first"
	// MetricE2EP99LastFirst is the same of the steps' e2e p99 (their
	// mean over the last minute over that of the first): above 1 when the
	// latency grows as the window runs.
	MetricE2EP99LastFirst = "e2e_p99_last_first"
)

// EdgeSteps is how many steps of n, StepMs long each, the first and
// last "minute" of MetricDeliveriesLastFirst are: a minute's worth, at
// most a quarter of the steps (a 60 s window in 5 s steps compares its
// first and last 15 s), at least one.
func EdgeSteps(n, stepMs int) int {
	k := n / 4
	if stepMs > 0 {
		k = min(k, 60_000/stepMs)
	}
	return max(1, k)
}

// Bloat is what one window of a bloat cell sampled.
type Bloat struct {
	// Hold is the snapshot held through the window (scenarios.Hold*; ""
	// for none). HoldXmin: the holding session had a backend_xmin (it
	// held the database's xmin horizon) at the window's start and again
	// at its end; HoldXminAgeEnd is that xmin's age (in transactions)
	// then. HoldError says why the hold did not hold, if it did not.
	Hold           string `json:",omitempty"`
	HoldXmin       bool   `json:",omitempty"`
	HoldXminAgeEnd int64  `json:",omitempty"`
	HoldError      string `json:",omitempty"`
	// StepMs is the length of a step: the sampling interval.
	StepMs int
	// Steps are the rate and latency of each step of the window, from
	// the records.
	Steps []Step
	// Tables are the table samples: at the window's start, every StepMs,
	// and at its end.
	Tables []TablePoint
}

// Step is one step of a window.
type Step struct {
	// EndMs is the step's end, in ms from the window's start.
	EndMs int64
	// DeliveriesPerS are the ok handles of the step over its length.
	DeliveriesPerS float64
	// E2EP50Ms and E2EP99Ms are the commit-to-handler latencies of the
	// events committed in the step (censored at the window's end), nil
	// where the cell publishes nothing in the window or the step
	// committed nothing.
	E2EP50Ms *float64 `json:",omitempty"`
	E2EP99Ms *float64 `json:",omitempty"`
}

// TablePoint is one sample of the side's tables.
type TablePoint struct {
	// AtMs is when it was read, in ms from the window's start (the
	// start's own sample is read just before, and may be below 0).
	AtMs int64
	// OldestXminAge is the age of the oldest backend_xmin of the window
	// database's sessions (0: none held one).
	OldestXminAge int64
	Tables        map[string]TableSize
}

// TableSize is one table at one sample.
type TableSize struct {
	HeapBytes, IndexBytes, ToastBytes int64
	// Live and Dead are n_live_tup and n_dead_tup (cumulative statistics:
	// about a second behind); Vacuums counts its vacuums and autovacuums.
	Live, Dead, Vacuums int64
}

// Bytes is the table's heap, indexes and TOAST.
func (t TableSize) Bytes() int64 { return t.HeapBytes + t.IndexBytes + t.ToastBytes }

// TotalBytes and TotalDead sum a sample's tables.
func (p TablePoint) TotalBytes() int64 {
	var n int64
	for _, t := range p.Tables {
		n += t.Bytes()
	}
	return n
}

// TotalDead is the dead tuples of every table of the sample.
func (p TablePoint) TotalDead() int64 {
	var n int64
	for _, t := range p.Tables {
		n += t.Dead
	}
	return n
}

// TableNames are the tables any sample of b has, sorted.
func (b *Bloat) TableNames() []string {
	seen := map[string]bool{}
	for _, p := range b.Tables {
		for n := range p.Tables {
			seen[n] = true
		}
	}
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// Metrics are the bloat metrics of b: table growth and the most dead
// tuples (with at least one table sample), and the rate and e2e p99 of
// the last minute over the first's (EdgeSteps; with two steps and a
// first above 0).
func (b *Bloat) Metrics() map[string]float64 {
	m := map[string]float64{}
	if n := len(b.Tables); n > 0 {
		m[MetricTableBytesGrowth] = float64(b.Tables[n-1].TotalBytes() - b.Tables[0].TotalBytes())
		most := int64(0)
		for _, p := range b.Tables {
			most = max(most, p.TotalDead())
		}
		m[MetricDeadTuplesMax] = float64(most)
	}
	if n := len(b.Steps); n >= 2 {
		k := EdgeSteps(n, b.StepMs)
		mean := func(steps []Step, f func(Step) (float64, bool)) (float64, bool) {
			sum, c := 0.0, 0
			for _, s := range steps {
				if v, ok := f(s); ok {
					sum, c = sum+v, c+1
				}
			}
			return sum / float64(max(c, 1)), c > 0
		}
		ratio := func(name string, f func(Step) (float64, bool)) {
			first, ok1 := mean(b.Steps[:k], f)
			last, ok2 := mean(b.Steps[n-k:], f)
			if ok1 && ok2 && first > 0 {
				m[name] = last / first
			}
		}
		ratio(MetricDeliveriesLastFirst, func(s Step) (float64, bool) { return s.DeliveriesPerS, true })
		ratio(MetricE2EP99LastFirst, func(s Step) (float64, bool) {
			if s.E2EP99Ms == nil {
				return 0, false
			}
			return *s.E2EP99Ms, true
		})
	}
	return m
}
