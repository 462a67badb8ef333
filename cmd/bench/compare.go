package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/berkcansavur/relaybus/bench/compare"
	"github.com/berkcansavur/relaybus/bench/comparison"
	"github.com/berkcansavur/relaybus/bench/report"
	"github.com/berkcansavur/relaybus/bench/result"
	"github.com/berkcansavur/relaybus/bench/runner"
	"github.com/berkcansavur/relaybus/bench/scenarios"
	"github.com/berkcansavur/relaybus/internal/dbenv"
)

// maxPlantDelay bounds --plant-candidate-delay.
const maxPlantDelay = 10 * time.Second

// compareFlags are the comparison's flags; options checks them and
// turns them into the comparison's options.
type compareFlags struct {
	o                              comparison.Options // the flags that are options as they are
	quick, full, smoke             bool
	bloat                          bool
	scenarioList, stores, provider string
	rounds                         int
	window, warmup                 time.Duration
	gate, skipCells                string
}

// compareUsage is the comparison's own help (bench compare --help); bench
// --help is the overview of every command (usage), with the same flags.
const compareUsage = `usage: bench compare --base REF --candidate REF [--quick|--full|--smoke|--bloat] [flags]
       (bench with no command is bench compare)

Builds the worker of each ref (REF: a tag, branch, commit, HEAD, vX.Y.Z,
WORKTREE, or a peer: river, river@vX.Y.Z, ceiling), starts PostgreSQL,
runs every scenario cell of the mode as ABBA-interleaved windows on fresh
databases, runs scenario 6 (the upgrade) once when the refs differ,
validates every window and prints a table per scenario. The result set
(run.json, report.md, bench.txt, the plots) goes to --out. Exits 1 when a
candidate window or the upgrade is INVALID or a --gate rule fails.

Modes: --smoke one cell and the upgrade (1-2 minutes), --quick the
comparison a release is judged by and the mode when none is given (11-18
minutes on 2 cores), --full the whole matrix (hours), --bloat the held
snapshot and soak cells alone (75 to 90 minutes; docs/bloat.md).`

// compareCommand is the comparison (bench compare, or bench alone).
func compareCommand(f *compareFlags) *command {
	return &command{usage: compareUsage, nargs: -1, flags: f.bind, run: f.run}
}

// bind binds the comparison's flags to f.
func (f *compareFlags) bind(fs *flag.FlagSet) {
	o, v := &f.o, f
	fs.StringVar(&o.Base, "base", "", "base ref (required)")
	fs.StringVar(&o.Candidate, "candidate", "", "candidate ref (required; WORKTREE for uncommitted changes)")
	fs.BoolVar(&v.quick, "quick", false, "small matrix, 11-18 minutes on 2 cores (14 HEAD against itself, 18 against v0.1.0; the mode when none is given)")
	fs.BoolVar(&v.full, "full", false, "the seed's full matrix (hours)")
	fs.BoolVar(&v.smoke, "smoke", false, "one cell, short windows, and the upgrade (scenario 6, small backlog) when the refs differ (CI)")
	fs.BoolVar(&v.bloat, "bloat", false, "the bloat cells alone (docs/bloat.md): 8 held snapshot (60 s windows, 30 to 45 minutes), 9 soak (10 minute windows, about 45 minutes); --full runs them too")
	fs.StringVar(&v.scenarioList, "scenarios", "", "scenario numbers to run, e.g. 1,2,6 (empty: all of the mode): 1 publish, 2 dispatch, 3 keyed, "+
		"4 faults (a dispatcher SIGKILLed, poison, a database restart in --full, database crashes; cells that restart or crash the database are skipped with --db-provider dsn), "+
		"5 mixed, 6 the upgrade (one run), 7 handler work, 8 held snapshot and 9 soak (--bloat, --full), "+
		"10 batch handlers (only when named: a handler of one delivery on the base side against a batch handler on the candidate side; give both the same ref)")
	fs.StringVar(&v.skipCells, "skip-cells", "", "leave out the cells whose name matches this regular expression, e.g. '^8 inst' (the report says which were left out)")
	fs.StringVar(&v.stores, "stores", "postgres", "stores: postgres, mongo or all")
	fs.IntVar(&v.rounds, "rounds", 0, "ABBA rounds per cell, even (0: the mode's); a cell with fewer rounds of its own keeps them (--quick's crash cell: 2)")
	fs.DurationVar(&v.window, "window", 0, "measured window per run (0: the mode's)")
	fs.DurationVar(&v.warmup, "warmup", -1, "discarded warm-up before each window (default: the mode's, which -1 also asks for)")
	fs.DurationVar(&o.DrainTimeout, "drain-timeout", runner.DefaultDrainTimeout, "a run that does not drain within this is INVALID")
	fs.StringVar(&v.provider, "db-provider", "auto", "PostgreSQL: auto, local, testcontainers or dsn")
	fs.StringVar(&o.DSN, "dsn", "", "PostgreSQL server for --db-provider dsn (superuser; databases are created per window)")
	fs.StringVar(&o.Image, "image", "", "PostgreSQL image for testcontainers")
	// The MongoDB runner does not exist yet; --mongo-uri is accepted so
	// scripts that pass it keep working, and --stores says why it is unused.
	fs.String("mongo-uri", os.Getenv("RELAYBUS_TEST_MONGO_URI"), "MongoDB replica set URI (unused until the MongoDB runner exists)")
	fs.StringVar(&o.Out, "out", "bench-out", "results directory (bench-out/ is ignored by git; the result sets kept with the project are in results/, written with --out results)")
	fs.StringVar(&o.CacheDir, "cache-dir", "", "build cache (empty: $XDG_CACHE_HOME/relaybus-bench)")
	fs.StringVar(&v.gate, "gate", "", "fail when a metric regresses significantly past a threshold: METRIC[@SCENARIO]:PCT[,...] (Holm-corrected over the comparisons the rules cover)")
	fs.DurationVar(&o.PlantDelay, "plant-candidate-delay", 0, "self-test: add this cost to every candidate delivery")
	fs.BoolVar(&o.AllowFsyncOff, "allow-fsync-off", false, "run even when the server has fsync=off")
	fs.BoolVar(&o.KeepRecords, "keep-records", false, "keep every window's record files, logs and manifest in the results folder (records/), for bench validate")
	fs.BoolVar(&o.Profile, "profile", false, "save a CPU profile of every window's dispatchers and publishers (profiles/) and list each side's top statements per delivery in report.md")
	fs.StringVar(&o.Repo, "repo", ".", "git repository to resolve refs in")
}

