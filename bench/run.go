package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/berkcansavur/relaybus/bench/protocol"
	"github.com/berkcansavur/relaybus/bench/record"
	"github.com/berkcansavur/relaybus/bench/report"
	"github.com/berkcansavur/relaybus/bench/scenarios"
	"github.com/berkcansavur/relaybus/bench/validate"
	"github.com/berkcansavur/relaybus/internal/dbenv"
)

// Runner limits and pauses.
const (
	// DefaultDrainTimeout bounds the drain after a window; a window that
	// does not drain in time is INVALID.
	DefaultDrainTimeout = 3 * time.Minute
	// drainPoll is how often the drain asks the store (role inspect)
	// whether anything is left.
	drainPoll = 500 * time.Millisecond
	// readyTimeout bounds how long a worker may take to connect.
	readyTimeout = time.Minute
	// setupTimeout bounds the setup and preload roles.
	setupTimeout = 10 * time.Minute
	// backlogSample is how often the backlog is sampled in a window.
	backlogSample = 200 * time.Millisecond
	// drainDispatchers are started after each window to drain it.
	drainDispatchers = 2
	// maxLatencies bounds the raw latencies kept per sample for plots.
	maxLatencies = 2000
)

// Side is one side of the comparison.
type Side struct {
	Name  string // report.SideBase or report.SideCandidate
	Ref   Ref
	Bin   string
	Hello *protocol.Message
	// ExtraCostPerDeliveryUs is planted on this side's dispatchers (the
	// harness's self-test: it must show up as a regression).
	ExtraCostPerDeliveryUs int
}

// Runner runs a matrix of cells against one PostgreSQL server.
type Runner struct {
	Matrix       scenarios.Matrix
	Base         *Side
	Candidate    *Side
	PG           *dbenv.Postgres
	PGInfo       *dbenv.ServerInfo
	RunDir       string // per-window record files and worker logs
	DrainTimeout time.Duration
	Logf         func(format string, args ...any)

	runID      string
	statements bool
	warnings   []string
	started    time.Time
	windowsRun int
	windows    int
}

func (r *Runner) logf(format string, args ...any) {
	if r.Logf != nil {
		r.Logf(format, args...)
	}
}

func (r *Runner) warnf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	r.warnings = append(r.warnings, msg)
	r.logf("warning: %s", msg)
}

// Run runs every cell in ABBA-interleaved rounds and returns the result
// (cells with their samples, invalid ones included and marked).
func (r *Runner) Run(ctx context.Context) (*report.Run, error) {
	if err := r.Matrix.Validate(); err != nil {
		return nil, err
	}
	if r.DrainTimeout <= 0 {
		r.DrainTimeout = DefaultDrainTimeout
	}
	r.runID = strconv.FormatInt(time.Now().Unix()%1_000_000, 36)
	r.started = time.Now()
	r.windows = len(r.Matrix.Cells) * r.Matrix.Rounds * 2
	if r.PGInfo != nil {
		r.statements = r.PGInfo.PgStatStatementsLoaded
		if !r.statements {
			r.warnf("pg_stat_statements is not loaded by the server: stmts_per_delivery is not measured")
		}
	}
	run := &report.Run{Schema: report.SchemaVersion, Mode: r.Matrix.Mode, Started: r.started}
	for i := range r.Matrix.Cells {
		c := &r.Matrix.Cells[i]
		cell := &report.Cell{Scenario: scenarios.Names[c.Scenario], Store: "postgres", Name: c.Name, Config: c.Config()}
		run.Cells = append(run.Cells, cell)
		order := 0
		for round := 1; round <= r.Matrix.Rounds; round++ {
			sides := []*Side{r.Base, r.Candidate}
			if round%2 == 0 {
				sides = []*Side{r.Candidate, r.Base}
			}
			for _, side := range sides {
				order++
				if err := ctx.Err(); err != nil {
					return run, err
				}
				r.logf("cell %d/%d [%s] %s: round %d/%d, %s (%s left)", i+1, len(r.Matrix.Cells), cell.Scenario, c.Name,
					round, r.Matrix.Rounds, side.Name, r.eta())
				s := r.window(ctx, i, c, side, round)
				s.Order = order
				cell.Samples = append(cell.Samples, s)
				r.windowsRun++
				if s.Error != "" {
					r.logf("  INVALID: %s", s.Error)
				} else if s.Validation != nil && !s.Validation.Valid {
					r.logf("  INVALID: %s", describeValidation(s.Validation))
				} else {
					r.logf("  %s", headline(s))
				}
			}
		}
	}
	run.Finished = time.Now()
	run.Warnings = r.warnings
	return run, nil
}

