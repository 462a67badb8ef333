package runner

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/berkcansavur/relaybus/bench/record"
	"github.com/berkcansavur/relaybus/bench/result"
	"github.com/berkcansavur/relaybus/bench/validate"
)

// TestBloatSteps: the steps of a 10 s window in 4 s steps are 4 and 6 s
// long (the last takes the remainder, as the throughput series does: a
// window is never exactly its length, and a step of a few milliseconds
// would be noise); each counts the ok,
// non-poison handles stamped inside it over its own length, and the
// commit-to-handler latency of the events committed in it, a delivery
// not handled inside the window counting to the window's end.
func TestBloatSteps(t *testing.T) {
	const s = int64(time.Second)
	win := span{100 * s, 110 * s}
	at := func(sec float64) int64 { return win.start + int64(sec*float64(s)) }
	in := &validate.Input{Handlers: []string{"h"}, Files: []validate.File{
		{Name: "pub-0", Published: []record.Published{
			{EventID: "a", CommitNs: at(1)}, // handled at 1.01 s: 10 ms
			{EventID: "b", CommitNs: at(2)}, // handled at 2.03 s: 30 ms
			{EventID: "c", CommitNs: at(9)}, // never handled in the window: 1000 ms
			{EventID: "p", CommitNs: at(9)}, // poison: not counted
			{EventID: "u", CommitNs: at(5), Uncertain: true},
			{EventID: "z", CommitNs: at(-1)}, // before the window
		}},
		{Name: "disp-0", Handled: []record.Handled{
			{EventID: "a", Handler: "h", HandleNs: at(1.01), OK: true},
			{EventID: "b", Handler: "h", HandleNs: at(2.02)}, // failed attempt
			{EventID: "b", Handler: "h", HandleNs: at(2.03), OK: true},
			{EventID: "z", Handler: "h", HandleNs: at(8), OK: true},
			{EventID: "p", Handler: "h", HandleNs: at(9.5), OK: true},
			{EventID: "c", Handler: "h", HandleNs: at(10.5), OK: true}, // in the drain
		}},
	}}
	in.Expect.PoisonEventIDs = map[string]bool{"p": true}
	steps := bloatSteps(in, win, 4*time.Second, true)
	if len(steps) != 2 {
		t.Fatalf("%d steps, want 2: %+v", len(steps), steps)
	}
	wantRate := []float64{2.0 / 4, 1.0 / 6}
	wantEnd := []int64{4000, 10000}
	for i, st := range steps {
		if math.Abs(st.DeliveriesPerS-wantRate[i]) > 1e-9 || st.EndMs != wantEnd[i] {
			t.Errorf("step %d: %+v, want %.2f/s ending at %d ms", i, st, wantRate[i], wantEnd[i])
		}
	}
	if st := steps[0]; st.E2EP50Ms == nil || math.Abs(*st.E2EP50Ms-20) > 0.01 || *st.E2EP99Ms < 29 || *st.E2EP99Ms > 30.01 {
		t.Errorf("step 0 latency %v %v, want p50 20 ms, p99 about 30", deref(st.E2EP50Ms), deref(st.E2EP99Ms))
	}
	if st := steps[1]; st.E2EP50Ms == nil || math.Abs(*st.E2EP50Ms-1000) > 0.01 {
		t.Errorf("step 1 latency %v, want 1000 ms (censored at the window's end)", deref(st.E2EP50Ms))
	}
	// A step in which nothing was committed has no latency.
	if st := bloatSteps(in, win, 2*time.Second, true); st[2].E2EP50Ms != nil {
		t.Errorf("step 2 of 2 s committed nothing but has latency %v", *st[2].E2EP50Ms)
	}
	if st := bloatSteps(in, win, 4*time.Second, false); st[0].E2EP50Ms != nil {
		t.Error("latency without publishers and dispatchers")
	}
	// A window shorter than a step is one step.
	if st := bloatSteps(in, win, time.Minute, false); len(st) != 1 || math.Abs(st[0].DeliveriesPerS-0.3) > 1e-9 {
		t.Errorf("one step: %+v, want 3 handles over 10 s", st)
	}
}

func deref(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}

