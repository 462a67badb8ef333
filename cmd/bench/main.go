// Command bench compares two git revisions of relaybus: it builds the
// worker of each, runs every scenario cell as ABBA-interleaved windows on
// fresh databases, validates every run and reports the differences.
//
//	go run ./cmd/bench --base v0.1.0 --candidate HEAD --quick
//	go run ./cmd/bench --base main --candidate WORKTREE --smoke --gate deliveries_per_s:5
//	bench report results/<run>/run.json
//	bench gate --rules deliveries_per_s:5 results/<run>/run.json
//	bench worker   (protocol 1 entry point; the harness starts it)
//	bench version
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/berkcansavur/relaybus/bench"
	"github.com/berkcansavur/relaybus/bench/protocol"
	"github.com/berkcansavur/relaybus/bench/report"
	"github.com/berkcansavur/relaybus/bench/scenarios"
	"github.com/berkcansavur/relaybus/bench/worker"
	"github.com/berkcansavur/relaybus/internal/dbenv"
	"github.com/berkcansavur/relaybus/relaybus"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "worker" {
		// Protocol 1 entry point: it must never change. The worker handles
		// SIGTERM through ctx.
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
		code := worker.Main(ctx, os.Stdin, os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	bench.KillAll()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		var ee exitError
		if errors.As(err, &ee) {
			os.Exit(int(ee))
		}
		os.Exit(1)
	}
}

// exitError carries an exit status for failures that are not usage
// errors (2 = usage).
type exitError int

func (e exitError) Error() string { return "exit " + strconv.Itoa(int(e)) }

const usage = `usage:
  bench --base REF --candidate REF [--quick|--full|--smoke] [flags]
  bench report RUN.json
  bench gate --rules METRIC:PCT[,...] RUN.json
  bench version
  bench worker  (started by the harness)

REF is a tag, branch, commit, HEAD, vX.Y.Z (a tag or the commit with the
trailer "Release: vX.Y.Z"), or WORKTREE (the working tree, uncommitted
changes included).`

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 {
		switch args[0] {
		case "worker":
			return errors.New("bench: worker is the protocol entry point; run it as the first argument of the binary")
		case "version":
			if len(args) > 1 {
				return errors.New("bench: version takes no arguments")
			}
			fmt.Fprintf(stdout, "relaybus %s (worker protocol %d, %s)\n", relaybus.Version, protocol.Version, runtime.Version())
			return nil
		case "report":
			return runReport(args[1:], stdout)
		case "gate":
			return runGate(args[1:], stdout)
		case "help", "-h", "--help":
			fmt.Fprintln(stdout, usage)
			return nil
		}
	}
	return runCompare(ctx, args, stdout, stderr)
}

type options struct {
	base, candidate       string
	quick, full, smoke    bool
	scenarios, stores     string
	rounds                int
	window, warmup, drain time.Duration
	provider, dsn, image  string
	mongoURI              string
	out, cacheDir, gate   string
	plantDelay            time.Duration
	allowFsyncOff         bool
	repo                  string
}

func parseCompare(args []string, stderr io.Writer) (*options, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprintln(stderr, usage+"\n\nflags:"); fs.PrintDefaults() }
	o := &options{}
	fs.StringVar(&o.base, "base", "", "base ref (required)")
	fs.StringVar(&o.candidate, "candidate", "", "candidate ref (required; WORKTREE for uncommitted changes)")
	fs.BoolVar(&o.quick, "quick", false, "small matrix, about 10 minutes on 2 cores (the default)")
	fs.BoolVar(&o.full, "full", false, "the seed's full matrix (hours)")
	fs.BoolVar(&o.smoke, "smoke", false, "one cell, short windows (CI)")
	fs.StringVar(&o.scenarios, "scenarios", "", "scenario numbers to run, e.g. 1,2,3 (default: all of the mode)")
	fs.StringVar(&o.stores, "stores", "postgres", "stores: postgres, mongo or all")
	fs.IntVar(&o.rounds, "rounds", 0, "ABBA rounds per cell (0: the mode's)")
	fs.DurationVar(&o.window, "window", 0, "measured window per run (0: the mode's)")
	fs.DurationVar(&o.warmup, "warmup", -1, "discarded warm-up before each window (-1: the mode's)")
	fs.DurationVar(&o.drain, "drain-timeout", bench.DefaultDrainTimeout, "a run that does not drain within this is INVALID")
	fs.StringVar(&o.provider, "db-provider", "auto", "PostgreSQL: auto, local, testcontainers or dsn")
	fs.StringVar(&o.dsn, "dsn", "", "PostgreSQL server for --db-provider dsn (superuser; databases are created per window)")
	fs.StringVar(&o.image, "image", "", "PostgreSQL image for testcontainers")
	fs.StringVar(&o.mongoURI, "mongo-uri", os.Getenv("RELAYBUS_TEST_MONGO_URI"), "MongoDB replica set URI")
	fs.StringVar(&o.out, "out", "results", "results directory")
	fs.StringVar(&o.cacheDir, "cache-dir", "", "build cache (default $XDG_CACHE_HOME/relaybus-bench)")
	fs.StringVar(&o.gate, "gate", "", "fail when a metric regresses significantly past a threshold: METRIC:PCT[,...]")
	fs.DurationVar(&o.plantDelay, "plant-candidate-delay", 0, "self-test: add this cost to every candidate delivery")
	fs.BoolVar(&o.allowFsyncOff, "allow-fsync-off", false, "run even when the server has fsync=off")
	fs.StringVar(&o.repo, "repo", ".", "git repository to resolve refs in")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("bench: unexpected argument %q (flags come before arguments; see bench --help)", fs.Arg(0))
	}
	if o.base == "" || o.candidate == "" {
		return nil, errors.New("bench: --base and --candidate are required (e.g. --base v0.1.0 --candidate HEAD)")
	}
	n := 0
	for _, b := range []bool{o.quick, o.full, o.smoke} {
		if b {
			n++
		}
	}
	if n > 1 {
		return nil, errors.New("bench: choose one of --quick, --full, --smoke")
	}
	if o.rounds < 0 || o.rounds > scenarios.MaxRounds {
		return nil, fmt.Errorf("bench: --rounds %d outside 0..%d", o.rounds, scenarios.MaxRounds)
	}
	if o.window != 0 && (o.window < scenarios.MinWindow || o.window > scenarios.MaxWindow) {
		return nil, fmt.Errorf("bench: --window %s outside %s..%s", o.window, scenarios.MinWindow, scenarios.MaxWindow)
	}
	if o.drain <= 0 {
		return nil, errors.New("bench: --drain-timeout must be positive")
	}
	if o.plantDelay < 0 || o.plantDelay > 10*time.Second {
		return nil, errors.New("bench: --plant-candidate-delay must be within 0..10s")
	}
	if o.gate != "" {
		if _, err := report.ParseGateRules(o.gate); err != nil {
			return nil, err
		}
	}
	return o, nil
}