// options checks the flags and returns the comparison's options and
// gate rules; args are the arguments after the flags (none allowed).
func (f *compareFlags) options(args []string) (comparison.Options, []compare.GateRule, error) {
	o, v := f.o, f
	var rules []compare.GateRule
	quick, full, smoke, bloat := v.quick, v.full, v.smoke, v.bloat
	scenarioList, stores, provider := v.scenarioList, v.stores, v.provider
	rounds, window, warmup, gate := v.rounds, v.window, v.warmup, v.gate
	if len(args) > 0 {
		return o, nil, fmt.Errorf("bench: unexpected argument %q (flags come before arguments; see bench --help)", args[0])
	}
	if o.Base == "" || o.Candidate == "" {
		return o, nil, errors.New("bench: --base and --candidate are required (e.g. --base v0.1.0 --candidate HEAD)")
	}
	modes := 0
	for _, b := range []bool{quick, full, smoke, bloat} {
		if b {
			modes++
		}
	}
	if modes > 1 {
		return o, nil, errors.New("bench: choose one of --quick, --full, --smoke, --bloat")
	}
	switch stores {
	case "postgres":
	case "mongo":
		return o, nil, errors.New("bench: --stores mongo: the MongoDB runner is not wired into this harness yet (bench/mongometrics reads oplog, journal and opcounters, but no window loop drives a replica set); use --stores postgres")
	case "all":
		o.Warnings = append(o.Warnings, "mongo skipped: the MongoDB runner is not wired into this harness yet")
	default:
		return o, nil, fmt.Errorf("bench: --stores %q: want postgres, mongo or all", stores)
	}
	if rounds < 0 || rounds > scenarios.MaxRounds {
		return o, nil, fmt.Errorf("bench: --rounds %d outside 0..%d", rounds, scenarios.MaxRounds)
	}
	if window != 0 && (window < scenarios.MinWindow || window > scenarios.MaxWindow) {
		return o, nil, fmt.Errorf("bench: --window %s outside %s..%s", window, scenarios.MinWindow, scenarios.MaxWindow)
	}
	if o.DrainTimeout <= 0 {
		return o, nil, errors.New("bench: --drain-timeout must be positive")
	}
	if o.PlantDelay < 0 || o.PlantDelay > maxPlantDelay {
		return o, nil, fmt.Errorf("bench: --plant-candidate-delay must be within 0..%s", maxPlantDelay)
	}
	var err error
	if o.Provider, err = dbenv.ParseProvider(provider); err != nil {
		return o, nil, err
	}
	if gate != "" {
		if rules, err = compare.ParseGateRules(gate); err != nil {
			return o, nil, err
		}
	}
	mode := result.ModeQuick
	switch {
	case full:
		mode = result.ModeFull
	case smoke:
		mode = result.ModeSmoke
	case bloat:
		mode = scenarios.ModeBloat
	}
	if o.Matrix, err = scenarios.ByMode(mode); err != nil {
		return o, nil, err
	}
	if scenarioList != "" {
		var nums []int
		for _, f := range strings.Split(scenarioList, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil {
				return o, nil, fmt.Errorf("bench: --scenarios: %q is not a scenario number", f)
			}
			nums = append(nums, n)
		}
		if err := o.Matrix.Filter(nums); err != nil {
			return o, nil, err
		}
		o.Matrix.Mode = result.ModeCustom
	}
	if v.skipCells != "" {
		re, err := regexp.Compile(v.skipCells)
		if err != nil {
			return o, nil, fmt.Errorf("bench: --skip-cells: %v", err)
		}
		var kept []scenarios.Cell
		for _, c := range o.Matrix.Cells {
			if re.MatchString(c.Name) {
				o.Warnings = append(o.Warnings, fmt.Sprintf("--skip-cells: cell %q of the %s matrix was not run", c.Name, mode))
				continue
			}
			kept = append(kept, c)
		}
		if len(kept) == len(o.Matrix.Cells) {
			return o, nil, fmt.Errorf("bench: --skip-cells %q matches no cell of the matrix", v.skipCells)
		}
		o.Matrix.Cells, o.Matrix.Mode = kept, result.ModeCustom
	}
	if rounds > 0 {
		o.Matrix.Rounds, o.Matrix.Mode = rounds, result.ModeCustom
	}
	if window > 0 {
		// The bloat cells' own windows give way too.
		o.Matrix.SetWindow(window)
		o.Matrix.Mode = result.ModeCustom
	}
	if warmup >= 0 {
		o.Matrix.Warmup = warmup
	}
	o.Matrix.FitPreloads() // the preloads feed warm-up and window
	if err := o.Matrix.Validate(); err != nil {
		return o, nil, err
	}
	if err := gateScenariosIn(rules, &o.Matrix); err != nil {
		return o, nil, err
	}
	return o, rules, nil
}

