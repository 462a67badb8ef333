package runner

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/berkcansavur/relaybus/bench/pgmetrics"
	"github.com/berkcansavur/relaybus/bench/protocol"
	"github.com/berkcansavur/relaybus/bench/record"
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
	// whether anything is left.
	drainPoll = 500 * time.Millisecond
	// backlogSample is how often the backlog is sampled in a window.
	backlogSample = 200 * time.Millisecond
	// drainDispatchers are started after each window to drain it.
	drainDispatchers = 2
	// drainPool is the connection pool of each drain dispatcher.
	drainPool = 20
	// dropTimeout bounds dropping a window's database.
	dropTimeout = time.Minute
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

	mu       sync.Mutex
	warnings []string
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

// Measure runs window w of cell c for side in dir. Every failure becomes
// the sample's Error (an INVALID sample), never a silently dropped
// window.
func (s *Step) Measure(ctx context.Context, w Window, c *scenarios.Cell, side *Side, dir string) *result.Sample {
	smp := &result.Sample{Side: side.Name, Round: w.Round, Order: w.Order, Metrics: map[string]float64{}}
	wr := &windowRun{step: s, c: c, side: side, sample: smp, name: w.Name, dir: dir}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		smp.Error = fmt.Sprintf("runner: %v", err)
		return smp
	}
	err := wr.run(ctx)
	wr.stopAll()
	if wr.dbCreated {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), dropTimeout)
		if derr := s.Server.DropDatabase(dctx, w.Name); derr != nil {
			s.warnf("dropping %s: %v", w.Name, derr)
		}
		cancel()
	}
	if err != nil {
		smp.Error = err.Error()
	}
	slices.Sort(smp.Ignored)
	smp.Ignored = slices.Compact(smp.Ignored)
	return smp
}

// windowRun is the state of one window.
type windowRun struct {
	step   *Step
	c      *scenarios.Cell
	side   *Side
	sample *result.Sample
	name   string // database name and id prefix
	dir    string
	dsn    string

	dbCreated   bool
	pubs, disps []Worker
	recordFiles []string
	prefixes    []string // event id prefixes (for poison lookup)
	restarts    int
}

func (w *windowRun) config(role, name string, pool int) protocol.Config {
	cfg := protocol.Config{Protocol: 1, Role: role, Name: name,
		Store: protocol.Store{Kind: "postgres", DSN: w.dsn, PoolSize: pool}, Workload: w.c.Workload}
	if role != protocol.RoleSetup && role != protocol.RoleInspect {
		cfg.RecordPath = filepath.Join(w.dir, name+".rec")
		w.recordFiles = append(w.recordFiles, cfg.RecordPath)
	}
	return cfg
}

func (w *windowRun) start(cfg protocol.Config) (Worker, error) {
	return w.step.Launch(w.side.Bin, cfg, filepath.Join(w.dir, cfg.Name+".log"))
}

// runOnce runs a role to its end (setup, preload, inspect).
func (w *windowRun) runOnce(ctx context.Context, cfg protocol.Config) (*protocol.Message, error) {
	ctx, cancel := context.WithTimeout(ctx, orDefault(w.step.SetupTimeout, DefaultSetupTimeout))
	defer cancel()
	p, err := w.start(cfg)
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

func (w *windowRun) startPublisher(idx int, prefix string) (Worker, error) {
	c := w.c
	cfg := w.config(protocol.RolePublisher, fmt.Sprintf("pub-%d%s", idx, strings.TrimPrefix(prefix, w.name+"-pub")), c.PublisherPool)
	cfg.Workload.IDPrefix = prefix
	cfg.Publisher = c.Publisher
	cfg.Publisher.StartIndex = int64(idx)
	cfg.Publisher.Stride = int64(c.PublisherProcs)
	w.prefixes = append(w.prefixes, prefix)
	return w.start(cfg)
}

func (w *windowRun) startDispatcher(name string, d protocol.Dispatcher, pool int) (Worker, error) {
	cfg := w.config(protocol.RoleDispatcher, name, pool)
	cfg.Dispatcher = d
	cfg.Dispatcher.ExtraCostPerDeliveryUs = w.side.ExtraCostPerDeliveryUs
	return w.start(cfg)
}

func (w *windowRun) stopTimeout() time.Duration {
	return orDefault(w.step.StopTimeout, DefaultStopTimeout)
}

func (w *windowRun) stopAll() {
	var wg sync.WaitGroup
	for _, p := range append(slices.Clone(w.pubs), w.disps...) {
		wg.Go(func() { p.Stop(w.stopTimeout()) })
	}
	wg.Wait()
}

func (w *windowRun) run(ctx context.Context) error {
	s, c := w.step, w.c
	dsn, err := s.Server.CreateDatabase(ctx, w.name)
	if err != nil {
		return err
	}
	w.dsn, w.dbCreated = dsn, true
	if err := s.Server.Prepare(ctx, dsn); err != nil {
		return err
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

	if err := sleepCtx(ctx, s.Warmup); err != nil {
		return err
	}
	before, err := s.Server.Snapshot(ctx, dsn, true)
	if err != nil {
		return err
	}
	t0 := time.Now()
	backlogMax, err := w.duringWindow(ctx, t0)
	if err != nil {
		return err
	}
	t1 := time.Now()
	after, err := s.Server.Snapshot(ctx, dsn, false)
	if err != nil {
		return err
	}

	// Stop the publishers, then drain.
	var pubDone []*protocol.Message
	for _, p := range w.pubs {
		p.Stop(w.stopTimeout())
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
	for i := 0; i < drainDispatchers; i++ {
		p, err := w.startDispatcher(fmt.Sprintf("drain-%d", i), scenarios.DrainDispatcher, drainPool)
		if err != nil {
			return err
		}
		w.disps = append(w.disps, p)
	}
	final, err := w.drain(ctx)
	if err != nil {
		return err
	}
	for _, p := range w.disps {
		p.Stop(w.stopTimeout())
		if _, err := p.Wait(ctx); err != nil {
			return fmt.Errorf("dispatcher: %w", err)
		}
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
	in.Expect = validate.Expect{PoisonEventIDs: poisonEvents(in.Published, w.prefixes, c.Workload.PoisonEvery), AllowRedelivery: c.AllowRedelivery}
	w.sample.Validation = validate.Validate(&in)

	wm := windowMetrics(&in, span{t0.UnixNano(), t1.UnixNano()}, c, pubDone, backlogMax)
	for k, v := range wm.metrics {
		w.sample.Metrics[k] = v
	}
	if wm.units > 0 {
		pgmetrics.WindowMetrics(w.sample.Metrics, before, after, wm.units, c.DispatcherProcs == 0)
	}
	w.sample.Series, w.sample.Latencies = wm.series, wm.latencies
	if c.AllowRedelivery {
		w.sample.Metrics[result.MetricRedeliveries] = float64(w.sample.Validation.Redeliveries)
	}
	if wm.ranOutEarly {
		s.warnf("%s (%s): the preloaded events ran out in the last tenth of the window or earlier; deliveries/s understates the rate (raise the preload)", c.Name, w.side.Name)
	}
	return nil
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
