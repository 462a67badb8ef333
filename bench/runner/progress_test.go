package runner

import (
	"context"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berkcansavur/relaybus/bench/result"
	"github.com/berkcansavur/relaybus/bench/scenarios"
)

// fakeClock is the estimate's clock in these tests: it moves only when
// told, so no test here waits or depends on the machine's speed.
type fakeClock struct{ t time.Time }

func newFakeClock() *fakeClock               { return &fakeClock{t: time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)} }
func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

// quickProgress is the estimate of a --quick run of two different refs:
// every window of the matrix, then scenario 6.
func quickProgress(t *testing.T) (*progress, *fakeClock, []Window) {
	t.Helper()
	m := scenarios.Quick()
	windows, err := Plan(&m, "test")
	if err != nil {
		t.Fatal(err)
	}
	clock := newFakeClock()
	return newProgress(&m, m.Warmup, m.Window, false, clock.now), clock, windows
}

var leftPattern = regexp.MustCompile(`^~(\S+) left`)

// estimateOf reads the estimate of a progress line.
func estimateOf(t *testing.T, line string) time.Duration {
	t.Helper()
	m := leftPattern.FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("no estimate in %q", line)
	}
	d, err := time.ParseDuration(m[1])
	if err != nil {
		t.Fatalf("estimate of %q: %v", line, err)
	}
	return d
}

// TestProgressCoversTheSchedule: the first estimate is the plan of every
// window of every cell and of scenario 6, and says so; the plan counts
// what makes windows differ: the preload templates (built by the first
// window of each side of a preloaded cell, during the window before it),
// the drain of what a window leaves of its preload, and the crashes of
// the crash cell. The old estimate was a fixed guess per window, without
// scenario 6.
func TestProgressCoversTheSchedule(t *testing.T) {
	t.Parallel()
	p, _, windows := quickProgress(t)
	steps := p.schedule(windows, true)
	if len(steps) != len(windows)+1 || steps[len(steps)-1].cell != upgradeCell {
		t.Fatalf("%d steps for %d windows and the upgrade", len(steps), len(windows))
	}
	var sum time.Duration
	for i, s := range steps {
		sum += s.plan
		if s.cell != upgradeCell && s.plan < p.warmup+p.window+planStart {
			t.Errorf("window %d planned %s: less than its warm-up and window", i, s.plan)
		}
	}
	line := p.line(steps)
	if got := estimateOf(t, line); got != sum.Round(time.Second) {
		t.Errorf("first estimate %s; want the plan of every step, %s", got, sum.Round(time.Second))
	}
	if want := fmt.Sprintf(": %d window(s) and scenario 6", len(windows)); !strings.Contains(line, want) {
		t.Errorf("first line %q does not say it covers %q", line, want)
	}
	if d := sum - p.schedule(windows, false)[len(windows)-1].plan; d <= 0 {
		t.Errorf("scenario 6 adds nothing to the estimate")
	}
	if p.planUpgrade() < 8*time.Second {
		t.Errorf("scenario 6 of --quick (6,000 events, about 10 s measured) planned %s", p.planUpgrade())
	}

	// Per window of a cell: the ones that build templates, the crash
	// cell against the SIGKILL cell (same preload and workers).
	byCell := map[string][]time.Duration{}
	for i, w := range windows {
		name := p.m.Cells[w.Cell].Name
		byCell[name] = append(byCell[name], steps[i].plan)
	}
	dispatch := byCell[p.m.Cells[2].Name]
	if dispatch[0] <= dispatch[2] {
		t.Errorf("dispatch cell: its first window (which runs while the candidate's template of 200,000 events is built) planned %s, its third %s",
			dispatch[0], dispatch[2])
	}
	if dispatch[2] < p.warmup+p.window+10*time.Second {
		t.Errorf("dispatch cell: a window that drains what is left of 200,000 events planned %s", dispatch[2])
	}
	publish := byCell[p.m.Cells[1].Name]
	if last := publish[len(publish)-1]; last <= publish[0] {
		t.Errorf("the window before the dispatch cell (its base template is built then) planned %s, not more than %s", last, publish[0])
	}
	kill, crash := byCell[p.m.Cells[6].Name], byCell[p.m.Cells[7].Name]
	if !strings.Contains(p.m.Cells[7].Name, "crash") || crash[2] <= kill[2] {
		t.Errorf("a window of %q planned %s, of %q %s: the crashes take time", p.m.Cells[7].Name, crash[2], p.m.Cells[6].Name, kill[2])
	}
}

