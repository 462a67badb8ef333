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

	"github.com/berkcansavur/relaybus/bench/protocol"
	"github.com/berkcansavur/relaybus/bench/result"
	"github.com/berkcansavur/relaybus/bench/scenarios"
	"github.com/berkcansavur/relaybus/bench/validate"
)

// A window's state and its worker processes: their configs, their start
// and stop, the roles that run once (setup, preload, inspect), the
// window's preparation and its process list for the manifest.

// windowRun is the state of one window.
type windowRun struct {
	step   *Step
	c      *scenarios.Cell
	side   *Side
	sample *result.Sample
	name   string // database name and id prefix
	dir    string
	rel    string // dir, relative to the run's folder
	dsn    string

	dbCreated   bool
	pubs, disps []Worker
	// allPubs: every publisher started, replaced ones included (their
	// publish errors count).
	allPubs  []Worker
	prefixes []string // event id prefixes (for poison lookup)
	// ranOut: the window handled its whole preload before it ended.
	ranOut   bool
	restarts int
	// replaced: workers that exited after a database fault and were
	// replaced (faults.go).
	replaced map[Worker]bool
	// faults the window injected, with their times.
	faults []validate.Fault
	// procs: every worker started for the window that writes records, in
	// start order: the manifest's process list. Workers may be started
	// from several goroutines at once (scenario 6's base preloads its
	// kinds side by side), so mu guards it and the sample's Ignored
	// list, which runOnce appends to.
	mu     sync.Mutex
	procs  []*startedProc
	phases *phases
}

// startedProc is one worker of a window's process list: the worker (nil
// for a template's preload, which ended before the window) and what the
// manifest says of it so far.
type startedProc struct {
	w Worker
	p validate.Process
}

func (w *windowRun) config(role, name string, pool int) protocol.Config {
	cfg := protocol.Config{Protocol: 1, Role: role, Name: name,
		Store: protocol.Store{Kind: "postgres", DSN: w.dsn, PoolSize: pool}, Workload: w.c.Workload}
	if role != protocol.RoleSetup && role != protocol.RoleInspect {
		// validate.ReadDir names a file's process after the file.
		cfg.RecordPath = filepath.Join(w.dir, name+validate.RecordFileExt)
	}
	return cfg
}

func (w *windowRun) start(cfg protocol.Config) (Worker, error) {
	p, err := w.step.Launch(w.side.Bin, cfg, filepath.Join(w.dir, cfg.Name+".log"))
	if err == nil && cfg.RecordPath != "" {
		w.addProc(&startedProc{w: p, p: validate.Process{Name: cfg.Name, Role: cfg.Role, Record: filepath.Base(cfg.RecordPath),
			CompletionRecords: w.side.CompletionRecords && cfg.Role == protocol.RoleDispatcher}})
	}
	return p, err
}

// addProc appends s to the process list.
func (w *windowRun) addProc(s *startedProc) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.procs = append(w.procs, s)
}

// procList is a copy of the process list as it stands.
func (w *windowRun) procList() []startedProc {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]startedProc, len(w.procs))
	for i, s := range w.procs {
		out[i] = *s
	}
	return out
}

// mark applies f to what the process list says of worker p.
func (w *windowRun) mark(p Worker, f func(*validate.Process)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, s := range w.procs {
		if s.w == p {
			f(&s.p)
		}
	}
}

// processes is the window's process list for its manifest, once every
// worker of it has exited: how each ended (killed by the fault plan,
// its done line, or an error) and its last counters (a done line's
// counters replace the last counters line's).
func (w *windowRun) processes(ctx context.Context) []validate.Process {
	killed := map[string]bool{}
	for _, f := range w.faults {
		if f.Kind == validate.FaultKill {
			killed[f.Process] = true
		}
	}
	procs := w.procList()
	out := make([]validate.Process, 0, len(procs))
	for _, s := range procs {
		p := s.p
		if s.w != nil {
			_, err := s.w.Wait(ctx)
			switch {
			case killed[p.Name]:
				p.End = validate.EndKilled
			case err != nil:
				p.End, p.Error = validate.EndFailed, err.Error()
			default:
				p.End = validate.EndDone
			}
			if k := s.w.Counters(); k != nil {
				c := *k
				p.Counters = &c
			}
		}
		out = append(out, p)
	}
	return out
}

// runOnce runs a role to its end (setup, preload, inspect). A role
// that outlives SetupTimeout is killed, and that is an error.
func (w *windowRun) runOnce(ctx context.Context, cfg protocol.Config) (*protocol.Message, error) {
	timeout := orDefault(w.step.SetupTimeout, DefaultSetupTimeout)
	tctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	p, err := w.start(cfg)
	if err != nil {
		return nil, err
	}
	if m, err := p.WaitReady(tctx); err == nil {
		w.mu.Lock()
		w.sample.Ignored = append(w.sample.Ignored, m.Ignored...)
		w.mu.Unlock()
	}
	select {
	case <-p.Exited():
	case <-tctx.Done():
		p.Kill()
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("runner: %s (role %s) did not finish within %s and was killed", cfg.Name, cfg.Role, timeout)
	}
	return p.Wait(ctx)
}

