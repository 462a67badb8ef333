package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/berkcansavur/relaybus/bench/build"
	"github.com/berkcansavur/relaybus/bench/compare"
	"github.com/berkcansavur/relaybus/bench/pgmetrics"
	"github.com/berkcansavur/relaybus/bench/proc"
	"github.com/berkcansavur/relaybus/bench/protocol"
	"github.com/berkcansavur/relaybus/bench/refs"
	"github.com/berkcansavur/relaybus/bench/report"
	"github.com/berkcansavur/relaybus/bench/result"
	"github.com/berkcansavur/relaybus/bench/runner"
	"github.com/berkcansavur/relaybus/bench/scenarios"
	"github.com/berkcansavur/relaybus/internal/dbenv"
	_ "github.com/berkcansavur/relaybus/internal/dbenv/container" // the testcontainers provider (--db-provider)
	"github.com/jackc/pgx/v5"
)

// maxPlantDelay bounds --plant-candidate-delay.
const maxPlantDelay = 10 * time.Second

// options are the comparison's flags, parsed and checked once by
// parseCompare: everything after it uses them as they are.
type options struct {
	base, candidate string
	matrix          scenarios.Matrix
	storesAll       bool     // --stores all: MongoDB is skipped with a warning
	skipped         []string // cells left out by --skip-cells, named in the report
	drain           time.Duration
	provider        dbenv.Provider
	dsn, image      string
	out, cacheDir   string
	gate            []compare.GateRule
	plantDelay      time.Duration
	allowFsyncOff   bool
	keepRecords     bool
	profile         bool
	repo            string
}

// compareVars are the comparison's flags that parseCompare turns into
// options.
type compareVars struct {
	quick, full, smoke             bool
	scenarioList, stores, provider string
	rounds                         int
	window, warmup                 time.Duration
	gate, skipCells                string
}

// harnessConnections is what a window opens beside the cell's own pools:
// the drain dispatchers' pools, the runner's connections and margin.
const harnessConnections = 60

// compareFlagSet is the comparison's flags, bound to o and v.
func compareFlagSet(o *options, v *compareVars) *flag.FlagSet {
	fs := flag.NewFlagSet("compare", flag.ContinueOnError)
	fs.StringVar(&o.base, "base", "", "base ref (required)")
	fs.StringVar(&o.candidate, "candidate", "", "candidate ref (required; WORKTREE for uncommitted changes)")
	fs.BoolVar(&v.quick, "quick", false, "small matrix, about 11 minutes on 2 cores (the mode when none is given)")
	fs.BoolVar(&v.full, "full", false, "the seed's full matrix (hours)")
	fs.BoolVar(&v.smoke, "smoke", false, "one cell, short windows, and the upgrade (scenario 6, small backlog) when the refs differ (CI)")
	fs.StringVar(&v.scenarioList, "scenarios", "", "scenario numbers to run, e.g. 1,2,6 (empty: all of the mode): 1 publish, 2 dispatch, 3 keyed, "+
		"4 faults (a dispatcher SIGKILLed, poison, a database restart in --full, database crashes; cells that restart or crash the database are skipped with --db-provider dsn), "+
		"5 mixed, 6 the upgrade (one run), 7 handler work")
	fs.StringVar(&v.skipCells, "skip-cells", "", "leave out the cells whose name matches this regular expression, e.g. '^8 inst' (the report says which were left out)")
	fs.StringVar(&v.stores, "stores", "postgres", "stores: postgres, mongo or all")
	fs.IntVar(&v.rounds, "rounds", 0, "ABBA rounds per cell, even (0: the mode's); a cell with fewer rounds of its own keeps them (--quick's crash cell: 2)")
	fs.DurationVar(&v.window, "window", 0, "measured window per run (0: the mode's)")
	fs.DurationVar(&v.warmup, "warmup", -1, "discarded warm-up before each window (-1: the mode's)")
	fs.DurationVar(&o.drain, "drain-timeout", runner.DefaultDrainTimeout, "a run that does not drain within this is INVALID")
	fs.StringVar(&v.provider, "db-provider", "auto", "PostgreSQL: auto, local, testcontainers or dsn")
	fs.StringVar(&o.dsn, "dsn", "", "PostgreSQL server for --db-provider dsn (superuser; databases are created per window)")
	fs.StringVar(&o.image, "image", "", "PostgreSQL image for testcontainers")
	// The MongoDB runner does not exist yet; --mongo-uri is accepted so
	// scripts that pass it keep working, and --stores says why it is unused.
	fs.String("mongo-uri", os.Getenv("RELAYBUS_TEST_MONGO_URI"), "MongoDB replica set URI (unused until the MongoDB runner exists)")
	fs.StringVar(&o.out, "out", "results", "results directory")
	fs.StringVar(&o.cacheDir, "cache-dir", "", "build cache (empty: $XDG_CACHE_HOME/relaybus-bench)")
	fs.StringVar(&v.gate, "gate", "", "fail when a metric regresses significantly past a threshold: METRIC[@SCENARIO]:PCT[,...] (Holm-corrected over the comparisons the rules cover)")
	fs.DurationVar(&o.plantDelay, "plant-candidate-delay", 0, "self-test: add this cost to every candidate delivery")
	fs.BoolVar(&o.allowFsyncOff, "allow-fsync-off", false, "run even when the server has fsync=off")
	fs.BoolVar(&o.keepRecords, "keep-records", false, "keep every window's record files, logs and manifest in the results folder (records/), for bench validate")
	fs.BoolVar(&o.profile, "profile", false, "save a CPU profile of every window's dispatchers and publishers (profiles/) and list each side's top statements per delivery in report.md")
	fs.StringVar(&o.repo, "repo", ".", "git repository to resolve refs in")
	return fs
}