// TestProgressAtItsPlan: a run whose steps take what they were planned
// to take sees the estimate fall by each step's time, line after line,
// to the upgrade's plan at its line, and never rise.
func TestProgressAtItsPlan(t *testing.T) {
	t.Parallel()
	p, clock, windows := quickProgress(t)
	steps := p.schedule(windows, true)
	prev := estimateOf(t, p.line(steps))
	for i := 1; i < len(steps); i++ {
		clock.advance(steps[i-1].plan)
		line := p.line(p.schedule(windows[min(i, len(windows)):], true))
		got := estimateOf(t, line)
		if strings.Contains(line, "up from") || got > prev {
			t.Fatalf("step %d: %q after %q", i, line, prev)
		}
		if want := prev - steps[i-1].plan; got-want > time.Second || want-got > time.Second {
			t.Errorf("step %d: estimate %s; want %s (the last, %s, minus the step that ended, %s)", i, got, want, prev, steps[i-1].plan)
		}
		prev = got
	}
	if prev.Round(time.Second) != p.planUpgrade().Round(time.Second) {
		t.Errorf("at scenario 6: %s left; want its plan %s", prev, p.planUpgrade())
	}
	clock.advance(p.planUpgrade())
	if done := p.done(); !strings.Contains(done, fmt.Sprintf("%d window(s) and scenario 6 took", len(windows))) {
		t.Errorf("done: %q", done)
	}
}

// TestProgressRisesOnlyWithAReason: over runs whose steps take from half
// to three times their plan, in a random (seeded) order, a line whose
// estimate is above the last one's says "up from" that estimate and why,
// and a line that says "up from" is above it. The estimate does rise in
// such runs (otherwise the test would check nothing).
func TestProgressRisesOnlyWithAReason(t *testing.T) {
	t.Parallel()
	rises := 0
	for seed := range uint64(20) {
		p, clock, windows := quickProgress(t)
		rng := rand.New(rand.NewPCG(seed, 30))
		prev := estimateOf(t, p.line(p.schedule(windows, true)))
		for i := 1; i <= len(windows); i++ {
			pace := 0.5 + 2.5*rng.Float64()
			if rng.IntN(4) > 0 {
				pace = 0.9 + 0.3*rng.Float64() // mostly near the plan
			}
			clock.advance(time.Duration(pace * float64(p.schedule(windows[i-1:], true)[0].plan)))
			line := p.line(p.schedule(windows[i:], true))
			got := estimateOf(t, line)
			up := strings.Contains(line, fmt.Sprintf(", up from ~%s: ", prev))
			if up != (got > prev) {
				t.Fatalf("seed %d, step %d: %q after ~%s", seed, i, line, prev)
			}
			if up {
				rises++
				if strings.Contains(line, "estimated anew") {
					t.Errorf("seed %d, step %d: a rise with no reason found: %q", seed, i, line)
				}
			}
			prev = got
		}
	}
	if rises == 0 {
		t.Fatal("no rise in 20 runs of mixed paces: the test checks nothing")
	}
}