func (r *Runner) eta() string {
	if r.windowsRun == 0 {
		per := r.Matrix.Warmup + r.Matrix.Window + 8*time.Second // setup, preload, drain: a guess until measured
		return "~" + (per * time.Duration(r.windows)).Round(time.Second).String()
	}
	per := time.Since(r.started) / time.Duration(r.windowsRun)
	return "~" + (per * time.Duration(r.windows-r.windowsRun)).Round(time.Second).String()
}

func headline(s *report.Sample) string {
	var parts []string
	for _, k := range []string{report.MetricDeliveriesPerS, report.MetricEventsPerS, report.MetricWALBytesPerDelivery, report.MetricWALBytesPerEvent, report.MetricE2EP50Ms} {
		if v, ok := s.Metrics[k]; ok {
			parts = append(parts, fmt.Sprintf("%s %.1f", k, v))
		}
	}
	return "VALID " + strings.Join(parts, ", ")
}

func describeValidation(v *validate.Result) string {
	s := fmt.Sprintf("lost %d (poison %d), unexpected %d, duplicates %d, order violations %d, pending %d, processing %d, dead unexpected %d, poison handled %d",
		v.Lost, v.LostPoison, v.Unexpected, v.Duplicates, v.OrderViolations, v.Pending, v.Processing, v.DeadUnexpected, v.PoisonHandled)
	if len(v.Examples) > 0 {
		s += "; e.g. " + v.Examples[0]
	}
	return s
}

// window runs one side of one cell once. Every failure becomes the
// sample's Error (an INVALID sample), never a silently dropped window.
func (r *Runner) window(ctx context.Context, cellIdx int, c *scenarios.Cell, side *Side, round int) *report.Sample {
	s := &report.Sample{Side: side.Name, Round: round, Metrics: map[string]float64{}}
	w := &windowRun{r: r, c: c, side: side, sample: s,
		// The name is also the event id prefix, stored in every event,
		// delivery and index entry: both sides must use names of the same
		// length, or the longer side writes more WAL per event ("candidate"
		// against "base" made an A/A run 1-2% "worse").
		name: fmt.Sprintf("rb_%s_c%02d_r%d_%s", r.runID, cellIdx+1, round, side.Name[:1])}
	w.dir = filepath.Join(r.RunDir, fmt.Sprintf("cell%02d", cellIdx+1), fmt.Sprintf("r%d-%s", round, side.Name))
	if err := os.MkdirAll(w.dir, 0o755); err != nil {
		s.Error = err.Error()
		return s
	}
	err := w.run(ctx)
	w.stopAll()
	if w.dbCreated {
		dctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if derr := r.PG.DropDatabase(dctx, w.name); derr != nil {
			r.warnf("dropping %s: %v", w.name, derr)
		}
		cancel()
	}
	if err != nil {
		s.Error = err.Error()
	}
	slices.Sort(s.Ignored)
	s.Ignored = slices.Compact(s.Ignored)
	return s
}

// windowRun is the state of one window.
type windowRun struct {
	r      *Runner
	c      *scenarios.Cell
	side   *Side
	sample *report.Sample
	name   string // database name and id prefix
	dir    string
	dsn    string

	dbCreated   bool
	pubs, disps []*Proc
	recordFiles []string
	prefixes    []string // event id prefixes (for poison lookup)
	restarts    int
}

func (w *windowRun) store(pool int) protocol.Store {
	return protocol.Store{Kind: "postgres", DSN: w.dsn, PoolSize: pool}
}

func (w *windowRun) config(role, name string, pool int) protocol.Config {
	cfg := protocol.Config{Protocol: 1, Role: role, Name: name, Store: w.store(pool), Workload: w.c.Workload}
	if role != protocol.RoleSetup && role != protocol.RoleInspect {
		cfg.RecordPath = filepath.Join(w.dir, name+".rec")
		w.recordFiles = append(w.recordFiles, cfg.RecordPath)
	}
	return cfg
}