// TestTableSampler: a sample at the start, one per step, one at the
// stop, stamped from t0 by the sampler's clock; a failed read is kept
// as the first error and its sample left out.
func TestTableSampler(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var mu sync.Mutex
	now := t0.Add(-5 * time.Millisecond)
	clock := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return now
	}
	advance := func(d time.Duration) {
		mu.Lock()
		now = now.Add(d)
		mu.Unlock()
	}
	reads := 0
	read := func(context.Context) (result.TablePoint, error) {
		mu.Lock()
		defer mu.Unlock()
		reads++
		if reads == 2 {
			return result.TablePoint{}, errors.New("boom")
		}
		return result.TablePoint{Tables: map[string]result.TableSize{"relaybus_deliveries": {Dead: int64(reads)}}}, nil
	}
	s := startSampler(context.Background(), read, 5*time.Millisecond, t0, clock)
	for {
		mu.Lock()
		n := reads
		mu.Unlock()
		if n >= 4 {
			break
		}
		advance(time.Second)
		time.Sleep(2 * time.Millisecond)
	}
	pts, err := s.stop(context.Background())
	if err == nil || err.Error() != "boom" {
		t.Errorf("error %v, want boom", err)
	}
	if len(pts) < 3 {
		t.Fatalf("%d samples, want the start's, at least one more, the stop's", len(pts))
	}
	if pts[0].AtMs != -5 || pts[0].Tables["relaybus_deliveries"].Dead != 1 {
		t.Errorf("first sample %+v, want the start's at -5 ms", pts[0])
	}
	for i := 1; i < len(pts); i++ {
		if pts[i].AtMs < pts[i-1].AtMs {
			t.Errorf("samples out of order: %d then %d", pts[i-1].AtMs, pts[i].AtMs)
		}
		if pts[i].Tables["relaybus_deliveries"].Dead == 2 {
			t.Error("the failed read's sample was kept")
		}
	}
}

// TestBloatMetrics: growth and the most dead tuples from the table
// samples, the last step over the first; none without their inputs.
func TestBloatMetrics(t *testing.T) {
	b := &result.Bloat{
		Tables: []result.TablePoint{
			{Tables: map[string]result.TableSize{"d": {HeapBytes: 100, IndexBytes: 50, Dead: 5}, "l": {HeapBytes: 10, Dead: 1}}},
			{Tables: map[string]result.TableSize{"d": {HeapBytes: 400, IndexBytes: 80, ToastBytes: 8, Dead: 90}, "l": {HeapBytes: 10}}},
			{Tables: map[string]result.TableSize{"d": {HeapBytes: 500, IndexBytes: 90, Dead: 7}, "l": {HeapBytes: 20, Dead: 3}}},
		},
		Steps: []result.Step{{DeliveriesPerS: 1000}, {DeliveriesPerS: 900}, {DeliveriesPerS: 800}},
	}
	m := b.Metrics()
	want := map[string]float64{result.MetricTableBytesGrowth: 610 - 160, result.MetricDeadTuplesMax: 90, result.MetricDeliveriesLastFirst: 0.8}
	if _, ok := m[result.MetricE2EP99LastFirst]; ok {
		t.Error("e2e p99 last/first without latencies")
	}
	for k, v := range want {
		if math.Abs(m[k]-v) > 1e-9 {
			t.Errorf("%s = %v, want %v", k, m[k], v)
		}
	}
	if names := b.TableNames(); len(names) != 2 || names[0] != "d" || names[1] != "l" {
		t.Errorf("table names %v", names)
	}
	if m := (&result.Bloat{Steps: []result.Step{{DeliveriesPerS: 0}, {DeliveriesPerS: 5}}}).Metrics(); len(m) != 0 {
		t.Errorf("metrics %v from no table samples and a first step of 0", m)
	}
}

// TestEdgeSteps: the first and last minute of a window, at most a
// quarter of its steps; and their means' ratios.
func TestEdgeSteps(t *testing.T) {
	for _, tc := range []struct{ n, stepMs, want int }{
		{12, 5000, 3},   // held: 60 s in 5 s steps, its first and last 15 s
		{60, 10000, 6},  // soak: 10 minutes in 10 s steps, a minute
		{3, 1000, 1},    // too few for a quarter: one
		{400, 250, 100}, // a minute is 240 steps of 250 ms, a quarter of them 100
	} {
		if got := result.EdgeSteps(tc.n, tc.stepMs); got != tc.want {
			t.Errorf("EdgeSteps(%d, %d) = %d, want %d", tc.n, tc.stepMs, got, tc.want)
		}
	}
	p := func(v float64) *float64 { return &v }
	var steps []result.Step
	for i := range 8 { // 8 steps of 10 s: 2 at each edge
		steps = append(steps, result.Step{DeliveriesPerS: float64(100 - 10*i), E2EP99Ms: p(float64(10 * (i + 1)))})
	}
	m := (&result.Bloat{StepMs: 10000, Steps: steps}).Metrics()
	if got, want := m[result.MetricDeliveriesLastFirst], (30.0+40)/(100+90); math.Abs(got-want) > 1e-9 {
		t.Errorf("deliveries last/first %v, want %v", got, want)
	}
	if got, want := m[result.MetricE2EP99LastFirst], (70.0+80)/(10+20); math.Abs(got-want) > 1e-9 {
		t.Errorf("e2e p99 last/first %v, want %v", got, want)
	}
}