// TestProgressSaysWhyItRose: the three reasons, each where it applies.
func TestProgressSaysWhyItRose(t *testing.T) {
	t.Parallel()
	t.Run("a step slower than expected", func(t *testing.T) {
		t.Parallel()
		p, clock, windows := quickProgress(t)
		steps := p.schedule(windows, true)
		prev := estimateOf(t, p.line(steps))
		clock.advance(3 * steps[0].plan)
		line := p.line(p.schedule(windows[1:], true))
		want := fmt.Sprintf(", up from ~%s: the last window took %s, not the ~%s expected", prev,
			(3 * steps[0].plan).Round(100*time.Millisecond), steps[0].plan.Round(100*time.Millisecond))
		if !strings.Contains(line, want) {
			t.Errorf("%q; want %q", line, want)
		}
	})
	t.Run("the run's pace", func(t *testing.T) {
		t.Parallel()
		// Cell 1's windows at their plan, cell 2's first at 3 times it,
		// its second at 2.5 times: faster than the 3 times expected of
		// it, but it raises the pace of the run by which the cells not
		// yet started are estimated.
		p, clock, windows := quickProgress(t)
		p.line(p.schedule(windows, true))
		i := 0
		for ; windows[i].Cell == 0; i++ {
			clock.advance(p.schedule(windows[i:], true)[0].plan)
			p.line(p.schedule(windows[i+1:], true))
		}
		clock.advance(3 * p.schedule(windows[i:], true)[0].plan)
		prev := estimateOf(t, p.line(p.schedule(windows[i+1:], true)))
		clock.advance(5 * p.schedule(windows[i+1:], true)[0].plan / 2)
		line := p.line(p.schedule(windows[i+2:], true))
		if got := estimateOf(t, line); got <= prev || !strings.Contains(line, "the windows so far took") ||
			strings.Contains(line, "the last window took") {
			t.Errorf("%q after ~%s; want a rise by the run's pace", line, prev)
		}
	})
	t.Run("steps added", func(t *testing.T) {
		t.Parallel()
		// Cell 3's preload ran out in its first window: its windows
		// run again, with twice the preload.
		p, clock, windows := quickProgress(t)
		i := 0
		for ; windows[i].Cell < 2; i++ {
		}
		p.line(p.schedule(windows[i:], true))
		clock.advance(p.schedule(windows[i:], true)[0].plan)
		p.m.Cells[2].Preload *= 2
		p.rerun("cell 3's preload ran out: its 8 windows run again with a preload of 400000")
		line := p.line(p.schedule(windows[i:], true))
		if !strings.Contains(line, "up from") || !strings.Contains(line, "cell 3's preload ran out") {
			t.Errorf("%q; want a rise that names the rerun", line)
		}
	})
}

// TestRunnerProgressLines: the runner's lines carry the estimate, from
// the first window (which says what it covers) to the run's end (which
// says how long it took against the first estimate).
func TestRunnerProgressLines(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster()
	step := &Step{Window: 100 * time.Millisecond, DrainTimeout: 10 * time.Second, Server: fc, Launch: fc.launch}
	m := scenarios.Matrix{Mode: result.ModeCustom, Rounds: 2, Window: scenarios.MinWindow, Cells: []scenarios.Cell{*dispatchTestCell(300, 1)}}
	var mu sync.Mutex
	var lines []string
	logf := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		lines = append(lines, fmt.Sprintf(format, args...))
	}
	r, err := New(m, &Side{Name: result.SideBase, Bin: "b"}, &Side{Name: result.SideCandidate, Bin: "c"}, step, t.TempDir(), logf)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Run(context.Background(), result.Run{}); err != nil {
		t.Fatal(err)
	}
	var windows []string
	for _, l := range lines {
		if strings.HasPrefix(l, "cell 1/1") {
			windows = append(windows, l)
		}
	}
	if len(windows) != 4 || !strings.Contains(windows[0], " left: 4 window(s))") {
		t.Fatalf("window lines %q", windows)
	}
	for _, l := range windows {
		if !regexp.MustCompile(`\(~\S+ left`).MatchString(l) {
			t.Errorf("no estimate in %q", l)
		}
	}
	if last := lines[len(lines)-1]; !strings.HasPrefix(last, "4 window(s) took ") || !strings.Contains(last, "the first estimate was ~") {
		t.Errorf("last line %q", last)
	}
}