// runOnce runs a role to its end (setup, preload, inspect).
func (w *windowRun) runOnce(ctx context.Context, cfg protocol.Config) (*protocol.Message, error) {
	ctx, cancel := context.WithTimeout(ctx, setupTimeout)
	defer cancel()
	p, err := StartWorker(w.side.Bin, cfg, filepath.Join(w.dir, cfg.Name+".log"))
	if err != nil {
		return nil, err
	}
	go func() {
		<-ctx.Done()
		p.Kill()
	}()
	if m, err := p.WaitReady(ctx); err == nil {
		w.sample.Ignored = append(w.sample.Ignored, m.Ignored...)
	}
	return p.Wait(ctx)
}

func (w *windowRun) startPublisher(idx int, prefix string) (*Proc, error) {
	c := w.c
	cfg := w.config(protocol.RolePublisher, fmt.Sprintf("pub-%d%s", idx, strings.TrimPrefix(prefix, w.name+"-pub")), c.PublisherPool)
	cfg.Workload.IDPrefix = prefix
	cfg.Publisher = c.Publisher
	cfg.Publisher.StartIndex = int64(idx)
	cfg.Publisher.Stride = int64(c.PublisherProcs)
	w.prefixes = append(w.prefixes, prefix)
	return StartWorker(w.side.Bin, cfg, strings.TrimSuffix(cfg.RecordPath, ".rec")+".log")
}

func (w *windowRun) startDispatcher(name string, d protocol.Dispatcher, pool int) (*Proc, error) {
	cfg := w.config(protocol.RoleDispatcher, name, pool)
	cfg.Dispatcher = d
	cfg.Dispatcher.ExtraCostPerDeliveryUs = w.side.ExtraCostPerDeliveryUs
	return StartWorker(w.side.Bin, cfg, filepath.Join(w.dir, name+".log"))
}

func (w *windowRun) stopAll() {
	var wg sync.WaitGroup
	for _, p := range append(append([]*Proc(nil), w.pubs...), w.disps...) {
		wg.Add(1)
		go func() { defer wg.Done(); p.Stop(DefaultStopTimeout) }()
	}
	wg.Wait()
}

