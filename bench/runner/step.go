package runner

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/berkcansavur/relaybus/bench/pgmetrics"
	"github.com/berkcansavur/relaybus/bench/result"
	"github.com/berkcansavur/relaybus/bench/scenarios"
	"github.com/berkcansavur/relaybus/bench/validate"
)

// Limits and pauses of the measurement step.
const (
	// DefaultDrainTimeout bounds the drain after a window; a window that
	// does not drain in time is INVALID.
	DefaultDrainTimeout = 3 * time.Minute
	// DefaultStopTimeout is how long a worker may take to exit after
	// SIGTERM before it is killed.
	DefaultStopTimeout = 30 * time.Second
	// DefaultReadyTimeout bounds how long a worker may take to connect.
	DefaultReadyTimeout = time.Minute
	// DefaultSetupTimeout bounds the setup, preload and inspect roles.
	DefaultSetupTimeout = 10 * time.Minute
	// drainPoll is how often the drain asks the store (role inspect)
	// whether anything is left; each ask starts a worker process.
	drainPoll = 100 * time.Millisecond
	// drainDispatchers are started after each window to drain it.
	drainDispatchers = 2
	// drainPool is the connection pool of each drain dispatcher.
	drainPool = 20
	// stopOwnLeaseMs: in cells whose lease is at most this, the window's
	// dispatchers stop when the drain starts (see measure).
	stopOwnLeaseMs = 5000
	// drainRetryDelayMs is the retry delay of the drain dispatchers.
	drainRetryDelayMs = 1
	// dropTimeout bounds dropping a window's database.
	dropTimeout = time.Minute
	// topStatements bounds the statements a window keeps (--profile).
	topStatements = 10
)

// Step is the measurement step: it runs one window of one side of one
// cell on a fresh database and returns the window's sample.
type Step struct {
	Server Server
	Launch Launcher
	// Warmup runs before the window and is discarded; Window is measured.
	Warmup, Window time.Duration
	// DrainTimeout, StopTimeout, ReadyTimeout, SetupTimeout: zero means
	// the Default*.
	DrainTimeout, StopTimeout, ReadyTimeout, SetupTimeout time.Duration
	// Logf prints progress; nil is silent.
	Logf func(format string, args ...any)
	// Profile asks every window's dispatchers and publishers for a CPU
	// profile (protocol field cpu_profile_path) and keeps the window's top
	// statements (the Server must read them: PGServer.StatementDetail).
	Profile bool
	// NoTemplates publishes every window's preload in the window's own
	// database, as before preload templates (template.go).
	NoTemplates bool

	mu       sync.Mutex
	warnings []string
	tmpl     templates
}

func (s *Step) logf(format string, args ...any) {
	if s.Logf != nil {
		s.Logf(format, args...)
	}
}

func (s *Step) warnf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	s.mu.Lock()
	s.warnings = append(s.warnings, msg)
	s.mu.Unlock()
	s.logf("warning: %s", msg)
}

// warnOnce warns with a message the first time only.
func (s *Step) warnOnce(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	s.mu.Lock()
	seen := slices.Contains(s.warnings, msg)
	s.mu.Unlock()
	if !seen {
		s.warnf("%s", msg)
	}
}

// Warnings returns the problems that did not stop a window, in order.
func (s *Step) Warnings() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.warnings)
}