func (o *options) matrix() (scenarios.Matrix, error) {
	mode := "quick"
	switch {
	case o.full:
		mode = "full"
	case o.smoke:
		mode = "smoke"
	}
	m, err := scenarios.ByMode(mode)
	if err != nil {
		return m, err
	}
	if o.scenarios != "" {
		var nums []int
		for _, f := range strings.Split(o.scenarios, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil {
				return m, fmt.Errorf("bench: --scenarios: %q is not a scenario number", f)
			}
			nums = append(nums, n)
		}
		if err := m.Filter(nums); err != nil {
			return m, err
		}
		m.Mode = report.ModeCustom
	}
	if o.rounds > 0 {
		m.Rounds, m.Mode = o.rounds, report.ModeCustom
	}
	if o.window > 0 {
		m.Window, m.Mode = o.window, report.ModeCustom
	}
	if o.warmup >= 0 {
		m.Warmup = o.warmup
	}
	return m, m.Validate()
}

func runCompare(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseCompare(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	m, err := o.matrix()
	if err != nil {
		return err
	}
	logf := func(format string, a ...any) { fmt.Fprintf(stderr, format+"\n", a...) }
	var warnings []string
	switch o.stores {
	case "postgres":
	case "mongo":
		return errors.New("bench: --stores mongo: the MongoDB runner is not wired into this harness yet (metrics_mongo.go reads oplog, journal and opcounters, but no window loop drives a replica set); use --stores postgres")
	case "all":
		warnings = append(warnings, "mongo skipped: the MongoDB runner is not wired into this harness yet")
		logf("warning: %s", warnings[0])
	default:
		return fmt.Errorf("bench: --stores %q: want postgres, mongo or all", o.stores)
	}

	base, err := bench.ResolveRef(ctx, o.repo, o.base)
	if err != nil {
		return err
	}
	cand, err := bench.ResolveRef(ctx, o.repo, o.candidate)
	if err != nil {
		return err
	}
	cacheDir := o.cacheDir
	if cacheDir == "" {
		if cacheDir, err = bench.DefaultCacheDir(); err != nil {
			return err
		}
	}
	tmp, err := os.MkdirTemp("", "relaybus-bench-")
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	defer os.RemoveAll(tmp)
	b := &bench.Builder{RepoDir: o.repo, CacheDir: cacheDir, Logf: logf}
	sides := []*bench.Side{{Name: report.SideBase, Ref: base}, {Name: report.SideCandidate, Ref: cand,
		ExtraCostPerDeliveryUs: int(o.plantDelay / time.Microsecond)}}
	for _, s := range sides {
		if s.Bin, err = b.Build(ctx, s.Name, s.Ref, tmp); err != nil {
			return err
		}
		if s.Hello, err = bench.Handshake(ctx, s.Bin); err != nil {
			return err
		}
		logf("%s %s: relaybus %s, protocol %d", s.Name, s.Ref, s.Hello.Version, s.Hello.Protocol)
	}

	provider, err := dbenv.ParseProvider(o.provider)
	if err != nil {
		return err
	}
	pg, err := dbenv.StartPostgres(ctx, dbenv.PostgresOptions{Provider: provider, DSN: o.dsn, Image: o.image,
		Settings: map[string]string{"shared_preload_libraries": "pg_stat_statements"}, Logf: logf})
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := pg.Stop(sctx); err != nil {
			logf("warning: stopping PostgreSQL: %v", err)
		}
	}()
	info, err := pg.Info(ctx)
	if err != nil {
		return err
	}
	if err := bench.CheckFsync(info.Settings, o.allowFsyncOff); err != nil {
		return err
	}
	logf("PostgreSQL %s (%s), fsync=%s", info.Version, info.Provider, info.Settings["fsync"])

	started := time.Now()
	runDir := filepath.Join(tmp, "run")
	r := &bench.Runner{Matrix: m, Base: sides[0], Candidate: sides[1], PG: pg, PGInfo: info,
		RunDir: runDir, DrainTimeout: o.drain, Logf: logf}
	result, runErr := r.Run(ctx)
	if result == nil {
		return runErr
	}
	result.Base, result.Candidate = refInfo(sides[0]), refInfo(sides[1])
	result.Machine = machine()
	result.Databases = []report.DatabaseInfo{{Kind: "postgres", Provider: string(info.Provider), Version: info.Version, Settings: info.Settings}}
	result.Warnings = append(warnings, result.Warnings...)
	if o.plantDelay > 0 {
		result.Warnings = append(result.Warnings, fmt.Sprintf("self-test: candidate dispatchers carry a planted delay of %s per delivery", o.plantDelay))
	}

	dir := report.ResultsDir(o.out, result)
	if dir == o.out || dir == "" {
		// The report package names the directory; until it does, use the
		// documented <date>-<base>-vs-<candidate>.
		dir = filepath.Join(o.out, fmt.Sprintf("%s-%s-vs-%s", started.UTC().Format("2006-01-02T150405"), safe(o.base), safe(o.candidate)))
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	data, err := result.Encode()
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "run.json"), data, 0o644); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	analysis := report.Analyze(result, report.DefaultSettings())
	if err := report.WriteResults(o.out, analysis); err != nil {
		return err
	}
	if err := report.WriteTerminal(stdout, analysis); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\nresults: %s (wall time %s)\n", dir, time.Since(started).Round(time.Second))
	if runErr != nil {
		return runErr
	}
	return verdict(result, analysis, o.gate, stdout)
}