func (w *windowRun) run(ctx context.Context) error {
	r, c := w.r, w.c
	dsn, err := r.PG.CreateDatabase(ctx, w.name)
	if err != nil {
		return err
	}
	w.dsn, w.dbCreated = dsn, true
	if r.statements {
		if err := withConn(ctx, dsn, func(conn *pgx.Conn) error {
			_, err := ensurePgStatStatements(ctx, conn)
			return err
		}); err != nil {
			return err
		}
	}
	if _, err := w.runOnce(ctx, w.config(protocol.RoleSetup, "setup", 2)); err != nil {
		return fmt.Errorf("setup: %w", err)
	}
	if c.Preload > 0 {
		cfg := w.config(protocol.RolePreload, "preload", c.PreloadPublishers+2)
		cfg.Workload.IDPrefix = w.name + "-pre-"
		cfg.Publisher = protocol.Publisher{Publishers: c.PreloadPublishers, Batch: c.PreloadBatch, Events: c.Preload}
		w.prefixes = append(w.prefixes, cfg.Workload.IDPrefix)
		if _, err := w.runOnce(ctx, cfg); err != nil {
			return fmt.Errorf("preload: %w", err)
		}
	}
	// Start the window's processes and wait until all are ready, so the
	// clock starts with everyone connected.
	for i := 0; i < c.DispatcherProcs; i++ {
		p, err := w.startDispatcher(fmt.Sprintf("disp-%d", i), c.Dispatcher, c.DispatcherPool)
		if err != nil {
			return err
		}
		w.disps = append(w.disps, p)
	}
	for i := 0; i < c.PublisherProcs; i++ {
		p, err := w.startPublisher(i, fmt.Sprintf("%s-pub%d-", w.name, i))
		if err != nil {
			return err
		}
		w.pubs = append(w.pubs, p)
	}
	rctx, cancel := context.WithTimeout(ctx, readyTimeout)
	for _, p := range append(append([]*Proc(nil), w.disps...), w.pubs...) {
		m, err := p.WaitReady(rctx)
		if err != nil {
			cancel()
			return err
		}
		w.sample.Ignored = append(w.sample.Ignored, m.Ignored...)
	}
	cancel()

	if err := sleepCtx(ctx, r.Matrix.Warmup); err != nil {
		return err
	}
	var before, after *PGSnapshot
	if err := withConn(ctx, dsn, func(conn *pgx.Conn) error {
		if err := checkpoint(ctx, conn); err != nil {
			return err
		}
		before, err = pgSnapshot(ctx, conn, r.statements)
		return err
	}); err != nil {
		return err
	}
	t0 := time.Now()
	backlogMax, err := w.duringWindow(ctx, t0)
	if err != nil {
		return err
	}
	t1 := time.Now()
	var wal float64
	if err := withConn(ctx, dsn, func(conn *pgx.Conn) error {
		var err error
		if after, err = pgSnapshot(ctx, conn, r.statements); err != nil {
			return err
		}
		wal, err = walBytes(ctx, conn, before.WALLSN, after.WALLSN)
		return err
	}); err != nil {
		return err
	}

	// Stop the publishers, then drain.
	var pubDone []*protocol.Message
	for _, p := range w.pubs {
		p.Stop(DefaultStopTimeout)
		m, err := p.Wait(ctx)
		if err != nil {
			return fmt.Errorf("publisher: %w", err)
		}
		pubDone = append(pubDone, m)
	}
	// Drain with extra fast dispatchers: the window's own may be slow by
	// design (a 1 s poll), and waiting for them would make the run take
	// minutes per window. Publish-only cells have no other dispatcher.
	// The drain is not measured; it only lets the run validate.
	{
		for i := 0; i < drainDispatchers; i++ {
			p, err := w.startDispatcher(fmt.Sprintf("drain-%d", i), scenarios.DrainDispatcher, 20)
			if err != nil {
				return err
			}
			w.disps = append(w.disps, p)
		}
	}
	final, err := w.drain(ctx)
	if err != nil {
		return err
	}
	for _, p := range w.disps {
		p.Stop(DefaultStopTimeout)
		if _, err := p.Wait(ctx); err != nil {
			return fmt.Errorf("dispatcher: %w", err)
		}
	}
	if final == nil {
		return fmt.Errorf("drain: nothing drained")
	}

	// Records and validation.
	var in validate.Input
	in.Handlers = c.Workload.Handlers
	for _, path := range w.recordFiles {
		f, err := record.ReadFile(path)
		if err != nil {
			return err
		}
		in.Published = append(in.Published, f.Published...)
		in.Handled = append(in.Handled, f.Handled...)
	}
	in.Final = validate.Final{Pending: final.Pending, Processing: final.Processing, Dead: final.Dead,
		DeadLettersTruncated: final.DeadLettersTruncated}
	for _, d := range final.DeadLetters {
		in.Final.DeadLetters = append(in.Final.DeadLetters, validate.DeadLetter{EventID: d.EventID, Handler: d.Handler})
	}
	in.Expect = validate.Expect{PoisonEventIDs: w.poison(in.Published), AllowRedelivery: c.AllowRedelivery}
	w.sample.Validation = validate.Validate(&in)

	w.metrics(&in, t0, t1, before, after, wal, pubDone, backlogMax)
	return nil
}

// duringWindow waits out the window, applies the fault plan and samples
// the backlog (deliveries published but not yet completed or buried).
func (w *windowRun) duringWindow(ctx context.Context, t0 time.Time) (float64, error) {
	c, window := w.c, w.r.Matrix.Window
	end := t0.Add(window)
	killAt := t0.Add(time.Duration(c.KillDispatcherAt * float64(window)))
	restartAt := t0.Add(time.Duration(c.RestartDBAt * float64(window)))
	killed, restarted := c.KillDispatcherAt == 0, c.RestartDBAt == 0
	backlogMax := 0.0
	tick := time.NewTicker(backlogSample)
	defer tick.Stop()
	for {
		now := time.Now()
		if !killed && now.After(killAt) {
			killed = true
			w.r.logf("  fault: SIGKILL %s", w.disps[0].Name)
			w.disps[0].Kill()
		}
		if !restarted && now.After(restartAt) {
			restarted = true
			w.r.logf("  fault: restarting the database server")
			if err := w.r.PG.Restart(ctx); err != nil {
				return 0, fmt.Errorf("fault: restart: %w", err)
			}
			if err := w.replaceExited(); err != nil {
				return 0, err
			}
		}
		if b := w.backlog(); b > backlogMax {
			backlogMax = b
		}
		if !now.Before(end) {
			return backlogMax, nil
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-tick.C:
		}
	}
}