func orDefault(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// Prepared is a window whose database is ready: created, set up by
// the side's own setup role, preloaded by its preload role, and
// vacuumed. Preparing the next window while the current one drains is
// what keeps a mode's wall time down; nothing measured runs then.
type Prepared struct {
	run *windowRun
	err error
}

// Prepare readies window w of cell c for side, in dir. Its failure is
// kept and becomes the window's Error when it is measured.
func (s *Step) Prepare(ctx context.Context, w Window, c *scenarios.Cell, side *Side, dir string) *Prepared {
	smp := &result.Sample{Side: side.Name, Round: w.Round, Order: w.Order, Metrics: map[string]float64{}}
	wr := &windowRun{step: s, c: c, side: side, sample: smp, name: w.Name, dir: dir, rel: w.Dir, phases: newPhases()}
	// A window run again (its cell's preload was raised) starts on an
	// empty folder: records of the first run must not join its own.
	if err := os.RemoveAll(dir); err != nil {
		return &Prepared{run: wr, err: fmt.Errorf("runner: %w", err)}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return &Prepared{run: wr, err: fmt.Errorf("runner: %w", err)}
	}
	if c.Preload > 0 && !s.NoTemplates && w.Template != "" {
		return &Prepared{run: wr, err: wr.prepareFromTemplate(ctx, templateKey{w.Cell, side.Name}, w.Template)}
	}
	return &Prepared{run: wr, err: wr.prepare(ctx)}
}

// RanOut reports whether the measured window handled its whole preload
// before it ended (it is INVALID: a store idle for part of the window).
func (p *Prepared) RanOut() bool { return p.run.ranOut }

// Discard drops a prepared window's database without measuring it.
func (s *Step) Discard(ctx context.Context, p *Prepared) {
	if p == nil || !p.run.dbCreated {
		return
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), dropTimeout)
	defer cancel()
	if err := s.Server.DropDatabase(dctx, p.run.name); err != nil {
		s.warnf("dropping %s: %v", p.run.name, err)
	}
	p.run.dbCreated = false
}

// Measure runs a prepared window: its workers, warm-up, window and fault
// plan, drain, records, validation and metrics, then drops its database.
// windowDone, if not nil, is called once the measured window has ended
// (the drain follows), so the caller may prepare the next window; it is
// not called when the window fails before its end. Every failure becomes
// the sample's Error (an INVALID sample), never a silently dropped
// window.
func (s *Step) Measure(ctx context.Context, p *Prepared, windowDone func()) *result.Sample {
	wr := p.run
	err := p.err
	if err == nil {
		err = wr.measure(ctx, windowDone)
	}
	wr.stopAll()
	wr.sample.Profiles = profiles(wr.dir, wr.rel)
	s.Discard(ctx, p)
	s.logf("  phases: %s", wr.phases)
	smp := wr.sample
	smp.PhaseSeconds = wr.phases.seconds()
	if err != nil {
		smp.Error = err.Error()
	}
	slices.Sort(smp.Ignored)
	smp.Ignored = slices.Compact(smp.Ignored)
	return smp
}

