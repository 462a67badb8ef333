package runner

import (
	"fmt"
	"strings"
	"time"

	"github.com/berkcansavur/relaybus/bench/scenarios"
)

// The progress line's estimate of the time a run has left. It counts every
// step still scheduled: each window left (its cell's preload template,
// built once per side, the copy and settle of its database, its start,
// warm-up, window, drain and validation, with the preparation of the next
// window that its drain does not hide) and scenario 6 when it will run.
// Each step has a plan made from what it runs (planWindow, planUpgrade);
// as steps finish, the plan of those left is scaled by how long the
// finished ones took against theirs: a cell's by its own finished windows
// once one has run, the rest by the run's. The estimate therefore rises
// only when a window took longer than it was expected to, when a window
// of a slow cell raised the run's pace by which the cells not yet
// started are estimated, or when steps were added (a cell run again with
// a raised preload); a line whose estimate is above the one before says
// which (progress.line).

// The plan's figures, from the phase times of --quick runs on the
// project's 2-core machine (run.json's PhaseSeconds): only a first guess,
// which the finished windows correct.
const (
	// planStart: the window's workers start and report ready.
	planStart = 300 * time.Millisecond
	// planSetup: a database without a preload is created, set up by the
	// side's setup role, vacuumed and analyzed (Settle).
	planSetup = 1500 * time.Millisecond
	// planClone: a window's database is copied from its side's template.
	planClone = time.Second
	// planTemplate and planPreloadPerS: a preload is published (4
	// publishers in batches of 500) and settled, once per side and cell
	// in its template, at 8,000 events/s: 10,000 to 16,000 alone, as low
	// as 3,600 beside the drain of the window before it (--smoke).
	planTemplate    = 2 * time.Second
	planPreloadPerS = 8_000
	// planDrain and planDrainPerS: the drain and the validation after a
	// window, at 12,000 preloaded deliveries/s (what the window left of
	// the preload is drained, every record read): --quick's dispatch cell
	// (200,000) took 10 to 12 s, --smoke's (40,000, one dispatcher) 6 to
	// 10 s. With these the first estimate of a --quick A/A run is 13 min
	// 57 s (it ran 13 min 40 s), of a --smoke run 40 s (it ran 59 s, the
	// estimate rising after the first window and saying why).
	planDrain     = 1500 * time.Millisecond
	planDrainPerS = 12_000
	// planCrash: a database crash and its recovery, which a window that
	// crashes the server waits out (and its drain after it).
	planCrash = time.Second
	// planUpgrade and planUpgradePerS: scenario 6 (setup, preload, the
	// base's dispatch, the upgrade, the republish, the candidate's drain,
	// validation), about 10 s for 6,000 events.
	planUpgrade     = 4 * time.Second
	planUpgradePerS = 1000
)

// progressStep is one scheduled step: a window, or scenario 6.
type progressStep struct {
	cell int // the matrix's cell; upgradeCell for scenario 6
	plan time.Duration
}

// upgradeCell marks scenario 6 in progressStep.cell.
const upgradeCell = -1

// progress keeps the estimate. now is its clock (a fake one in tests).
type progress struct {
	m              *scenarios.Matrix
	warmup, window time.Duration
	noTemplates    bool
	now            func() time.Time

	// Finished steps: plan and time taken, per cell and over the run.
	plan, took       map[int]time.Duration
	planSum, tookSum time.Duration
	cur              *progressStep // the step running since curAt
	curAt            time.Time
	curExpected      time.Duration // what cur was expected to take
	last             time.Duration // the estimate of the last line, rounded
	lines            int
	first            time.Duration // the first line's estimate
	firstSchedule    string        // and the steps it covered
	startedAt        time.Time
	added            string // why steps were added since the last line
}

func newProgress(m *scenarios.Matrix, warmup, window time.Duration, noTemplates bool, now func() time.Time) *progress {
	if now == nil {
		now = time.Now
	}
	return &progress{m: m, warmup: warmup, window: window, noTemplates: noTemplates, now: now,
		plan: map[int]time.Duration{}, took: map[int]time.Duration{}}
}

// prepare is the plan of window w's preparation: a database set up
// afresh, or copied from its side's preload template, which the first
// window of each side of a preloaded cell (ABBA order: orders 1 and 2)
// builds first; without templates, every preloaded window publishes its
// own preload.
func (p *progress) prepare(w Window) time.Duration {
	c := &p.m.Cells[w.Cell]
	preload := time.Duration(float64(c.Preload) / planPreloadPerS * float64(time.Second))
	switch {
	case c.Preload == 0:
		return planSetup
	case p.noTemplates:
		return planTemplate + preload
	case w.Order <= 2:
		return planTemplate + preload + planClone
	}
	return planClone
}

// drain is the plan of window w's drain and validation.
func (p *progress) drain(w Window) time.Duration {
	c := &p.m.Cells[w.Cell]
	d := planDrain + time.Duration(float64(c.Preload)/planDrainPerS*float64(time.Second))
	return d + time.Duration(len(c.CrashDBAt))*planCrash
}

