// Package runner runs a comparison's windows: the planner (Plan) orders
// them ABBA, cell by cell, and the measurement step (Step) runs one
// window on a fresh database: setup, preload, warm-up, the measured
// window with its fault plan, the drain, the records and their
// validation, and the window's metrics. Runner ties the two together
// and returns the run (bench/result) that the report renders.
package runner

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/berkcansavur/relaybus/bench/peer"
	"github.com/berkcansavur/relaybus/bench/result"
	"github.com/berkcansavur/relaybus/bench/scenarios"
	"github.com/berkcansavur/relaybus/bench/validate"
)

// Side is one side of the comparison as the runner drives it.
type Side struct {
	Name string // result.SideBase or result.SideCandidate
	Bin  string // the side's bench binary (its worker)
	// ExtraCostPerDeliveryUs is planted on this side's dispatchers (the
	// harness's self-test: it must show up as a regression).
	ExtraCostPerDeliveryUs int
	// Code names the side's code (its commit, "+dirty" for a changed
	// working tree): two sides with the same Code have nothing to
	// upgrade (scenario 6). Empty: unknown, taken as different.
	Code string
	// NoKeyOrder: the side's workers keep no per-key order (their hello
	// lists protocol.CapabilityNoKeyOrder): its windows are validated
	// without the order checks (validate.Expect.NoKeyOrder).
	NoKeyOrder bool
	// CompletionRecords: the side's dispatchers write a completion line
	// for every completion the store confirmed (their hello lists
	// protocol.CapabilityCompletionRecords); the manifest says so of each
	// process (validate.Process.CompletionRecords).
	CompletionRecords bool
	// Tables are the tables the side's per-table metrics are read from
	// (peer.Descriptor.Tables of its hello's kind).
	Tables peer.Tables
}

// Runner runs every window of a matrix.
type Runner struct {
	matrix scenarios.Matrix
	sides  map[string]*Side
	step   *Step
	runDir string
	logf   func(format string, args ...any)

	windows []Window
	runID   string
	started time.Time
	// progress is the progress line's estimate of the time left.
	progress *progress
}

// New checks the matrix once and plans its windows. runDir receives one
// folder per window (records, logs, manifest).
func New(m scenarios.Matrix, base, candidate *Side, step *Step, runDir string, logf func(string, ...any)) (*Runner, error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	if base == nil || candidate == nil || base.Name != result.SideBase || candidate.Name != result.SideCandidate {
		return nil, fmt.Errorf("runner: want a %s and a %s side", result.SideBase, result.SideCandidate)
	}
	if logf == nil {
		logf = func(string, ...any) {}
	}
	runID := strconv.FormatInt(time.Now().Unix()%1_000_000, 36)
	windows, err := Plan(&m, runID)
	if err != nil {
		return nil, err
	}
	return &Runner{matrix: m, sides: map[string]*Side{base.Name: base, candidate.Name: candidate},
		step: step, runDir: runDir, logf: logf, windows: windows, runID: runID}, nil
}

// Windows is the plan: every window in the order Run runs them.
func (r *Runner) Windows() []Window { return r.windows }

// Run runs every window and returns the run: head, which holds what the
// caller knows before the windows (refs, machine, databases, notes, its
// warnings), completed with the matrix's mode, the cells and their
// samples (INVALID ones included and marked), the upgrade, the times and
// the step's warnings. On cancellation it returns what ran so far with
// ctx's error.
func (r *Runner) Run(ctx context.Context, head result.Run) (*result.Run, error) {
	r.started = time.Now()
	r.progress = newProgress(&r.matrix, r.step.Warmup, r.step.Window, r.step.NoTemplates, time.Now)
	upgrade := r.matrix.Upgrade != nil && !sameCode(r.sides[result.SideBase], r.sides[result.SideCandidate])
	run := &head
	run.Schema, run.Mode, run.Started = result.SchemaVersion, r.matrix.Mode, r.started
	for i := range r.matrix.Cells {
		c := &r.matrix.Cells[i]
		run.Cells = append(run.Cells, &result.Cell{Scenario: scenarios.Names[c.Scenario], Store: "postgres", Name: c.Name,
			Config: c.Config(), Settings: c.SideSettings()})
	}
	// pending are the windows still to run, in order. Window i+1 is
	// prepared (database, setup, preload, vacuum) while window i drains
	// and validates: the measured part of every window still runs alone,
	// after the previous window's workers have stopped and its database
	// is gone.
	pending := slices.Clone(r.windows)
	prepare := func() *Prepared {
		if len(pending) == 0 {
			return nil
		}
		w := pending[0]
		return r.step.Prepare(ctx, w, &r.matrix.Cells[w.Cell], r.sides[w.Side], filepath.Join(r.runDir, w.Dir))
	}
	var err error
	next := prepare()
	raised := map[int]int{} // cell: times its preload was doubled
	for len(pending) > 0 {
		w := pending[0]
		pending = pending[1:]
		if err = ctx.Err(); err != nil {
			break
		}
		c := &r.matrix.Cells[w.Cell]
		r.logf("cell %d/%d [%s] %s: round %d/%d, %s (%s)", w.Cell+1, len(r.matrix.Cells), scenarios.Names[c.Scenario], c.Name,
			w.Round, c.Rounds(r.matrix.Rounds), w.Side, r.progress.line(r.progress.schedule(append([]Window{w}, pending...), upgrade)))
		cur := next
		var prepared chan struct{}
		windowDone := func() {
			if len(pending) > 0 {
				prepared = make(chan struct{})
				go func() {
					defer close(prepared)
					next = prepare()
				}()
			}
		}
		s := r.step.Measure(ctx, cur, windowDone)
		switch {
		case prepared != nil:
			<-prepared
		case len(pending) > 0:
			// The window failed before its end: prepare the next now.
			next = prepare()
		}
		if cur.RanOut() && raised[w.Cell] < MaxPreloadRaises && c.Preload*2 <= scenarios.MaxPreload {
			raised[w.Cell]++
			r.step.warnf("cell %d (%s): the preload of %d ran out in window %d (%s, round %d): the cell was run again with a preload of %d; %d window(s) discarded",
				w.Cell+1, c.Name, c.Preload, w.Order, w.Side, w.Round, c.Preload*2, len(run.Cells[w.Cell].Samples)+1)
			pending = r.rerunCell(ctx, w.Cell, pending, next, run.Cells[w.Cell])
			r.progress.rerun(fmt.Sprintf("cell %d's preload ran out: its %d windows run again with a preload of %d",
				w.Cell+1, 2*c.Rounds(r.matrix.Rounds), c.Preload))
			next = prepare()
			continue
		}
		run.Cells[w.Cell].Samples = append(run.Cells[w.Cell].Samples, s)
		switch {
		case s.Error != "":
			r.logf("  INVALID: %s", s.Error)
		case s.Validation != nil && !s.Validation.Valid:
			r.logf("  INVALID: %s", describeValidation(s.Validation))
		default:
			r.logf("  %s", headline(s))
		}
	}
	if err != nil {
		// Cancelled with a window prepared: drop its database.
		r.step.Discard(ctx, next)
	}
	r.step.Close(ctx)
	if u := r.matrix.Upgrade; u != nil && err == nil {
		err = ctx.Err()
		if err == nil {
			eta := ""
			if upgrade {
				eta = " (" + r.progress.line(r.progress.schedule(nil, upgrade)) + ")"
			}
			r.logf("scenario 6 [upgrade]: %s -> %s, one run%s", result.SideBase, result.SideCandidate, eta)
			run.Upgrade = r.step.Upgrade(ctx, u, r.sides[result.SideBase], r.sides[result.SideCandidate],
				"rb_"+r.runID+"_upgrade", filepath.Join(r.runDir, "upgrade"))
			r.logf("  %s", describeUpgrade(run.Upgrade))
		}
	}
	if err == nil {
		r.logf("%s", r.progress.done())
	}
	run.Finished = time.Now()
	run.Warnings = append(run.Warnings, r.step.Warnings()...)
	if r.step.Profile {
		run.Warnings = append(run.Warnings, profileWarnings(run)...)
	}
	return run, err
}