// measure runs the prepared window.
func (w *windowRun) measure(ctx context.Context, windowDone func()) error {
	s, c, phases, dsn := w.step, w.c, w.phases, w.dsn
	phases.restart()
	// Start the window's processes and wait until all are ready, so the
	// clock starts with everyone connected.
	for i := 0; i < c.DispatcherProcs; i++ {
		p, err := w.startDispatcher(fmt.Sprintf("disp-%d", i), c.DispatcherFor(w.side.Name), c.DispatcherPool)
		if err != nil {
			return err
		}
		w.disps = append(w.disps, p)
	}
	for i := 0; i < c.PublisherProcs; i++ {
		p, err := w.startPublisher(i, fmt.Sprintf("pub-%d", i), fmt.Sprintf("%s-pub%d-", w.name, i))
		if err != nil {
			return err
		}
		w.pubs = append(w.pubs, p)
	}
	rctx, cancel := context.WithTimeout(ctx, orDefault(s.ReadyTimeout, DefaultReadyTimeout))
	for _, p := range append(slices.Clone(w.disps), w.pubs...) {
		m, err := p.WaitReady(rctx)
		if err != nil {
			cancel()
			return err
		}
		w.sample.Ignored = append(w.sample.Ignored, m.Ignored...)
	}
	cancel()

	phases.mark("start")
	if err := sleepCtx(ctx, s.Warmup); err != nil {
		return err
	}
	before, err := s.Server.Snapshot(ctx, dsn, true)
	if err != nil {
		return err
	}
	// The bloat cells' hold and table samples (snapshot.go), just before
	// the clock starts.
	bw, err := w.startBloat(ctx, time.Now())
	if err != nil {
		return err
	}
	defer bw.release(ctx)
	t0 := time.Now()
	phases.mark("warm-up")
	if err := w.duringWindow(ctx, t0); err != nil {
		return err
	}
	t1 := time.Now()
	after, err := s.Server.Snapshot(ctx, dsn, false)
	if err != nil {
		return err
	}
	if err := bw.end(ctx); err != nil {
		return err
	}
	phases.mark("window")
	// The measured part is over; what follows (stopping, draining,
	// validating) may share the machine with the next window's setup.
	if windowDone != nil {
		windowDone()
	}

	// Stop the publishers, then drain.
	for _, p := range w.pubs {
		p.Stop(w.stopTimeout())
		if _, err := p.Wait(ctx); err != nil {
			return fmt.Errorf("publisher: %w", err)
		}
	}
	// Drain with extra fast dispatchers: the window's own may be slow by
	// design (a 1 s poll), and waiting for them would make the run take
	// minutes per window. Publish-only cells have no other dispatcher.
	// The drain is not measured; it only lets the run validate.
	own := slices.Clone(w.disps)
	for i := 0; i < drainDispatchers; i++ {
		p, err := w.startDrainDispatcher(fmt.Sprintf("drain-%d", i))
		if err != nil {
			return err
		}
		w.disps = append(w.disps, p)
	}
	if lease := c.Dispatcher.LeaseMs; lease > 0 && lease <= stopOwnLeaseMs {
		// The window's dispatchers stop while the drain's start: their
		// handlers may busy-wait on the cores the drain needs (that
		// doubled the drain of the work cells), and they hold the lanes
		// of their keys, whose failures they retry after the cell's
		// backoff (a fault cell's poison keys drained one backoff after
		// another). Only with a short lease: a dispatcher stopped in the
		// middle of a claim may leave what the claim took leased until
		// the lease expires (relaybus before 0.2.1, found so: 30 s stalls
		// of the drain with the default lease).
		var stopped sync.WaitGroup
		for _, p := range own {
			stopped.Go(func() { p.Stop(w.stopTimeout()) })
		}
		stopped.Wait()
	}
	// Wait for their ready lines: a drain that is over at its first look
	// would otherwise stop a worker that has not yet set up its SIGTERM
	// handler, and the default action kills it without a done line (an
	// INVALID window on a loaded machine).
	if err := w.waitReady(ctx, w.disps[len(w.disps)-drainDispatchers:]); err != nil {
		return fmt.Errorf("drain: %w", err)
	}
	final, err := w.drain(ctx)
	if err != nil {
		return err
	}
	phases.mark("drain")
	// Stop every dispatcher at once: each finishes its handlers and
	// hands back its leases, and one after the other that took seconds.
	w.stopAll()
	for _, p := range w.disps {
		if _, err := p.Wait(ctx); err != nil {
			if w.replaced[p] {
				s.warnf("%s, %s: dispatcher %s exited after a database fault and was replaced: %v", w.side.Name, w.name, p.Name(), err)
				continue
			}
			return fmt.Errorf("dispatcher: %w", err)
		}
	}

	// The manifest first, then the records read back the way
	// `bench validate DIR` reads them, so a kept window folder re-checks
	// to the same verdict.
	lease := int64(c.Dispatcher.LeaseMs)
	if lease == 0 {
		lease = scenarios.DefaultLeaseMs
	}
	manifest := &validate.Manifest{Handlers: c.Workload.Handlers, PoisonEvery: c.Workload.PoisonEvery, PoisonPrefixes: w.prefixes,
		MaxAttempts: c.Workload.MaxAttempts, FailFirst: c.Workload.FailFirst, AllowRedelivery: c.AllowRedelivery, AllowPublishErrors: c.AllowRedelivery,
		LeaseMs: lease, Faults: w.faults, Window: &validate.Span{StartNs: t0.UnixNano(), EndNs: t1.UnixNano()},
		PublishErrors: w.publishErrors(), Final: *final, NoKeyOrder: w.side.NoKeyOrder, Processes: w.processes(ctx)}
	if err := validate.WriteManifest(w.dir, manifest); err != nil {
		return err
	}
	manifest, files, _, err := validate.ReadDir(w.dir)
	if err != nil {
		return err
	}
	in := manifest.Input(files)
	w.sample.Validation = validate.Validate(in)
	phases.mark("validate")

	wm := windowMetrics(in, span{t0.UnixNano(), t1.UnixNano()}, c)
	for k, v := range wm.metrics {
		w.sample.Metrics[k] = v
	}
	bw.finish(in, span{t0.UnixNano(), t1.UnixNano()})
	if wm.units > 0 {
		pgmetrics.WindowMetrics(w.sample.Metrics, before, after, wm.units, c.DispatcherProcs == 0, w.side.Tables)
		if s.Profile && before.ByStatement != nil && after.ByStatement != nil {
			w.sample.Statements, w.sample.StatementsTotalMs = pgmetrics.TopStatements(before.ByStatement, after.ByStatement, topStatements)
			w.sample.StatementUnits = wm.units
		}
		w.sample.Tables = pgmetrics.TableLabels(w.side.Tables, after)
	}
	w.sample.Series, w.sample.SeriesStepMs, w.sample.Latencies = wm.series, int(seriesStep/time.Millisecond), wm.latencies
	if c.AllowRedelivery {
		w.sample.Metrics[result.MetricRedeliveries] = float64(w.sample.Validation.Redeliveries)
	}
	if wm.noCallStarts {
		s.warnOnce("%s: publish latency is not measured: its publisher records carry no call start (a worker older than the field)", w.side.Name)
	}
	if wm.ranOut {
		w.ranOut = true
		// A window that ran dry measured an idle store for part of its
		// length: its rate is not comparable, so it is not averaged in.
		return fmt.Errorf("runner: the preload ran out before the window ended (every preloaded delivery was handled inside it): raise the cell's preload")
	}
	return nil
}