// planWindow is the plan of window w from its progress line to the next
// one: its start, warm-up, window, drain and validation, and the part of
// the next window's preparation (next: nil when w is the last) that runs
// beyond w's drain (the runner prepares the next window during it).
func (p *progress) planWindow(w Window, next *Window) time.Duration {
	d := planStart + p.warmup + p.m.Cells[w.Cell].WindowIn(p.window) + p.drain(w)
	if next != nil {
		d += max(0, p.prepare(*next)-p.drain(w))
	}
	return d
}

// planUpgrade is the plan of scenario 6.
func (p *progress) planUpgrade() time.Duration {
	u := p.m.Upgrade
	return planUpgrade + time.Duration(float64(u.KeyedEvents+u.UnkeyedEvents)/planUpgradePerS*float64(time.Second))
}

// schedule is the steps left: the windows of pending, in order (the first
// is the one starting), then scenario 6 when upgrade.
func (p *progress) schedule(pending []Window, upgrade bool) []progressStep {
	var out []progressStep
	for i, w := range pending {
		var next *Window
		if i+1 < len(pending) {
			next = &pending[i+1]
		}
		out = append(out, progressStep{cell: w.Cell, plan: p.planWindow(w, next)})
	}
	if upgrade && p.m.Upgrade != nil {
		out = append(out, progressStep{cell: upgradeCell, plan: p.planUpgrade()})
	}
	return out
}

// expected is what step s is expected to take: its plan, scaled by its
// cell's finished steps against their plans once one has finished, else
// by the run's.
func (p *progress) expected(s progressStep) time.Duration {
	plan, took := p.plan[s.cell], p.took[s.cell]
	if plan == 0 {
		plan, took = p.planSum, p.tookSum
	}
	if plan == 0 {
		return s.plan
	}
	return time.Duration(float64(s.plan) * float64(took) / float64(plan))
}

// rerun records why the schedule grew (a cell whose preload ran out runs
// again), for the next line.
func (p *progress) rerun(why string) { p.added = why }

// line ends the running step, starts the first of left (the steps
// scheduled from now on, as schedule lists them) and returns the
// estimate for the progress line: "~1m4s left", "~13m2s left: 76
// window(s) and scenario 6" on the first line, and ", up from ~42s:
// why" when it is above the last line's. Only three things raise it: the
// step that ended took longer than it was expected to (its cell's other
// windows, and the steps of cells not yet started, are then expected to
// take longer too), a step of a cell slower than the rest raised the
// run's pace by which the cells not yet started are estimated, or steps
// were added (rerun); the line says which.
func (p *progress) line(left []progressStep) string {
	now := p.now()
	var tookCur time.Duration
	paceBefore := p.pace()
	if p.cur != nil {
		tookCur = now.Sub(p.curAt)
		p.plan[p.cur.cell] += p.cur.plan
		p.took[p.cur.cell] += tookCur
		p.planSum += p.cur.plan
		p.tookSum += tookCur
	}
	var est time.Duration
	for _, s := range left {
		est += p.expected(s)
	}
	est = est.Round(time.Second)
	s := "~" + est.String() + " left"
	switch {
	case p.lines == 0:
		p.startedAt, p.first, p.firstSchedule = now, est, describeSchedule(left)
		s += ": " + p.firstSchedule
	case est > p.last:
		var why []string
		if p.added != "" {
			why = append(why, p.added)
		}
		if tookCur > p.curExpected {
			why = append(why, fmt.Sprintf("the last window took %s, not the ~%s expected, and the steps after it are estimated from it",
				tookCur.Round(100*time.Millisecond), p.curExpected.Round(100*time.Millisecond)))
		} else if pace := p.pace(); pace > paceBefore {
			why = append(why, fmt.Sprintf("the windows so far took %.2fx their plan, up from %.2fx, and the cells not yet started are estimated by it",
				pace, paceBefore))
		}
		if len(why) == 0 {
			// Not reached: the estimate of the steps left only grows by
			// the reasons above. Said rather than hidden if it does.
			why = append(why, "the steps left were estimated anew")
		}
		s += fmt.Sprintf(", up from ~%s: %s", p.last, strings.Join(why, "; "))
	}
	p.cur, p.curAt, p.curExpected = nil, now, 0
	if len(left) > 0 {
		p.cur = &left[0]
		p.curExpected = p.expected(left[0])
	}
	p.last, p.added = est, ""
	p.lines++
	return s
}

// pace is the finished steps' time over their plan (1 before any).
func (p *progress) pace() float64 {
	if p.planSum == 0 {
		return 1
	}
	return float64(p.tookSum) / float64(p.planSum)
}

// done ends the last step and says how long the run's steps took against
// the first line's estimate.
func (p *progress) done() string {
	p.line(nil)
	return fmt.Sprintf("%s took %s; the first estimate was ~%s", p.firstSchedule,
		p.now().Sub(p.startedAt).Round(time.Second), p.first)
}

// describeSchedule: "76 windows and scenario 6", "4 windows".
func describeSchedule(left []progressStep) string {
	windows, upgrade := 0, false
	for _, s := range left {
		if s.cell == upgradeCell {
			upgrade = true
		} else {
			windows++
		}
	}
	s := fmt.Sprintf("%d window(s)", windows)
	if upgrade {
		s += " and scenario 6"
	}
	return s
}

// sameCode reports whether two sides run the same code, so that scenario
// 6 has nothing to upgrade (Step.Upgrade skips it).
func sameCode(base, cand *Side) bool { return base.Code != "" && base.Code == cand.Code }