// startPublisher starts publisher idx as process name, with its own id
// prefix: a replacement gets a new one, so its ids never collide with
// its predecessor's.
func (w *windowRun) startPublisher(idx int, name, prefix string) (Worker, error) {
	c := w.c
	cfg := w.config(protocol.RolePublisher, name, c.PublisherPool)
	cfg.Workload.IDPrefix = prefix
	cfg.Publisher = c.Publisher
	cfg.Publisher.StartIndex = int64(idx)
	cfg.Publisher.Stride = int64(c.PublisherProcs)
	w.profile(&cfg)
	w.prefixes = append(w.prefixes, prefix)
	p, err := w.start(cfg)
	if err == nil {
		w.allPubs = append(w.allPubs, p)
	}
	return p, err
}

func (w *windowRun) startDispatcher(name string, d protocol.Dispatcher, pool int) (Worker, error) {
	cfg := w.config(protocol.RoleDispatcher, name, pool)
	cfg.Dispatcher = d
	cfg.Dispatcher.ExtraCostPerDeliveryUs = w.side.ExtraCostPerDeliveryUs
	if len(w.c.CrashDBAt) > 0 {
		// A crash waits for a claim the counters show.
		cfg.CountersIntervalMs = crashCountersMs
	}
	w.profile(&cfg)
	return w.start(cfg)
}

// profile asks a window's worker for a CPU profile beside its record
// file, when the step profiles.
func (w *windowRun) profile(cfg *protocol.Config) {
	if w.step.Profile && w.rel != "" {
		cfg.CPUProfilePath = filepath.Join(w.dir, cfg.Name+ProfileExt)
	}
}

// ProfileExt ends the name of a worker's CPU profile; ProfilesDir is
// where a results folder keeps them, by window (cell01/r1-base/...).
const (
	ProfileExt  = ".pprof"
	ProfilesDir = "profiles"
)

// profiles lists the non-empty CPU profiles in dir (a SIGKILLed worker
// leaves an empty one) as paths under ProfilesDir/rel.
func profiles(dir, rel string) []string {
	entries, err := os.ReadDir(dir)
	if err != nil || rel == "" {
		return nil
	}
	var out []string
	for _, e := range entries {
		if fi, err := e.Info(); err == nil && !e.IsDir() && strings.HasSuffix(e.Name(), ProfileExt) && fi.Size() > 0 {
			out = append(out, filepath.ToSlash(filepath.Join(ProfilesDir, rel, e.Name())))
		}
	}
	return out
}

// startDrainDispatcher starts a dispatcher that only drains: fast
// settings, and handlers without the workload's cost (planted failures
// still fail, so poison is still dead-lettered, but are retried after
// a millisecond: a key whose events are all poison, as in the fault
// cells, otherwise drains one backoff after another). It keeps the cell's
// lease: a store whose recovery of a killed dispatcher's work is set by
// the dispatchers running it (River's rescuer runs on the leader, with
// the leader's rescue delay) must recover it during the drain as the
// cell set it, not after an hour.
func (w *windowRun) startDrainDispatcher(name string) (Worker, error) {
	cfg := w.config(protocol.RoleDispatcher, name, drainPool)
	cfg.Dispatcher = scenarios.DrainDispatcher
	cfg.Dispatcher.LeaseMs = w.c.Dispatcher.LeaseMs
	cfg.Workload.HandlerCostUs = 0
	cfg.Workload.RetryBaseDelayMs, cfg.Workload.RetryMaxDelayMs = drainRetryDelayMs, drainRetryDelayMs
	p, err := w.start(cfg)
	if err == nil {
		w.mark(p, func(p *validate.Process) { p.Drain = true })
	}
	return p, err
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

// prepare creates, sets up, preloads and vacuums the window database.
func (w *windowRun) prepare(ctx context.Context) error {
	s, c, phases := w.step, w.c, w.phases
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
	phases.mark("setup")
	if c.Preload > 0 {
		cfg := w.preloadConfig(w.name + "-pre-")
		w.prefixes = append(w.prefixes, cfg.Workload.IDPrefix)
		if _, err := w.runOnce(ctx, cfg); err != nil {
			return fmt.Errorf("preload: %w", err)
		}
	}
	phases.mark("preload")
	if err := s.Server.Settle(ctx, dsn); err != nil {
		return err
	}
	phases.mark("vacuum")
	return nil
}

// preloadConfig is the cell's preload role, publishing ids that start
// with prefix.
func (w *windowRun) preloadConfig(prefix string) protocol.Config {
	c := w.c
	cfg := w.config(protocol.RolePreload, "preload", c.PreloadPublishers+2)
	cfg.Workload.IDPrefix = prefix
	cfg.Publisher = protocol.Publisher{Publishers: c.PreloadPublishers, Batch: c.PreloadBatch, Events: c.Preload}
	return cfg
}