// rerunCell readies cell to run again from its first window with twice
// its preload, because its preload ran out for this store, so that every
// window of both sides starts on the same backlog: it doubles the
// preload, forgets the cell's samples and preload templates, drops the
// database prepared for the next window, and returns the windows to run:
// every window of the cell, then the rest of pending after it.
func (r *Runner) rerunCell(ctx context.Context, cell int, pending []Window, prepared *Prepared, rc *result.Cell) []Window {
	c := &r.matrix.Cells[cell]
	c.Preload *= 2
	rc.Config, rc.Samples = c.Config(), nil
	r.step.Discard(ctx, prepared)
	r.step.dropTemplates(ctx, func(i int) bool { return i == cell })
	var again []Window
	for _, w := range r.windows {
		if w.Cell == cell {
			again = append(again, w)
		}
	}
	rest := slices.DeleteFunc(slices.Clone(pending), func(w Window) bool { return w.Cell == cell })
	return append(again, rest...)
}

// profileWarnings says which side has no CPU profile (--profile): its
// workers ignore cpu_profile_path (they predate it), or none was left.
func profileWarnings(run *result.Run) []string {
	var out []string
	for _, side := range []string{result.SideBase, result.SideCandidate} {
		ignored, profiled := false, 0
		for _, c := range run.Cells {
			for _, s := range c.Samples {
				if s.Side != side {
					continue
				}
				profiled += len(s.Profiles)
				ignored = ignored || slices.Contains(s.Ignored, "cpu_profile_path")
			}
		}
		switch {
		case ignored:
			out = append(out, fmt.Sprintf("--profile: no CPU profile from %s: its workers ignore cpu_profile_path (they predate it)", side))
		case profiled == 0 && len(run.Cells) > 0:
			out = append(out, fmt.Sprintf("--profile: no CPU profile from %s: its workers left none", side))
		}
	}
	return out
}

// MaxPreloadRaises bounds how many times a run doubles the preload of a
// cell whose preload ran out, running the cell again each time; after
// that a window that runs out is INVALID.
const MaxPreloadRaises = 2

// describeUpgrade is the upgrade's verdict in one line.
func describeUpgrade(u *result.Upgrade) string {
	switch {
	case u.Skipped != "":
		return u.Skipped
	case u.Error != "":
		return "INVALID: " + u.Error
	}
	s := u.Verdict()
	if u.Validation != nil {
		s = describeValidation(u.Validation)
	}
	if len(u.Failed) > 0 {
		s = "INVALID: " + strings.Join(u.Failed, "; ") + "; " + s
	}
	return s
}

func headline(s *result.Sample) string {
	var parts []string
	for _, k := range []string{result.MetricDeliveriesPerS, result.MetricEventsPerS, result.MetricWALBytesPerDelivery, result.MetricWALBytesPerEvent, result.MetricE2EP50Ms} {
		if v, ok := s.Metrics[k]; ok {
			parts = append(parts, fmt.Sprintf("%s %.1f", k, v))
		}
	}
	return "VALID " + strings.Join(parts, ", ")
}

func describeValidation(v *validate.Result) string {
	s := v.String()
	if len(v.Examples) > 0 {
		s += "; e.g. " + v.Examples[0]
	}
	return s
}
