package runner

import (
	"context"
	"errors"
	"fmt"
	"maps"
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

// Process names of scenario 6: b- for the base's, c- for the
// candidate's. The validator names a killed process by its record file.
const (
	upgradeVictim = "b-disp-0"
	// upgradeCountersMs is how often the base's dispatchers report, so
	// the base stops near its share.
	upgradeCountersMs = 50
	// republishDir keeps the republish's records away from the
	// validator's: a republished event is not a new event. Its record
	// files end in republishExt, not the window's .rec, so that `bench
	// validate` over a run never takes the folder for a window (it has no
	// manifest, and a folder without one needs --handlers).
	republishDir = "republish"
	republishExt = ".republished"
	// maxStride bounds the search for republishable events, and
	// maxProgressions the republishing processes per kind of event.
	maxStride       = 64
	maxProgressions = 8
)

// upgradeRun is the state of one run of scenario 6: the same database
// and folder seen by the base's processes and by the candidate's.
type upgradeRun struct {
	step       *Step
	u          *scenarios.Upgrade
	res        *result.Upgrade
	name, dir  string
	base, cand *windowRun
	phases     *phases
	kill       validate.Fault
}

// Upgrade runs scenario 6 once on a database called name, with its
// records and logs in dir. Two sides with the same Code have nothing to
// upgrade: the result then says so and is skipped, not INVALID.
func (s *Step) Upgrade(ctx context.Context, u *scenarios.Upgrade, base, cand *Side, name, dir string) *result.Upgrade {
	res := &result.Upgrade{Config: u.Config(), Metrics: map[string]float64{}}
	if sameCode(base, cand) {
		res.Skipped = "nothing to upgrade: base and candidate are the same code (" + base.Code + ")"
		return res
	}
	ph := newPhases()
	up := &upgradeRun{step: s, u: u, res: res, name: name, dir: dir, phases: ph}
	baseCell := scenarios.Cell{Scenario: scenarios.UpgradeScenario, Name: "upgrade", Workload: u.Workload, Dispatcher: u.BaseDispatcher}
	candCell := baseCell
	// The candidate drains: its handlers run without the base's cost.
	candCell.Workload.HandlerCostUs = 0
	newRun := func(c *scenarios.Cell, side *Side) *windowRun {
		return &windowRun{step: s, c: c, side: side, name: name, dir: dir, phases: ph,
			sample: &result.Sample{Side: side.Name, Metrics: map[string]float64{}}}
	}
	up.base, up.cand = newRun(&baseCell, base), newRun(&candCell, cand)
	err := os.MkdirAll(filepath.Join(dir, republishDir), 0o755)
	if err == nil {
		err = up.run(ctx)
	}
	up.base.stopAll()
	up.cand.stopAll()
	if up.base.dbCreated {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), dropTimeout)
		if derr := s.Server.DropDatabase(dctx, name); derr != nil {
			s.warnf("dropping %s: %v", name, derr)
		}
		cancel()
	}
	s.logf("  phases: %s", ph)
	res.PhaseSeconds = ph.seconds()
	res.Ignored = map[string][]string{}
	for _, w := range []*windowRun{up.base, up.cand} {
		if ig := slices.Compact(slices.Sorted(slices.Values(w.sample.Ignored))); len(ig) > 0 {
			res.Ignored[w.side.Name] = ig
		}
	}
	if err != nil {
		res.Error = err.Error()
	}
	return res
}

