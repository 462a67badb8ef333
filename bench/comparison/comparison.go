// Package comparison runs a comparison of two sides end to end, the
// pipeline under `bench compare`: resolve both refs (bench/refs), build
// each side's worker (bench/build), read its hello, fit the matrix to
// the sides (bench/peer), start the server, run every window
// (bench/runner), write the result set (bench/result), analyse it
// (bench/compare) and write its report files (bench/report). cmd/bench
// parses the flags into Options and prints what Run returns.
package comparison

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/berkcansavur/relaybus/bench/build"
	"github.com/berkcansavur/relaybus/bench/compare"
	"github.com/berkcansavur/relaybus/bench/peer"
	"github.com/berkcansavur/relaybus/bench/pgmetrics"
	"github.com/berkcansavur/relaybus/bench/proc"
	"github.com/berkcansavur/relaybus/bench/protocol"
	"github.com/berkcansavur/relaybus/bench/refs"
	"github.com/berkcansavur/relaybus/bench/report"
	"github.com/berkcansavur/relaybus/bench/result"
	"github.com/berkcansavur/relaybus/bench/runner"
	"github.com/berkcansavur/relaybus/bench/scenarios"
	"github.com/berkcansavur/relaybus/internal/dbenv"
)

// harnessConnections is what a window opens beside the cell's own pools:
// the drain dispatchers' pools, the runner's connections and margin.
const harnessConnections = 60

// Options are a comparison's settings, checked by the command that
// parsed them (the matrix is valid).
type Options struct {
	// Base and Candidate are the refs as given (bench/refs.Resolve).
	Base, Candidate string
	Matrix          scenarios.Matrix
	// Warnings are the command line's own (a store skipped, cells left
	// out); the run's warnings start with them.
	Warnings []string
	// DrainTimeout bounds each window's drain (runner.Step).
	DrainTimeout time.Duration
	// The PostgreSQL server (dbenv.PostgresOptions).
	Provider   dbenv.Provider
	DSN, Image string
	// Out receives the result set's folder; CacheDir keeps built
	// binaries ("" is build.DefaultCacheDir); Repo is the git repository
	// the refs are resolved in.
	Out, CacheDir, Repo string
	// PlantDelay is added to every candidate delivery (the self-test).
	PlantDelay time.Duration
	// AllowFsyncOff runs on a server with fsync=off.
	AllowFsyncOff bool
	// KeepRecords copies every window's folder into the result set.
	KeepRecords bool
	// Profile asks for CPU profiles and statement detail.
	Profile bool
	// Logf prints progress; nil is silent.
	Logf func(format string, args ...any)
}

// Outcome is what a comparison produced.
type Outcome struct {
	Run      *result.Run
	Analysis *compare.Analysis
	// Dir is the result set's folder.
	Dir string
	// Wall is the comparison's wall time from the first window.
	Wall time.Duration
}

// Run runs the comparison. When the windows stop early (cancelled), it
// still writes and returns what ran, with the error.
func Run(ctx context.Context, o Options) (*Outcome, error) {
	logf := o.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	head := result.Run{Warnings: append([]string(nil), o.Warnings...)}
	warn := func(w string) {
		head.Warnings = append(head.Warnings, w)
		logf("warning: %s", w)
	}
	note := func(n string) {
		head.Notes = append(head.Notes, n)
		logf("note: %s", n)
	}
	for _, w := range o.Warnings {
		logf("warning: %s", w)
	}

	tmp, err := os.MkdirTemp("", "relaybus-bench-")
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	defer os.RemoveAll(tmp)
	sides, err := buildSides(ctx, o, tmp, logf)
	if err != nil {
		return nil, err
	}
	base, cand := sides[0], sides[1]
	head.Base, head.Candidate = base.info, cand.info
	m := o.Matrix
	notes, err := peer.Fit(&m, []peer.Side{base.fitSide(), cand.fitSide()})
	if err != nil {
		return nil, err
	}
	for _, n := range notes {
		note(n)
	}
	if !base.kind.IsPeer() {
		if n := m.Upgrade.FitBaseLease(base.info.Version); n != "" {
			note(n)
		}
	}

	// Room for every pool a window opens, the drain dispatchers' and the
	// runner's own connections, and PostgreSQL's reserved ones.
	conns := max(100, m.Connections(harnessConnections))
	pg, info, stop, err := StartPostgres(ctx, dbenv.PostgresOptions{Provider: o.Provider, DSN: o.DSN, Image: o.Image,
		Settings: map[string]string{"shared_preload_libraries": "pg_stat_statements", "max_connections": strconv.Itoa(conns)}, Logf: logf})
	if err != nil {
		return nil, err
	}
	defer stop()
	if err := pgmetrics.CheckFsync(info.Settings, o.AllowFsyncOff); err != nil {
		return nil, err
	}
	skipNotes, err := skipDatabaseFaults(&m, pg.Provider())
	for _, n := range skipNotes {
		note(n)
	}
	if err != nil {
		return nil, err
	}
	if n := fastCrashRecovery(ctx, &m, pg, info); n != "" {
		note(n)
	}
	dataFS := dataDirFS(ctx, pg)
	logf("PostgreSQL %s (%s), fsync=%s, data directory on %s", info.Version, info.Provider, info.Settings["fsync"], dataFS)
	if dataFS == "tmpfs" {
		warn("the server's data directory is on tmpfs: fsync writes to memory, so commit and WAL costs are not a disk's")
	}
	if !info.PgStatStatementsLoaded {
		warn("pg_stat_statements is not loaded by the server: stmts_per_delivery is not measured")
	}
	if o.PlantDelay > 0 {
		head.Warnings = append(head.Warnings, fmt.Sprintf("self-test: candidate dispatchers carry a planted delay of %s per delivery", o.PlantDelay))
	}
	head.Machine = Machine()
	head.Databases = []result.DatabaseInfo{{Kind: "postgres", Provider: string(info.Provider), Version: info.Version,
		Settings: info.Settings, DataDirFS: dataFS}}

	started := time.Now()
	server := runner.NewPGServer(pg, info.PgStatStatementsLoaded)
	server.StatementDetail = o.Profile
	step := &runner.Step{Server: server, Launch: runner.ProcLauncher, Profile: o.Profile,
		Warmup: m.Warmup, Window: m.Window, DrainTimeout: o.DrainTimeout, Logf: logf}
	runDir := filepath.Join(tmp, "run")
	r, err := runner.New(m, base.side, cand.side, step, runDir, logf)
	if err != nil {
		return nil, err
	}
	run, runErr := r.Run(ctx, head)
	dir := result.Dir(o.Out, run)
	if err := result.Write(dir, run); err != nil {
		return nil, err
	}
	if err := keepFiles(runDir, dir, o.Profile, o.KeepRecords); err != nil {
		return nil, err
	}
	analysis := compare.Analyze(run, compare.DefaultSettings())
	if err := report.WriteFiles(dir, analysis); err != nil {
		return nil, err
	}
	return &Outcome{Run: run, Analysis: analysis, Dir: dir, Wall: time.Since(started)}, runErr
}