// verdict fails the run when any sample is INVALID or the gate fails.
func verdict(result *report.Run, a *report.Analysis, gate string, stdout io.Writer) error {
	invalid := 0
	for _, c := range result.Cells {
		for _, s := range c.Samples {
			if !s.IsValid() {
				invalid++
				fmt.Fprintf(stdout, "INVALID: %s / %s, round %d %s\n", c.Scenario, c.Name, s.Round, s.Side)
			}
		}
	}
	var failed []string
	if invalid > 0 {
		failed = append(failed, fmt.Sprintf("%d INVALID run(s)", invalid))
	}
	if gate != "" {
		rules, err := report.ParseGateRules(gate)
		if err != nil {
			return err
		}
		for _, v := range report.Gate(a, rules) {
			fmt.Fprintf(stdout, "GATE FAILED: %s\n", v.Message)
			failed = append(failed, "gate: "+v.Message)
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("bench: %s: %w", strings.Join(failed, "; "), exitError(1))
	}
	return nil
}

func refInfo(s *bench.Side) report.RefInfo {
	return report.RefInfo{Ref: s.Ref.Name, SHA: s.Ref.SHA, Version: s.Hello.Version, Dirty: s.Ref.Dirty,
		Protocol: s.Hello.Protocol, Capabilities: s.Hello.Capabilities}
}

func machine() map[string]string {
	m := map[string]string{"os": runtime.GOOS, "arch": runtime.GOARCH, "cpus": strconv.Itoa(runtime.NumCPU()), "go": runtime.Version()}
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		if line, _, ok := strings.Cut(string(data), "\n"); ok {
			m["memory"] = strings.Join(strings.Fields(line)[1:], " ")
		}
	}
	return m
}

func safe(ref string) string {
	return strings.Map(func(r rune) rune {
		if r == '/' || r == ' ' || r == ':' || r == '~' || r == '^' {
			return '_'
		}
		return r
	}, ref)
}

func runReport(args []string, stdout io.Writer) error {
	if len(args) != 1 {
		return errors.New("bench: usage: bench report RUN.json")
	}
	run, err := report.LoadRun(args[0])
	if err != nil {
		return err
	}
	return report.WriteTerminal(stdout, report.Analyze(run, report.DefaultSettings()))
}

func runGate(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("gate", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	rules := fs.String("rules", "", "METRIC:PCT[,...]")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("bench: gate: %w", err)
	}
	if *rules == "" || fs.NArg() != 1 {
		return errors.New("bench: usage: bench gate --rules METRIC:PCT[,...] RUN.json")
	}
	run, err := report.LoadRun(fs.Arg(0))
	if err != nil {
		return err
	}
	return verdict(run, report.Analyze(run, report.DefaultSettings()), *rules, stdout)
}