// waitReady waits for the ready line of every worker of ps, within the
// step's ReadyTimeout.
func (w *windowRun) waitReady(ctx context.Context, ps []Worker) error {
	rctx, cancel := context.WithTimeout(ctx, orDefault(w.step.ReadyTimeout, DefaultReadyTimeout))
	defer cancel()
	for _, p := range ps {
		if _, err := p.WaitReady(rctx); err != nil {
			return err
		}
	}
	return nil
}

// publishErrors sums the failed publish calls of every publisher of the
// window, replaced ones included.
func (w *windowRun) publishErrors() int64 {
	var n int64
	for _, p := range w.allPubs {
		if k := p.Counters(); k != nil {
			n += k.PublishErrors
		}
	}
	return n
}

// phases times the steps of a window, for the progress log: where a
// run's wall time goes.
type phases struct {
	last  time.Time
	names []string
	took  []time.Duration
}

func newPhases() *phases { return &phases{last: time.Now()} }

// restart starts the next phase's clock now: the time between two
// phases (a prepared window waiting for its turn) belongs to neither.
func (p *phases) restart() { p.last = time.Now() }

func (p *phases) mark(name string) {
	now := time.Now()
	p.names = append(p.names, name)
	p.took = append(p.took, now.Sub(p.last))
	p.last = now
}

func (p *phases) seconds() map[string]float64 {
	m := make(map[string]float64, len(p.names))
	for i, n := range p.names {
		m[n] = p.took[i].Seconds()
	}
	return m
}

func (p *phases) String() string {
	var b strings.Builder
	for i, n := range p.names {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %.1fs", n, p.took[i].Seconds())
	}
	return b.String()
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
