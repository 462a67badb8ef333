package runner

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berkcansavur/relaybus/bench/result"
	"github.com/berkcansavur/relaybus/bench/scenarios"
)

// fakeBloatServer is the fake cluster with a hold and table samples: a
// table whose dead tuples grow by one per sample.
type fakeBloatServer struct {
	*fakeCluster
	mu        sync.Mutex
	samples   int
	holds     []*fakeHeld
	loseAtEnd bool // the hold's xmin is gone by the window's end
}

type fakeHeld struct {
	s        *fakeBloatServer
	kind     string
	checks   int
	released int
}

func (s *fakeBloatServer) Hold(_ context.Context, _, kind string, d time.Duration) (Held, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d <= 0 {
		panic("no hold duration")
	}
	h := &fakeHeld{s: s, kind: kind}
	s.holds = append(s.holds, h)
	return h, nil
}

func (h *fakeHeld) Check(context.Context) (int64, bool, error) {
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	h.checks++
	if h.s.loseAtEnd && h.checks > 1 {
		return 0, false, nil
	}
	return int64(100 * h.checks), true, nil
}

func (h *fakeHeld) Release(context.Context) error {
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	h.released++
	return nil
}

func (s *fakeBloatServer) Tables(context.Context, string) (result.TablePoint, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.samples++
	return result.TablePoint{Tables: map[string]result.TableSize{"relaybus_deliveries": {HeapBytes: int64(8192 * s.samples), Dead: int64(s.samples)}}}, nil
}

func heldTestCell(hold string) *scenarios.Cell {
	c := dispatchTestCell(2000, 1)
	c.Scenario, c.Hold, c.SampleEvery = scenarios.HeldSnapshot, hold, 100*time.Millisecond
	return c
}

// TestMeasureHeldWindow: a held cell's window opens the hold, checks it
// at the start and the end, releases it once, samples the tables at
// the start, every step and the end, and adds the steps and the bloat
// metrics; a VALID window.
func TestMeasureHeldWindow(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster()
	fc.handleEvery = time.Millisecond
	bs := &fakeBloatServer{fakeCluster: fc}
	c := heldTestCell(scenarios.HoldRepeatableRead)
	c.Window = 500 * time.Millisecond // the cell's own window, not the step's 300 ms
	s, _ := measure(t, fc, c, func(s *Step) { s.Server = bs })
	if !s.IsValid() {
		t.Fatalf("INVALID: %q %v", s.Error, s.Validation)
	}
	b := s.Bloat
	if b == nil {
		t.Fatal("no bloat data")
	}
	if len(bs.holds) != 1 || bs.holds[0].kind != scenarios.HoldRepeatableRead || bs.holds[0].checks != 2 || bs.holds[0].released != 1 {
		t.Errorf("holds %+v, want one repeatable-read hold checked twice and released once", bs.holds)
	}
	if !b.HoldXmin || b.HoldXminAgeEnd != 200 || b.Hold != scenarios.HoldRepeatableRead || b.StepMs != 100 {
		t.Errorf("bloat %+v", b)
	}
	if len(b.Steps) != 5 {
		t.Errorf("%d steps, want 5 of 100 ms in the cell's 500 ms window", len(b.Steps))
	}
	if n := len(b.Tables); n < 4 || b.Tables[0].AtMs > 0 || b.Tables[n-1].AtMs < 500 {
		t.Errorf("table samples %+v, want the start's, one per step, the end's", b.Tables)
	}
	if s.Metrics[result.MetricDeadTuplesMax] != float64(b.Tables[len(b.Tables)-1].TotalDead()) {
		t.Errorf("dead tuples max %v", s.Metrics[result.MetricDeadTuplesMax])
	}
	if _, ok := s.Metrics[result.MetricTableBytesGrowth]; !ok {
		t.Error("no table growth")
	}
}

// TestMeasureHeldWindowFailures: a hold whose xmin is gone by the end,
// and a server that cannot hold, fail the window with the reason.
func TestMeasureHeldWindowFailures(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster()
	bs := &fakeBloatServer{fakeCluster: fc, loseAtEnd: true}
	s, _ := measure(t, fc, heldTestCell(scenarios.HoldLongQuery), func(s *Step) { s.Server = bs })
	if s.IsValid() || !strings.Contains(s.Error, "no backend_xmin at the window's end") {
		t.Errorf("lost hold: error %q", s.Error)
	}
	if len(bs.holds) != 1 || bs.holds[0].released != 1 {
		t.Errorf("the lost hold was not released once: %+v", bs.holds)
	}
	s, _ = measure(t, newFakeCluster(), heldTestCell(scenarios.HoldRepeatableRead), nil)
	if s.IsValid() || !strings.Contains(s.Error, "not a BloatServer") {
		t.Errorf("no BloatServer: error %q", s.Error)
	}
}