// side is one side as the comparison builds it.
type side struct {
	side *runner.Side
	ref  refs.Ref
	info result.RefInfo
	kind *peer.Descriptor // from its hello
}

func (s *side) fitSide() peer.Side {
	return peer.Side{Name: s.side.Name, Label: fmt.Sprintf("%s (%s)", s.side.Name, s.ref.Name), Caps: s.info.Capabilities}
}

// buildSides resolves and builds base and candidate and reads their
// hellos: what kind of worker each is decides how it is driven and what
// is read of its database.
func buildSides(ctx context.Context, o Options, tmp string, logf func(string, ...any)) ([]*side, error) {
	b, err := build.NewBuilder(o.Repo, o.CacheDir, logf)
	if err != nil {
		return nil, err
	}
	// Both refs are resolved before either is built: a ref that does not
	// resolve fails at once.
	resolved := make([]refs.Ref, 2)
	for i, name := range []string{o.Base, o.Candidate} {
		if resolved[i], err = refs.Resolve(ctx, o.Repo, name); err != nil {
			return nil, err
		}
	}
	var out []*side
	for i, s := range []struct {
		name  string
		plant time.Duration
	}{{result.SideBase, 0}, {result.SideCandidate, o.PlantDelay}} {
		ref := resolved[i]
		rs := &runner.Side{Name: s.name, Code: ref.SHA, ExtraCostPerDeliveryUs: int(s.plant / time.Microsecond)}
		if ref.Dirty {
			rs.Code += "+dirty"
		}
		if rs.Bin, err = b.Build(ctx, s.name, ref, tmp); err != nil {
			return nil, err
		}
		hello, err := proc.Handshake(ctx, rs.Bin)
		if err != nil {
			return nil, err
		}
		kind := peer.OfHello(hello.Capabilities)
		rs.NoKeyOrder = protocol.HasCapability(hello.Capabilities, protocol.CapabilityNoKeyOrder)
		rs.CompletionRecords = protocol.HasCapability(hello.Capabilities, protocol.CapabilityCompletionRecords)
		rs.Tables = kind.Tables
		logf("%s", helloLine(s.name, ref, kind, hello))
		out = append(out, &side{side: rs, ref: ref, kind: kind, info: result.RefInfo{Ref: ref.Name, SHA: ref.SHA, Version: hello.Version,
			Dirty: ref.Dirty, Protocol: hello.Protocol, Capabilities: hello.Capabilities}})
	}
	return out, nil
}

// helloLine is the progress line of a side's hello.
func helloLine(name string, ref refs.Ref, kind *peer.Descriptor, hello *protocol.Message) string {
	if kind.IsPeer() {
		return fmt.Sprintf("%s %s: peer %s (%s), protocol %d, capabilities %s", name, ref, kind.Title, hello.Version, hello.Protocol, strings.Join(hello.Capabilities, " "))
	}
	return fmt.Sprintf("%s %s: relaybus %s, protocol %d", name, ref, hello.Version, hello.Protocol)
}