func (up *upgradeRun) run(ctx context.Context) error {
	s, u, res := up.step, up.u, up.res
	dsn, err := s.Server.CreateDatabase(ctx, up.name)
	if err != nil {
		return err
	}
	up.base.dsn, up.base.dbCreated, up.cand.dsn = dsn, true, dsn
	if err := s.Server.Prepare(ctx, dsn); err != nil {
		return err
	}

	// 1. The base's schema and backlog.
	if _, err := up.base.runOnce(ctx, up.base.config(protocol.RoleSetup, "b-setup", 2)); err != nil {
		return fmt.Errorf("base setup: %w", err)
	}
	// The kinds are published side by side, so the base's dispatchers
	// meet both from the start.
	kinds := up.kinds()
	errs := make([]error, len(kinds))
	var wg sync.WaitGroup
	for i, kind := range kinds {
		cfg := up.base.config(protocol.RolePreload, "b-preload-"+kind.name, u.PreloadPublishers+2)
		cfg.Workload = kind.workload
		cfg.Publisher = protocol.Publisher{Publishers: u.PreloadPublishers, Batch: u.PreloadBatch, Events: kind.events}
		wg.Go(func() { _, errs[i] = up.base.runOnce(ctx, cfg) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("base preload: %w", err)
	}
	up.phases.mark("base setup and preload")

	// 2. The base handles its share; one dispatcher is killed mid-work.
	if err := up.baseDispatch(ctx); err != nil {
		return err
	}
	up.phases.mark("base dispatch")
	before, err := up.inspect(ctx, up.base, "b-inspect")
	if err != nil {
		return err
	}
	res.BeforeUpgrade = before
	res.Metrics[result.UpgradeInFlightAtKill] = float64(before.Processing)

	// 3. The candidate's setup upgrades the database in place.
	if err := up.upgrade(ctx, dsn); err != nil {
		return err
	}
	up.phases.mark("upgrade")
	after, err := up.inspect(ctx, up.cand, "c-inspect-upgraded")
	if err != nil {
		return err
	}
	res.AfterUpgrade = after
	up.check(before.Pending+before.Processing == after.Pending+after.Processing,
		"unfinished deliveries (pending + processing) before the upgrade %d, after %d",
		before.Pending+before.Processing, after.Pending+after.Processing)
	up.check(before.Dead == after.Dead, "dead deliveries before the upgrade %d, after %d", before.Dead, after.Dead)

	// 4. Events the base completed, published again: no new delivery.
	republished, err := up.republish(ctx)
	if err != nil {
		return err
	}
	again, err := up.inspect(ctx, up.cand, "c-inspect-republished")
	if err != nil {
		return err
	}
	res.AfterRepublish = again
	added := (again.Pending + again.Processing + again.Dead) - (after.Pending + after.Processing + after.Dead)
	res.Metrics[result.UpgradeRepublished] = float64(republished)
	res.Metrics[result.UpgradeRepublishAdded] = float64(added)
	up.check(added == 0, "deliveries added by republishing %d events the base completed: %d (pending %d -> %d)",
		republished, added, after.Pending, again.Pending)
	up.check(republished > 0 || u.Republish == 0, "events republished: %d of the %d asked", republished, u.Republish)
	up.phases.mark("republish")

	// 5. The candidate drains.
	for i := range u.CandidateDispatchers {
		p, err := up.cand.startDispatcher(fmt.Sprintf("c-disp-%d", i), u.CandidateDispatcher, drainPool)
		if err != nil {
			return err
		}
		up.cand.disps = append(up.cand.disps, p)
	}
	final, err := up.cand.drain(ctx)
	if err != nil {
		return err
	}
	up.cand.stopAll()
	for _, p := range up.cand.disps {
		if _, err := p.Wait(ctx); err != nil {
			return fmt.Errorf("candidate dispatcher: %w", err)
		}
	}
	res.Final = final
	up.phases.mark("candidate drain")
	return up.validate(ctx, final)
}

// kind is one preload of the backlog.
type kind struct {
	name     string
	events   int
	workload protocol.Workload
}

func (up *upgradeRun) kinds() []kind {
	var out []kind
	if up.u.KeyedEvents > 0 {
		w := up.u.Workload
		w.Keys, w.KeyCount, w.IDPrefix = "many", up.u.KeyCount, up.name+"-k-"
		out = append(out, kind{"keyed", up.u.KeyedEvents, w})
	}
	if up.u.UnkeyedEvents > 0 {
		w := up.u.Workload
		w.Keys, w.KeyCount, w.IDPrefix = "none", 0, up.name+"-u-"
		out = append(out, kind{"unkeyed", up.u.UnkeyedEvents, w})
	}
	return out
}

// check records one check of the store's state.
func (up *upgradeRun) check(ok bool, format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	up.res.Checks = append(up.res.Checks, line)
	if !ok {
		up.res.Failed = append(up.res.Failed, line)
	}
}

func (up *upgradeRun) inspect(ctx context.Context, w *windowRun, name string) (*protocol.Inspect, error) {
	done, err := w.runOnce(ctx, w.config(protocol.RoleInspect, name, 2))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if done == nil || done.Inspect == nil {
		return nil, fmt.Errorf("%s: the inspect role reported no state", name)
	}
	return done.Inspect, nil
}

// baseDispatch runs the base's dispatchers until they have handled their
// share, then SIGKILLs the first and stops the others gracefully.
func (up *upgradeRun) baseDispatch(ctx context.Context) error {
	u, w := up.u, up.base
	for i := range u.BaseDispatchers {
		cfg := w.config(protocol.RoleDispatcher, fmt.Sprintf("b-disp-%d", i), u.DispatcherPool)
		cfg.Dispatcher = u.BaseDispatcher
		cfg.Dispatcher.ExtraCostPerDeliveryUs = w.side.ExtraCostPerDeliveryUs
		cfg.CountersIntervalMs = upgradeCountersMs
		p, err := w.start(cfg)
		if err != nil {
			return err
		}
		w.disps = append(w.disps, p)
	}
	target := int64(u.HandledShare * float64(u.Deliveries()))
	deadline := time.Now().Add(orDefault(up.step.DrainTimeout, DefaultDrainTimeout))
	for {
		var handled int64
		for _, p := range w.disps {
			if exited(p) {
				_, err := p.Wait(ctx)
				return fmt.Errorf("base dispatcher %s exited before the base's share was handled: %v", p.Name(), err)
			}
			if k := p.Counters(); k != nil {
				handled += k.Handled
			}
		}
		if handled >= target {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("base dispatchers handled %d of the %d deliveries of their share in %s", handled, target, orDefault(up.step.DrainTimeout, DefaultDrainTimeout))
		}
		if err := sleepCtx(ctx, faultPoll); err != nil {
			return err
		}
	}
	victim := w.disps[0]
	up.step.logf("  fault: SIGKILL %s", victim.Name())
	victim.Kill()
	at := time.Now().UnixNano()
	up.kill = validate.Fault{Kind: validate.FaultKill, Process: victim.Name(), StartNs: at, EndNs: at}
	w.stopAll()
	for _, p := range w.disps[1:] {
		if _, err := p.Wait(ctx); err != nil {
			return fmt.Errorf("base dispatcher: %w", err)
		}
	}
	return nil
}

// upgrade runs the candidate's setup on the base's database and measures
// it: its time, its WAL, the rows it wrote per table, the tables it
// rewrote whole.
func (up *upgradeRun) upgrade(ctx context.Context, dsn string) error {
	s, res := up.step, up.res
	before, err := s.Server.Probe(ctx, dsn)
	if err != nil {
		return err
	}
	t0 := time.Now()
	if _, err := up.cand.runOnce(ctx, up.cand.config(protocol.RoleSetup, "c-setup", 2)); err != nil {
		return fmt.Errorf("the candidate's setup did not upgrade the base's database: %w", err)
	}
	took := time.Since(t0)
	after, err := s.Server.Probe(ctx, dsn)
	if err != nil {
		return err
	}
	res.Metrics[result.UpgradeSeconds] = took.Seconds()
	res.Metrics[result.UpgradeWALBytes] = float64(after.WALPos - before.WALPos)
	names := map[string]bool{}
	for n := range before.FileNodes {
		names[n] = true
	}
	for n := range after.FileNodes {
		names[n] = true
	}
	var ins, upd, del int64
	for _, n := range slices.Sorted(maps.Keys(names)) {
		b, a := before.Tables[n], after.Tables[n]
		_, had := before.FileNodes[n]
		_, has := after.FileNodes[n]
		t := result.UpgradeTable{Table: n, Inserted: a.Inserted - b.Inserted, Updated: a.Updated - b.Updated,
			HotUpdated: a.HotUpdated - b.HotUpdated, Deleted: a.Deleted - b.Deleted,
			Created: !had && has, Dropped: had && !has, Rewritten: had && has && before.FileNodes[n] != after.FileNodes[n]}
		if !has {
			t.Inserted, t.Updated, t.HotUpdated, t.Deleted = 0, 0, 0, 0
		}
		ins, upd, del = ins+t.Inserted, upd+t.Updated, del+t.Deleted
		res.Tables = append(res.Tables, t)
	}
	res.Metrics[result.UpgradeRowsInserted] = float64(ins)
	res.Metrics[result.UpgradeRowsUpdated] = float64(upd)
	res.Metrics[result.UpgradeRowsDeleted] = float64(del)
	s.logf("  upgrade: %s, %d WAL bytes, rows inserted %d, updated %d, deleted %d", took.Round(time.Millisecond),
		after.WALPos-before.WALPos, ins, upd, del)
	return nil
}

// validate checks both sides' records as one run: every (event, handler)
// handled, a repeat only where the kill explains it (a delivery the
// killed dispatcher had in flight), per-key order across the switch, and
// no more redeliveries than the deliveries the base left in flight.
func (up *upgradeRun) validate(ctx context.Context, final *protocol.Inspect) error {
	res := up.res
	manifest := &validate.Manifest{Handlers: up.u.Workload.Handlers, FailFirst: up.u.Workload.FailFirst, AllowRedelivery: true,
		LeaseMs: int64(max(up.u.BaseDispatcher.LeaseMs, 0)), Faults: []validate.Fault{up.kill}, Final: *final}
	// Both sides' processes whose records are the run's (the republish's
	// are not: republishDir), the killed base dispatcher as killed.
	up.base.faults = []validate.Fault{up.kill}
	for _, p := range append(up.base.processes(ctx), up.cand.processes(ctx)...) {
		if strings.HasSuffix(p.Record, validate.RecordFileExt) {
			manifest.Processes = append(manifest.Processes, p)
		}
	}
	if manifest.LeaseMs == 0 {
		manifest.LeaseMs = scenarios.DefaultLeaseMs
	}
	if err := validate.WriteManifest(up.dir, manifest); err != nil {
		return err
	}
	manifest, files, _, err := validate.ReadDir(up.dir)
	if err != nil {
		return err
	}
	v := validate.Validate(manifest.Input(files))
	res.Validation = v
	up.phases.mark("validate")
	var baseOK, candOK int64
	first, last := int64(0), int64(0)
	for _, f := range files {
		for _, h := range f.Handled {
			if !h.OK {
				continue
			}
			switch {
			case strings.HasPrefix(f.Name, "b-"):
				baseOK++
			case strings.HasPrefix(f.Name, "c-"):
				candOK++
				if first == 0 || h.HandleNs < first {
					first = h.HandleNs
				}
				last = max(last, h.HandleNs)
			}
		}
	}
	res.Metrics[result.UpgradeBaseHandled] = float64(baseOK)
	res.Metrics[result.UpgradeCandidateHandled] = float64(candOK)
	res.Metrics[result.UpgradeRedeliveries] = float64(v.Redeliveries)
	if last > first {
		res.Metrics[result.UpgradeDrainDeliveriesPerS] = float64(candOK) / (float64(last-first) / float64(time.Second))
	}
	inFlight := int64(res.Metrics[result.UpgradeInFlightAtKill])
	up.check(v.Redeliveries <= inFlight, "redeliveries %d, deliveries the base left in flight %d (a redelivery must be one of them)",
		v.Redeliveries, inFlight)
	return nil
}