// gateScenariosIn refuses, before the first window, a gate rule scoped to
// a scenario the run's matrix has no cell of (a typo would otherwise run
// the whole comparison and then say "not measured").
func gateScenariosIn(rules []compare.GateRule, m *scenarios.Matrix) error {
	in := map[string]bool{}
	var names []string
	for _, c := range m.Cells {
		if n := scenarios.Names[c.Scenario]; !in[n] {
			in[n] = true
			names = append(names, n)
		}
	}
	for _, r := range rules {
		if r.Scenario != "" && !in[r.Scenario] {
			return fmt.Errorf("bench: --gate %s: this run has no %q cell; its scenarios are %s", r, r.Scenario, strings.Join(names, ", "))
		}
	}
	return nil
}

// checkOut makes sure the results directory can be written before the
// run starts, so a bad --out does not cost the whole run.
func checkOut(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("bench: --out %s: %w (checked before the run)", dir, err)
	}
	f, err := os.CreateTemp(dir, ".bench-writable-*")
	if err != nil {
		return fmt.Errorf("bench: --out %s is not writable: %w (checked before the run)", dir, err)
	}
	name := f.Name()
	f.Close()
	return os.Remove(name)
}

// run runs the comparison and prints its tables and verdict.
func (f *compareFlags) run(ctx context.Context, c *call) error {
	o, rules, err := f.options(c.args)
	if err != nil {
		return err
	}
	if err := checkOut(o.Out); err != nil {
		return err
	}
	o.Logf = c.logf
	out, runErr := comparison.Run(ctx, o)
	if out == nil {
		return runErr
	}
	if err := report.WriteTerminal(c.stdout, out.Analysis); err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "\nresults: %s (wall time %s)\n", out.Dir, out.Wall.Round(time.Second))
	if runErr != nil {
		return runErr
	}
	return verdict(out.Analysis, rules, c.stdout)
}

// verdict decides the exit status, which is about the candidate: an
// INVALID candidate window or a failed gate fails the command. INVALID
// base windows are listed first, since they explain what could not be
// compared, but do not fail it (v0.1.0 is INVALID by design in the
// handler-work cells).
func verdict(a *compare.Analysis, rules []compare.GateRule, stdout io.Writer) error {
	var failed []string
	invalid := 0
	for _, side := range []string{result.SideBase, result.SideCandidate} {
		for _, inv := range a.Invalid {
			if inv.Sample.Side != side {
				continue
			}
			fmt.Fprintf(stdout, "INVALID %s: %s / %s, round %d: %s\n", side, inv.Cell.Scenario, inv.Cell.Name, inv.Sample.Round, inv.Reason)
			if side == result.SideCandidate {
				invalid++
			}
		}
	}
	if invalid > 0 {
		failed = append(failed, fmt.Sprintf("%d INVALID candidate run(s)", invalid))
	}
	if u := upgradeOf(a); u != nil && u.Skipped == "" && !u.IsValid() {
		fmt.Fprintf(stdout, "INVALID upgrade (scenario 6): %s\n", report.UpgradeReason(u))
		failed = append(failed, "the upgrade (scenario 6) is INVALID")
	}
	if len(rules) > 0 {
		g := compare.Gate(a, rules)
		for _, n := range g.Notes {
			fmt.Fprintf(stdout, "gate note: %s\n", n)
		}
		for _, v := range g.Violations {
			if v.Metric == "validity" {
				continue // listed above
			}
			fmt.Fprintf(stdout, "GATE FAILED: %s\n", v.Message)
			failed = append(failed, "gate: "+v.Message)
		}
		if !g.Failed() {
			fmt.Fprintf(stdout, "gate passed: %d rule(s), Holm's correction over %d comparison(s)\n", len(rules), g.Family)
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("bench: %s: %w", strings.Join(failed, "; "), exitError(1))
	}
	return nil
}

func upgradeOf(a *compare.Analysis) *result.Upgrade {
	if a == nil || a.Run == nil {
		return nil
	}
	return a.Run.Upgrade
}