func parseCompare(args []string, stdout io.Writer) (*options, error) {
	o := &options{}
	v := &compareVars{}
	fs := compareFlagSet(o, v)
	if err := parseFlags(fs, usage, args, stdout); err != nil {
		return nil, err
	}
	quick, full, smoke := v.quick, v.full, v.smoke
	scenarioList, stores, provider := v.scenarioList, v.stores, v.provider
	rounds, window, warmup, gate := v.rounds, v.window, v.warmup, v.gate
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("bench: unexpected argument %q (flags come before arguments; see bench --help)", fs.Arg(0))
	}
	if o.base == "" || o.candidate == "" {
		return nil, errors.New("bench: --base and --candidate are required (e.g. --base v0.1.0 --candidate HEAD)")
	}
	modes := 0
	for _, b := range []bool{quick, full, smoke} {
		if b {
			modes++
		}
	}
	if modes > 1 {
		return nil, errors.New("bench: choose one of --quick, --full, --smoke")
	}
	switch stores {
	case "postgres":
	case "mongo":
		return nil, errors.New("bench: --stores mongo: the MongoDB runner is not wired into this harness yet (bench/mongometrics reads oplog, journal and opcounters, but no window loop drives a replica set); use --stores postgres")
	case "all":
		o.storesAll = true
	default:
		return nil, fmt.Errorf("bench: --stores %q: want postgres, mongo or all", stores)
	}
	if rounds < 0 || rounds > scenarios.MaxRounds {
		return nil, fmt.Errorf("bench: --rounds %d outside 0..%d", rounds, scenarios.MaxRounds)
	}
	if window != 0 && (window < scenarios.MinWindow || window > scenarios.MaxWindow) {
		return nil, fmt.Errorf("bench: --window %s outside %s..%s", window, scenarios.MinWindow, scenarios.MaxWindow)
	}
	if o.drain <= 0 {
		return nil, errors.New("bench: --drain-timeout must be positive")
	}
	if o.plantDelay < 0 || o.plantDelay > maxPlantDelay {
		return nil, fmt.Errorf("bench: --plant-candidate-delay must be within 0..%s", maxPlantDelay)
	}
	var err error
	if o.provider, err = dbenv.ParseProvider(provider); err != nil {
		return nil, err
	}
	if gate != "" {
		if o.gate, err = compare.ParseGateRules(gate); err != nil {
			return nil, err
		}
	}
	mode := result.ModeQuick
	switch {
	case full:
		mode = result.ModeFull
	case smoke:
		mode = result.ModeSmoke
	}
	if o.matrix, err = scenarios.ByMode(mode); err != nil {
		return nil, err
	}
	if scenarioList != "" {
		var nums []int
		for _, f := range strings.Split(scenarioList, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil {
				return nil, fmt.Errorf("bench: --scenarios: %q is not a scenario number", f)
			}
			nums = append(nums, n)
		}
		if err := o.matrix.Filter(nums); err != nil {
			return nil, err
		}
		o.matrix.Mode = result.ModeCustom
	}
	if v.skipCells != "" {
		re, err := regexp.Compile(v.skipCells)
		if err != nil {
			return nil, fmt.Errorf("bench: --skip-cells: %v", err)
		}
		kept := o.matrix.Cells[:0]
		for _, c := range o.matrix.Cells {
			if re.MatchString(c.Name) {
				o.skipped = append(o.skipped, fmt.Sprintf("cell %q of the %s matrix", c.Name, mode))
				continue
			}
			kept = append(kept, c)
		}
		if len(o.skipped) == 0 {
			return nil, fmt.Errorf("bench: --skip-cells %q matches no cell of the matrix", v.skipCells)
		}
		o.matrix.Cells, o.matrix.Mode = kept, result.ModeCustom
	}
	if rounds > 0 {
		o.matrix.Rounds, o.matrix.Mode = rounds, result.ModeCustom
	}
	if window > 0 {
		o.matrix.Window, o.matrix.Mode = window, result.ModeCustom
	}
	if warmup >= 0 {
		o.matrix.Warmup = warmup
	}
	o.matrix.FitPreloads() // the preloads feed warm-up and window
	if err := o.matrix.Validate(); err != nil {
		return nil, err
	}
	return o, nil
}