// replaceExited restarts workers that a database restart made exit (a
// worker may choose to fail rather than reconnect); a replaced publisher
// gets a new id prefix so its ids never collide with the old one's.
func (w *windowRun) replaceExited() error {
	time.Sleep(time.Second) // let connection errors surface
	for i, p := range w.disps {
		if i == 0 && w.c.KillDispatcherAt > 0 {
			continue
		}
		if exited(p) {
			w.restarts++
			np, err := w.startDispatcher(fmt.Sprintf("%s-re%d", p.Name, w.restarts), w.c.Dispatcher, w.c.DispatcherPool)
			if err != nil {
				return err
			}
			w.disps = append(w.disps, np)
		}
	}
	for i, p := range w.pubs {
		if exited(p) {
			w.restarts++
			np, err := w.startPublisher(i, fmt.Sprintf("%s-pub%d-re%d-", w.name, i, w.restarts))
			if err != nil {
				return err
			}
			w.pubs[i] = np
		}
	}
	return nil
}

func exited(p *Proc) bool {
	select {
	case <-p.Exited():
		return true
	default:
		return false
	}
}

func (w *windowRun) backlog() float64 {
	published := float64(w.c.Preload)
	for _, p := range w.pubs {
		if k := p.Counters(); k != nil {
			published += float64(k.Published)
		}
	}
	done := 0.0
	for _, p := range w.disps {
		if k := p.Counters(); k != nil {
			done += float64(k.Completed + k.Buried)
		}
	}
	return math.Max(0, published*float64(len(w.c.Workload.Handlers))-done)
}

// drain waits until the store has nothing pending or processing, asking
// it through role inspect; it returns the last inspection.
func (w *windowRun) drain(ctx context.Context) (*protocol.Inspect, error) {
	deadline := time.Now().Add(w.r.DrainTimeout)
	n := 0
	for {
		n++
		cfg := w.config(protocol.RoleInspect, fmt.Sprintf("inspect-%d", n), 2)
		done, err := w.runOnce(ctx, cfg)
		if err != nil {
			return nil, fmt.Errorf("drain: %w", err)
		}
		if done == nil || done.Inspect == nil {
			return nil, errors.New("drain: the inspect role reported no state")
		}
		in := done.Inspect
		if in.Pending == 0 && in.Processing == 0 {
			return in, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("drain: not drained after %s (pending %d, processing %d): INVALID", w.r.DrainTimeout, in.Pending, in.Processing)
		}
		if err := sleepCtx(ctx, drainPoll); err != nil {
			return nil, err
		}
	}
}

// poison lists the published events the workload planted as poison.
func (w *windowRun) poison(published []record.Published) map[string]bool {
	every := w.c.Workload.PoisonEvery
	if every <= 0 {
		return nil
	}
	out := map[string]bool{}
	for _, p := range published {
		for _, prefix := range w.prefixes {
			if !strings.HasPrefix(p.EventID, prefix) {
				continue
			}
			if idx, err := strconv.ParseInt(p.EventID[len(prefix):], 10, 64); err == nil && protocol.IsPoison(idx, every) {
				out[p.EventID] = true
			}
		}
	}
	return out
}

// metrics fills the sample's metrics. Throughput comes from the records
// (the source of truth): ok handles (or commits) stamped inside [t0, t1).
func (w *windowRun) metrics(in *validate.Input, t0, t1 time.Time, before, after *PGSnapshot, wal float64, pubDone []*protocol.Message, backlogMax float64) {
	c, s := w.c, w.sample
	secs := t1.Sub(t0).Seconds()
	lo, hi := t0.UnixNano(), t1.UnixNano()
	// Whole seconds; the last bucket also takes the window's fraction of
	// a second past them (t1 - t0 is never exactly the window).
	buckets := max(1, int(secs))
	inWindow := func(ns int64) bool { return ns >= lo && ns < hi }

	commit := make(map[string]int64, len(in.Published))
	events := 0.0
	eventSeries := make([]float64, buckets)
	for _, p := range in.Published {
		commit[p.EventID] = p.CommitNs
		if !p.Uncertain && inWindow(p.CommitNs) {
			events++
			eventSeries[min(buckets-1, int((p.CommitNs-lo)/int64(time.Second)))]++
		}
	}
	deliveries := 0.0
	lastOK := int64(0)
	deliverySeries := make([]float64, buckets)
	type pair struct{ event, handler string }
	first := map[pair]int64{}
	for _, h := range in.Handled {
		if !h.OK {
			continue
		}
		if inWindow(h.HandleNs) {
			deliveries++
			lastOK = max(lastOK, h.HandleNs)
			deliverySeries[min(buckets-1, int((h.HandleNs-lo)/int64(time.Second)))]++
		}
		k := pair{h.EventID, h.Handler}
		if f, ok := first[k]; !ok || h.HandleNs < f {
			first[k] = h.HandleNs
		}
	}
	if c.DispatcherProcs > 0 {
		s.Metrics[report.MetricDeliveriesPerS] = deliveries / secs
		s.Series = deliverySeries
		pgWindowMetrics(s.Metrics, before, after, wal, deliveries, false)
	}
	if c.PublisherProcs > 0 {
		s.Metrics[report.MetricEventsPerS] = events / secs
		if c.DispatcherProcs == 0 {
			s.Series = eventSeries
			pgWindowMetrics(s.Metrics, before, after, wal, events, true)
		}
		var calls, p50, p99 float64
		for _, m := range pubDone {
			if m != nil && m.Publish != nil && m.Publish.Calls > 0 {
				n := float64(m.Publish.Calls)
				calls += n
				p50 += n * m.Publish.P50Ms
				p99 += n * m.Publish.P99Ms
			}
		}
		if calls > 0 {
			// Call-weighted mean of each process's percentiles: exact for
			// one process, an approximation across several.
			s.Metrics[report.MetricPublishP50Ms] = p50 / calls
			s.Metrics[report.MetricPublishP99Ms] = p99 / calls
		}
	}
	if c.PublisherProcs > 0 && c.DispatcherProcs > 0 {
		var lat []float64
		for k, h := range first {
			if cn, ok := commit[k.event]; ok && inWindow(cn) {
				lat = append(lat, float64(h-cn)/1e6)
			}
		}
		sort.Float64s(lat)
		if len(lat) > 0 {
			s.Metrics[report.MetricE2EP50Ms] = quantile(lat, 0.50)
			s.Metrics[report.MetricE2EP95Ms] = quantile(lat, 0.95)
			s.Metrics[report.MetricE2EP99Ms] = quantile(lat, 0.99)
			step := max(1, len(lat)/maxLatencies)
			for i := 0; i < len(lat); i += step {
				s.Latencies = append(s.Latencies, lat[i])
			}
		}
		s.Metrics[report.MetricBacklogMax] = backlogMax
		s.Metrics[report.MetricAchievedPerS] = deliveries / secs / float64(len(c.Workload.Handlers))
	}
	if c.AllowRedelivery && s.Validation != nil {
		s.Metrics[report.MetricRedeliveries] = float64(s.Validation.Redeliveries)
	}
	if c.Preload > 0 && c.PublisherProcs == 0 && lastOK < hi-int64(t1.Sub(t0)/10) {
		w.r.warnf("%s (%s): the preloaded events ran out in the last tenth of the window or earlier; deliveries/s understates the rate (raise the preload)", c.Name, w.side.Name)
	}
}

// quantile of sorted xs by linear interpolation.
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 1 {
		return xs[0]
	}
	pos := q * float64(len(xs)-1)
	i := int(pos)
	if i >= len(xs)-1 {
		return xs[len(xs)-1]
	}
	return xs[i] + (pos-float64(i))*(xs[i+1]-xs[i])
}

func withConn(ctx context.Context, dsn string, fn func(*pgx.Conn) error) error {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	cfg.RuntimeParams["application_name"] = "relaybus-bench"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("bench: connecting to the window database: %w", err)
	}
	defer conn.Close(context.Background())
	return fn(conn)
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