func runCompare(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseCompare(args, stdout)
	if err != nil {
		return helpOK(err)
	}
	logf := func(format string, a ...any) { fmt.Fprintf(stderr, format+"\n", a...) }
	var warnings []string
	if o.storesAll {
		warnings = append(warnings, "mongo skipped: the MongoDB runner is not wired into this harness yet")
		logf("warning: %s", warnings[0])
	}

	base, err := refs.Resolve(ctx, o.repo, o.base)
	if err != nil {
		return err
	}
	cand, err := refs.Resolve(ctx, o.repo, o.candidate)
	if err != nil {
		return err
	}
	cacheDir := o.cacheDir
	if cacheDir == "" {
		if cacheDir, err = build.DefaultCacheDir(); err != nil {
			return err
		}
	}
	tmp, err := os.MkdirTemp("", "relaybus-bench-")
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	defer os.RemoveAll(tmp)
	b := &build.Builder{RepoDir: o.repo, CacheDir: cacheDir, Logf: logf}
	type built struct {
		side  *runner.Side
		ref   refs.Ref
		hello result.RefInfo
	}
	sides := []*built{
		{side: &runner.Side{Name: result.SideBase}, ref: base},
		{side: &runner.Side{Name: result.SideCandidate, ExtraCostPerDeliveryUs: int(o.plantDelay / time.Microsecond)}, ref: cand},
	}
	for _, s := range sides {
		s.side.Code = s.ref.SHA
		if s.ref.Dirty {
			s.side.Code += "+dirty"
		}
		if s.side.Bin, err = b.Build(ctx, s.side.Name, s.ref, tmp); err != nil {
			return err
		}
		hello, err := proc.Handshake(ctx, s.side.Bin)
		if err != nil {
			return err
		}
		s.hello = result.RefInfo{Ref: s.ref.Name, SHA: s.ref.SHA, Version: hello.Version, Dirty: s.ref.Dirty,
			Protocol: hello.Protocol, Capabilities: hello.Capabilities}
		s.side.NoKeyOrder = protocol.HasCapability(hello.Capabilities, protocol.CapabilityNoKeyOrder)
		s.side.CompletionRecords = protocol.HasCapability(hello.Capabilities, protocol.CapabilityCompletionRecords)
		logf("%s", helloLine(s.side.Name, s.ref, hello))
	}
	notes, err := peerMatrix(&o.matrix, []sideInfo{{result.SideBase, sides[0].hello}, {result.SideCandidate, sides[1].hello}})
	if err != nil {
		return err
	}
	if protocol.PeerName(sides[0].hello.Capabilities) == "" {
		if n := o.matrix.Upgrade.FitBaseLease(sides[0].hello.Version); n != "" {
			notes = append(notes, n)
		}
	}
	for _, n := range notes {
		logf("note: %s", n)
	}

	// Room for every pool a window opens, the drain dispatchers' and the
	// runner's own connections, and PostgreSQL's reserved ones.
	conns := max(100, o.matrix.Connections(harnessConnections))
	pg, info, stop, err := startPostgres(ctx, dbenv.PostgresOptions{Provider: o.provider, DSN: o.dsn, Image: o.image,
		Settings: map[string]string{"shared_preload_libraries": "pg_stat_statements", "max_connections": strconv.Itoa(conns)}, Logf: logf})
	if err != nil {
		return err
	}
	defer stop()
	if err := pgmetrics.CheckFsync(info.Settings, o.allowFsyncOff); err != nil {
		return err
	}
	skipNotes, err := skipDatabaseFaults(&o.matrix, pg.Provider())
	for _, n := range skipNotes {
		logf("note: %s", n)
	}
	if err != nil {
		return err
	}
	notes = append(notes, skipNotes...)
	if n := fastCrashRecovery(ctx, &o.matrix, pg, info); n != "" {
		logf("note: %s", n)
		notes = append(notes, n)
	}
	dataFS := dataDirFS(ctx, pg)
	logf("PostgreSQL %s (%s), fsync=%s, data directory on %s", info.Version, info.Provider, info.Settings["fsync"], dataFS)
	if dataFS == "tmpfs" {
		warnings = append(warnings, "the server's data directory is on tmpfs: fsync writes to memory, so commit and WAL costs are not a disk's")
		logf("warning: %s", warnings[len(warnings)-1])
	}
	if !info.PgStatStatementsLoaded {
		warnings = append(warnings, "pg_stat_statements is not loaded by the server: stmts_per_delivery is not measured")
		logf("warning: %s", warnings[len(warnings)-1])
	}

	started := time.Now()
	server := runner.NewPGServer(pg, info.PgStatStatementsLoaded)
	server.StatementDetail = o.profile
	step := &runner.Step{Server: server, Launch: runner.ProcLauncher, Profile: o.profile,
		Warmup: o.matrix.Warmup, Window: o.matrix.Window, DrainTimeout: o.drain, Logf: logf}
	r, err := runner.New(o.matrix, sides[0].side, sides[1].side, step, filepath.Join(tmp, "run"), logf)
	if err != nil {
		return err
	}
	run, runErr := r.Run(ctx)
	run.Base, run.Candidate = sides[0].hello, sides[1].hello
	run.Machine = machine()
	run.Databases = []result.DatabaseInfo{{Kind: "postgres", Provider: string(info.Provider), Version: info.Version,
		Settings: info.Settings, DataDirFS: dataFS}}
	run.Warnings = append(warnings, run.Warnings...)
	run.Notes = notes
	if o.plantDelay > 0 {
		run.Warnings = append(run.Warnings, fmt.Sprintf("self-test: candidate dispatchers carry a planted delay of %s per delivery", o.plantDelay))
	}
	for _, name := range o.skipped {
		run.Warnings = append(run.Warnings, "--skip-cells: "+name+" was not run")
	}

	if o.profile {
		run.Warnings = append(run.Warnings, profileWarnings(run)...)
	}
	dir := result.Dir(o.out, run)
	if err := result.Write(dir, run); err != nil {
		return err
	}
	if o.profile {
		if err := copyTree(filepath.Join(tmp, "run"), filepath.Join(dir, runner.ProfilesDir), func(path string) bool {
			fi, err := os.Stat(path)
			return err == nil && strings.HasSuffix(path, runner.ProfileExt) && fi.Size() > 0
		}); err != nil {
			return fmt.Errorf("bench: keeping the profiles: %w", err)
		}
	}
	if o.keepRecords {
		if err := keepRecords(filepath.Join(tmp, "run"), filepath.Join(dir, "records")); err != nil {
			return fmt.Errorf("bench: keeping the records: %w", err)
		}
	}
	analysis := compare.Analyze(run, compare.DefaultSettings())
	if err := report.WriteFiles(dir, analysis); err != nil {
		return err
	}
	if err := report.WriteTerminal(stdout, analysis); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\nresults: %s (wall time %s)\n", dir, time.Since(started).Round(time.Second))
	if runErr != nil {
		return runErr
	}
	return verdict(analysis, o.gate, stdout)
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

// skipDatabaseFaults skips the cells whose fault plan restarts or
// crashes the database server when the server is not the harness's own
// (provider dsn), and returns a note per skipped cell; it is an error
// when nothing is left to run.
func skipDatabaseFaults(m *scenarios.Matrix, provider dbenv.Provider) ([]string, error) {
	if provider != dbenv.ProviderDSN {
		return nil, nil
	}
	notes := m.SkipDatabaseFaults("the server comes from provider dsn, and a server the harness did not start is not its to restart or crash")
	if len(m.Cells) == 0 && m.Upgrade == nil {
		return notes, errors.New("bench: every cell chosen restarts or crashes the database, which provider dsn cannot take: nothing to run")
	}
	return notes, nil
}

// fastCrashRecovery sets recovery_init_sync_method=syncfs on a server
// the harness started, when the matrix crashes it: a start after a crash
// then syncs the data directory's file system once instead of fsyncing
// every file in it (2.5 to 5 s a crash on this machine while shared,
// 0.7 to 1 s with syncfs), which would otherwise take most of a window.
// It returns the run's note, or why it was not set.
func fastCrashRecovery(ctx context.Context, m *scenarios.Matrix, pg *dbenv.Postgres, info *dbenv.ServerInfo) string {
	crashes := slices.ContainsFunc(m.Cells, func(c scenarios.Cell) bool { return len(c.CrashDBAt) > 0 })
	if !crashes || pg.Provider() == dbenv.ProviderDSN {
		return ""
	}
	if info.VersionNum < 140000 {
		return "the server is older than PostgreSQL 14: its crash recovery fsyncs every file of the data directory (recovery_init_sync_method has no syncfs), which makes each crash of the crash cell slow"
	}
	conn, err := pgx.Connect(ctx, pg.AdminDSN())
	if err == nil {
		defer conn.Close(context.WithoutCancel(ctx))
		if _, err = conn.Exec(ctx, "ALTER SYSTEM SET recovery_init_sync_method = 'syncfs'"); err == nil {
			_, err = conn.Exec(ctx, "SELECT pg_reload_conf()")
		}
	}
	if err != nil {
		return fmt.Sprintf("recovery_init_sync_method=syncfs could not be set (%v): each crash of the crash cell fsyncs every file of the data directory", err)
	}
	return "the server runs crash recovery with recovery_init_sync_method=syncfs (set by the harness for the crash cell: a start after a crash syncs the file system once instead of fsyncing every file)"
}

// dataDirFS is the file system type of the server's data directory when
// the harness started the server on this machine, else why it is not
// known.
func dataDirFS(ctx context.Context, pg *dbenv.Postgres) string {
	if pg.Provider() != dbenv.ProviderLocal {
		return "unknown (the server's files are not on this machine)"
	}
	conn, err := pgx.Connect(ctx, pg.AdminDSN())
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	defer conn.Close(context.WithoutCancel(ctx))
	dir, err := pgmetrics.DataDirectory(ctx, conn)
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	fs, err := pgmetrics.FileSystemType(dir)
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	return fs
}

// machine describes the machine for run.json: never a hostname or a
// secret.
func machine() map[string]string {
	m := map[string]string{"os": runtime.GOOS, "arch": runtime.GOARCH, "cpus": strconv.Itoa(runtime.NumCPU()), "go": runtime.Version()}
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		if line, _, ok := strings.Cut(string(data), "\n"); ok {
			m["memory"] = strings.Join(strings.Fields(line)[1:], " ")
		}
	}
	return m
}

func upgradeOf(a *compare.Analysis) *result.Upgrade {
	if a == nil || a.Run == nil {
		return nil
	}
	return a.Run.Upgrade
}

// profileWarnings says which side has no CPU profile: its workers ignore
// cpu_profile_path (they predate it), or none was left.
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

// startPostgres starts the server of a command and returns it, what it
// runs with, and the function that stops it (a failure to stop is
// logged).
func startPostgres(ctx context.Context, opts dbenv.PostgresOptions) (*dbenv.Postgres, *dbenv.ServerInfo, func(), error) {
	pg, err := dbenv.StartPostgres(ctx, opts)
	if err != nil {
		return nil, nil, nil, err
	}
	stop := func() {
		sctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := pg.Stop(sctx); err != nil && opts.Logf != nil {
			opts.Logf("warning: stopping PostgreSQL: %v", err)
		}
	}
	info, err := pg.Info(ctx)
	if err != nil {
		stop()
		return nil, nil, nil, err
	}
	return pg, info, stop, nil
}
