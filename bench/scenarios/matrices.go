package scenarios

import (
	"fmt"
	"math"
	"time"

	"github.com/berkcansavur/relaybus/bench/protocol"
	"github.com/berkcansavur/relaybus/bench/result"
)

// The cells of each mode and the matrices of --smoke, --quick and
// --full, with the measurements their sizes come from.

func workload(keys string, keyCount int) protocol.Workload {
	return protocol.Workload{EventType: "bench.event", Handlers: []string{"noop"}, Keys: keys, KeyCount: keyCount, PayloadBytes: 128}
}

func publishCell(procs, pubs, batch, pool int) Cell {
	name := fmt.Sprintf("P=%d batch=%d pool=%s", pubs, batch, poolName(pool))
	if procs > 1 {
		name = fmt.Sprintf("ceiling %d procs x %d publishers batch=%d", procs, pubs, batch)
	}
	return Cell{Scenario: Publish, Name: name, Workload: workload("none", 0),
		PublisherProcs: procs, Publisher: protocol.Publisher{Publishers: pubs, Batch: batch}, PublisherPool: pool}
}

func poolName(pool int) string {
	if pool == 0 {
		return "default"
	}
	return fmt.Sprint(pool)
}

// dispatchConfig is one dispatcher tuning of the seed's tables.
type dispatchConfig struct {
	name                      string
	conc, batch, pool, pollMs int
	tuned                     bool // tuned for throughput (Cell.Tuned)
}

var (
	defaults   = dispatchConfig{"defaults (conc 10, batch 10, pool 10, poll 1s)", 10, 10, 10, 1000, false}
	conc10b50  = dispatchConfig{"conc 10, batch 50", 10, 50, 10, 1000, false}
	conc50b50  = dispatchConfig{"conc 50, batch 50, pool 20", 50, 50, 20, 1000, false}
	conc50b200 = dispatchConfig{"conc 50, batch 200, pool 20", 50, 200, 20, 1000, false}
	tuned      = dispatchConfig{"tuned (conc 200, batch 200, pool 40, poll 50ms)", 200, 200, 40, 50, true}
	tunedPlus  = dispatchConfig{"tuned+ (conc 400, batch 400, pool 64, poll 50ms)", 400, 400, 64, 50, true}
)

// dispatchCell: a preloaded backlog for inst dispatcher processes. The
// preload is published in batches of 500 (a template database per side
// builds it once: 150,000 events of 10k keys took 16 s in batches of 100,
// 7 s in batches of 500).
func dispatchCell(scenario, inst int, d dispatchConfig, rate float64, w protocol.Workload, label string) Cell {
	return Cell{Scenario: scenario, Name: fmt.Sprintf("%d inst, %s%s", inst, label, d.name), Workload: w,
		PreloadRate: rate, PreloadPublishers: 4, PreloadBatch: 500,
		DispatcherProcs: inst, DispatcherPool: d.pool, Tuned: d.tuned,
		Dispatcher: protocol.Dispatcher{Concurrency: d.conc, Batch: d.batch, PollMs: d.pollMs}}
}

func mixedCell(rate float64, inst int, d dispatchConfig, label string) Cell {
	return Cell{Scenario: Mixed, Name: fmt.Sprintf("%.0f/s, %s dispatchers", rate, label), Workload: workload("many", 1000),
		PublisherProcs: 1, Publisher: protocol.Publisher{Publishers: 4, Batch: 1, RatePerSec: rate}, PublisherPool: 8,
		DispatcherProcs: inst, DispatcherPool: d.pool, Tuned: d.tuned,
		Dispatcher: protocol.Dispatcher{Concurrency: d.conc, Batch: d.batch, PollMs: d.pollMs}}
}

// faultCell: two dispatchers with a short lease, one SIGKILLed mid
// window; every 50th event is poison; a publisher keeps publishing.
func faultCell(restart bool) Cell {
	w := workload("many", 100)
	w.PoisonEvery = 50
	w.MaxAttempts = 3
	w.RetryBaseDelayMs = 50
	w.RetryMaxDelayMs = 200
	c := Cell{Scenario: Faults, Name: "SIGKILL 1 of 2 dispatchers, poison 1/50, lease 2s", Workload: w,
		Preload: 5000, PreloadPublishers: 2, PreloadBatch: 100,
		PublisherProcs: 1, Publisher: protocol.Publisher{Publishers: 2, Batch: 10, RatePerSec: 500}, PublisherPool: 4,
		DispatcherProcs: 2, DispatcherPool: 10,
		Dispatcher:       protocol.Dispatcher{Concurrency: 20, Batch: 20, PollMs: 100, LeaseMs: 2000},
		KillDispatcherAt: 0.3, AllowRedelivery: true}
	if restart {
		c.Name = "SIGKILL 1 of 2 dispatchers + database restart, poison 1/50, lease 2s"
		c.RestartDBAt = 0.6
	}
	return c
}

// crashCell: the fault cell's workload, dispatchers and publisher, and
// no kill: the database server crashes three times a window (immediate
// shutdown, so nothing is checkpointed and WAL not yet flushed is lost,
// then a start through crash recovery), each time right after a window
// dispatcher's counters show a claim, the moment a claim that was not
// flushed can be lost. A crash and its recovery took 0.7 to 1 s here
// (with recovery_init_sync_method=syncfs; 2.5 to 5 s with fsync, the
// default, while the machine was shared), and the dispatchers claim
// again up to 1.6 s after it (their backoff after claim errors), so the
// points are 10, 40 and 70% of the window and a window whose crashes
// ran late runs on until the last one is made. rounds caps its rounds (0: the matrix's):
// the cell is there to be validated; each window costs a drain.
func crashCell(rounds int) Cell {
	c := faultCell(false)
	c.Name = "database crash x3, poison 1/50, lease 2s"
	c.KillDispatcherAt = 0
	c.CrashDBAt = []float64{0.1, 0.4, 0.7}
	c.RoundsMax = rounds
	return c
}

// workCell: handlers that take time (a busy wait of handlerMs per
// call), so lease renewals run beside completions, on three dispatcher
// processes with a short lease: the setup in which v0.1.0's renewal and
// CompleteMany contend for the same delivery rows (and deadlock) on this
// 2-core machine. No fault is injected, so any repeat is a duplicate
// (v0.1.0 is INVALID here by design). Concurrency 50 keeps 150 leases
// held and renewed while others complete. The busy wait ends by the wall
// clock, so a handler that waits for a core still takes handlerMs and
// the rate is bounded by the database, not by the handlers' CPU (v0.1.0
// ran 260 to 560 deliveries/s with 5 ms handlers here, on a shared
// machine): the preload covers warm-up and window at workRateMax, several
// times that (a store that runs it dry gets the cell run again with
// twice the preload), and the drain, whose dispatchers run without the
// handler cost while the window's are stopped, takes the rest in seconds.
func workCell(handlerMs int) Cell {
	w := workload("none", 0)
	w.HandlerCostUs = handlerMs * 1000
	return Cell{Scenario: Work, Name: fmt.Sprintf("3 inst, handlers %d ms, lease 2s (conc 50, batch 50, pool 10)", handlerMs),
		Workload: w, PreloadRate: workRateMax, PreloadPublishers: 2, PreloadBatch: 100,
		DispatcherProcs: 3, DispatcherPool: 10,
		Dispatcher: protocol.Dispatcher{Concurrency: 50, Batch: 50, PollMs: 100, LeaseMs: 2000}}
}

// batchCell compares, on one ref, a handler of one delivery (the base
// side) with a batch handler of up to batchHandlerMax deliveries of one
// key (the candidate side), on one dispatcher process, each handler call
// waiting batchCallWaitUs (dispatcher.handler_call_wait_us: the round
// trip of a read-modify-write of the key's row elsewhere, which applies
// one delivery or a batch at about the same cost). The sides differ only
// in handler mode (Cell.Sides), so the comparison is of the two modes;
// a worker without protocol.CapabilityBatchHandlers lists both fields
// ignored, and its two sides run alike. Concurrency 64 and batch 400: on
// 10k keys the per-delivery side has 64 calls in flight, on 4 hot keys
// every side has at most 4 (one per key) and the batch side's claim can
// take 4 runs of batchHandlerMax. calls is the batch side's
// BatchOptions.MaxCalls (dispatcher.handler_batch_calls), 0 for the
// library's default.
func batchCell(w protocol.Workload, rate float64, label string, calls int) Cell {
	base := protocol.Dispatcher{Concurrency: 64, Batch: 400, PollMs: 50, HandlerCallWaitUs: batchCallWaitUs}
	batch := base
	batch.HandlerBatchMax = batchHandlerMax
	batch.HandlerBatchCalls = calls
	name := fmt.Sprintf("1 inst, %shandler of 1 (base) vs batch of %d (candidate), %d us a call", label, batchHandlerMax, batchCallWaitUs)
	callsSetting := "MaxCalls the ref's default (relaybus.DefaultBatchMaxCalls; one call a claim in refs without it)"
	if calls > 0 {
		name = fmt.Sprintf("1 inst, %shandler of 1 (base) vs batch of %d x %d calls (candidate), %d us a call", label, batchHandlerMax, calls, batchCallWaitUs)
		callsSetting = fmt.Sprintf("MaxCalls %d (dispatcher.handler_batch_calls; ignored by refs without it)", calls)
	}
	return Cell{Scenario: Batch,
		Name:     name,
		Workload: w, PreloadRate: rate, PreloadPublishers: 4, PreloadBatch: 500,
		DispatcherProcs: 1, DispatcherPool: 20, Dispatcher: base,
		Sides: map[string]SideRun{
			result.SideBase:      {Dispatcher: base, Settings: fmt.Sprintf("relaybus Handle, one delivery a call, %d us a call", batchCallWaitUs)},
			result.SideCandidate: {Dispatcher: batch, Settings: fmt.Sprintf("relaybus HandleBatch, MaxSize %d, %s, %d us a call", batchHandlerMax, callsSetting, batchCallWaitUs)},
		}}
}

// The batch cells' handler: batches of up to 20 deliveries of a key, 1 ms
// a call. The preload must feed the faster side (the batch handler) over
// warm-up and window, while what the slower side leaves of it drains
// after each of its windows at about the slower side's rate: the window's
// dispatcher keeps the hot keys' lanes during the drain, and a hot key
// moves one delivery per claim and completion round trip either way
// (0.2.x ran 650 to 930/s on 4 hot keys with no handler cost here, idle;
// 140/s on a loaded machine). batchHotRateMax is 30,000/s: the batch
// side with MaxCalls 4 ran 20,580 to 21,110/s here (idle), and ran the
// 12,000/s preload this was before dry; a window
// that runs dry makes the runner raise the preload and run the cell again
// (runner.MaxPreloadRaises), and a slow machine needs --drain-timeout
// above its 3 minutes (each base window leaves most of the preload).
// batchManyRateMax: 10k keys, where each key has about one due delivery,
// so both sides run batches of one: as the keyed 10k cells
// (manyKeysRateMax).
const (
	batchHandlerMax  = 20
	batchCallWaitUs  = 1000
	batchHotRateMax  = 30_000
	batchManyRateMax = manyKeysRateMax
	// batchHotCalls is the MaxCalls of the third cell's batch side.
	batchHotCalls = 6
)

// batchCells are the opt-in cells of scenario 10 (Matrix.OptIn).
func batchCells() []Cell {
	return []Cell{
		batchCell(workload("hot", 4), batchHotRateMax, "4 hot keys, ", 0),
		batchCell(workload("many", 10_000), batchManyRateMax, "10k keys, ", 0),
		// Runs of 120 (6 calls of 20): within the 128 PostgreSQL gives
		// from one hold of a lane, so a claim takes a key's whole run.
		batchCell(workload("hot", 4), batchHotRateMax, "4 hot keys, ", batchHotCalls),
	}
}

// workRateMax is the highest delivery rate a work cell's preload covers:
// 2.7 times the fastest window seen here (560/s).
const workRateMax = 1500

// Smoke is one short cell, twice per side (the smallest balanced ABBA
// run), and the upgrade on a small backlog (run only when the refs
// differ), for CI.
func Smoke() Matrix {
	return Matrix{Mode: "smoke", Rounds: 2, Warmup: 500 * time.Millisecond, Window: 2 * time.Second,
		Cells:   []Cell{dispatchCell(Dispatch, 1, conc50b50, 16_000, workload("none", 0), "")},
		Upgrade: upgrade(smokeUpgradeEvents, 20_000)}.fitted()
}

// The upgrade's backlog in --smoke: events per kind (keyed, unkeyed).
const smokeUpgradeEvents = 1000

// Quick is a small matrix across scenarios 1, 2, 3, 5, two fault cells
// (a SIGKILL, and database crashes in 2 rounds, not 4: quickCrashRounds)
// and the two handler-work cells (and, last, publish P=32 batch=1), about
// 11 minutes on a 2-core machine
// against v0.2.0, 18 against v0.1.0, whose drain of 4 hot keys takes 70
// to 95 s a window (BENCHMARKS.md has the measured wall times).
func Quick() Matrix {
	// Four rounds: with 3+3 samples the smallest possible Mann-Whitney p
	// is 0.1, so no verdict could ever be reached at alpha 0.05; 4+4 gives
	// 0.029. Windows are short to pay for the extra round.
	warmup, window := time.Second, 4*time.Second
	return Matrix{Mode: "quick", Rounds: 4, Warmup: warmup, Window: window, Cells: []Cell{
		publishCell(1, 1, 1, 0),
		publishCell(1, 8, 10, 10),
		// Preloads cover warm-up and window at the fastest rates seen
		// here with VACUUM ANALYZE after the preload (2 processes about
		// 25,000/s), with room: a window that runs dry is INVALID.
		dispatchCell(Dispatch, 2, tuned, dispatchRateMax, workload("none", 0), ""),
		// 4 hot keys: 0.2.0 claims a key's next delivery as soon as the
		// previous one completes and ran a preload of 1,000 dry within
		// warm-up and window here; v0.1.0 runs one per key and poll
		// (about 65/s in the v0.1.0 A/A run), and the drain dispatchers'
		// 10 ms poll takes the rest of its preload well within the drain
		// timeout.
		dispatchCell(Keyed, 1, tuned, hotKeysRateMax, workload("hot", 4), "4 hot keys, "),
		dispatchCell(Keyed, 1, tuned, manyKeysRateMax, workload("many", 10_000), "10k keys, "),
		mixedCell(500, 1, tuned, "tuned"),
		faultCell(false),
		crashCell(quickCrashRounds),
		workCell(5),
		workCell(20),
		// 32 publishers on pgx's default pool of 4: what Publish's group
		// commit is for. Last, so that the cells before it keep their
		// numbers.
		publishCell(1, 32, 1, 0),
		// Mixed load with the default dispatcher settings (poll 1 s):
		// what a service that tunes nothing sees, the cells issues 26
		// and 27 judge wake-ups and the claim path by. After P=32 for
		// the same reason.
		mixedCell(500, 1, defaults, "defaults"),
		mixedCell(750, 1, defaults, "defaults"),
	}, OptIn: batchCells(), Upgrade: upgrade(quickUpgradeEvents, 20_000)}.fitted()
}

// quickCrashRounds: --quick runs the crash cell in 2 rounds (4 windows,
// about 9 s each here, most of it warm-up, window and drain): it is
// there for its validity, and 4 rounds would add more than a minute to
// the mode. Its figures get no verdict ("too few samples").
const quickCrashRounds = 2

// The rates the preloads of dispatch and keyed cells feed (PreloadRate):
// about 1.5 times the fastest seen here. A preload is published once per
// side and cell (runner: preload templates), but what a window leaves of
// it is drained after every window, so a larger margin costs every
// window time; a run whose preload runs out doubles it and runs the cell
// again (runner.MaxPreloadRaises), so a faster store costs a rerun, not
// a result. dispatchRateMax: the fastest windows of --quick runs here
// were 0.2.0's 27,400 deliveries/s with 2 dispatch processes and 17,400/s
// on 10k keys, on an idle machine (half that on a shared one; v0.1.0
// about 12,000/s on either, with the VACUUM ANALYZE after the preload);
// 25,000/s ran out in the dispatch cell and cost a rerun of the cell.
// manyKeysRateMax, for the 10k keys cells, whose drain is slower (keyed
// claims: about 9,000/s): 1.4 times the fastest seen. hotKeysRateMax:
// 0.2.0 ran 1,000 deliveries of 4 hot keys dry within a quick run's 5 s
// of warm-up and window, and ran 650 to 930/s with 6,000 to 8,000 preloaded; v0.1.0 runs
// about 65/s with 1,000 preloaded and 36 to 43/s with 6,000 to 8,000 (its
// claim walks the keys' backlog), and drains 6,000 in about 70 s (8,000
// in 167 s, close to the drain timeout): the rate is kept just above
// 0.2.0's so that v0.1.0's drain stays well inside it.
const (
	dispatchRateMax = 40_000
	manyKeysRateMax = 25_000
	hotKeysRateMax  = 1_200
)

// FitPreloads sizes the preload of every cell with a PreloadRate to that
// rate over the matrix's warm-up and window. Call it after changing them.
func (m *Matrix) FitPreloads() {
	for _, cells := range [][]Cell{m.Cells, m.OptIn} {
		for i, c := range cells {
			if c.PreloadRate > 0 {
				cells[i].Preload = int(math.Ceil(c.PreloadRate * (m.Warmup + c.WindowIn(m.Window)).Seconds()))
			}
		}
	}
}

// Connections is the most connections one window of the matrix can open
// at once: every publisher and dispatcher process's pool (pgx's default
// of 4 where the cell names none), plus extra, the caller's own (the
// runner's, the drain dispatchers'). The server must allow that many: a
// 4-process cell with pools of 40 holds 160, above PostgreSQL's default
// of 100, and a completion path that uses its whole pool then finds the
// server full.
func (m *Matrix) Connections(extra int) int {
	most := 0
	pool := func(n int) int {
		if n <= 0 {
			return 4
		}
		return n
	}
	for _, c := range m.Cells {
		n := c.PublisherProcs*pool(c.PublisherPool) + c.DispatcherProcs*pool(c.DispatcherPool)
		if c.Preload > 0 {
			n = max(n, c.PreloadPublishers*4)
		}
		most = max(most, n)
	}
	if u := m.Upgrade; u != nil {
		most = max(most, (u.BaseDispatchers+u.CandidateDispatchers)*pool(u.DispatcherPool)+u.PreloadPublishers*4)
	}
	return most + extra
}

func (m Matrix) fitted() Matrix {
	m.FitPreloads()
	return m
}

// The upgrade's backlog in --quick: events per kind (keyed, unkeyed).
const quickUpgradeEvents = 3000

// Full is the seed's matrix (publish, dispatch with 1/4/8 instances,
// keyed, faults, mixed) and the handler-work cells. It takes hours.
func Full() Matrix {
	m := Matrix{Mode: "full", Rounds: 6, Warmup: 2 * time.Second, Window: 15 * time.Second}
	for _, pb := range [][2]int{{1, 1}, {1, 100}, {8, 1}, {8, 100}, {32, 1}, {32, 100}} {
		m.Cells = append(m.Cells, publishCell(1, pb[0], pb[1], 0))
	}
	for _, pb := range [][3]int{{8, 1, 10}, {8, 100, 10}, {32, 1, 34}, {32, 100, 34}} {
		m.Cells = append(m.Cells, publishCell(1, pb[0], pb[1], pb[2]))
	}
	m.Cells = append(m.Cells, publishCell(4, 8, 1, 10), publishCell(4, 8, 100, 10))
	for _, inst := range []int{1, 4, 8} {
		for _, d := range []dispatchConfig{defaults, conc10b50, conc50b50, conc50b200, tuned, tunedPlus} {
			m.Cells = append(m.Cells, dispatchCell(Dispatch, inst, d, dispatchRateMax, workload("none", 0), ""))
		}
	}
	// The unbatched completion path (protocol field
	// completion_window_disabled; a worker older than it reports it
	// ignored and batches, which the report shows).
	unbatched := dispatchCell(Dispatch, 4, tuned, dispatchRateMax, workload("none", 0), "completion unbatched, ")
	unbatched.Dispatcher.CompletionWindowDisabled = true
	m.Cells = append(m.Cells, unbatched)
	for _, inst := range []int{1, 4} {
		m.Cells = append(m.Cells,
			// 0.1.0 runs a hot key's deliveries one poll apart (about 65/s
			// for 4 keys); the drain dispatchers' 10 ms poll drains the
			// rest (see Quick).
			dispatchCell(Keyed, inst, tuned, hotKeysRateMax, workload("hot", 4), "4 hot keys, "),
			dispatchCell(Keyed, inst, tuned, manyKeysRateMax, workload("many", 10_000), "10k keys, "))
	}
	m.Cells = append(m.Cells, faultCell(false), faultCell(true), crashCell(0))
	m.Cells = append(m.Cells,
		mixedCell(1000, 1, defaults, "defaults"), mixedCell(5000, 1, defaults, "defaults"),
		mixedCell(1000, 1, tuned, "tuned"), mixedCell(5000, 1, tuned, "tuned"), mixedCell(10000, 1, tuned, "tuned"))
	m.Cells = append(m.Cells, workCell(5), workCell(20))
	m.OptIn = batchCells()
	m.Upgrade = upgrade(25_000, 60_000)
	m.Cells = append(m.Cells, BloatCells()...)
	return m.fitted()
}

// ByMode returns the matrix of a mode name.
func ByMode(mode string) (Matrix, error) {
	switch mode {
	case "smoke":
		return Smoke(), nil
	case "quick":
		return Quick(), nil
	case "full":
		return Full(), nil
	case ModeBloat:
		return Bloat(), nil
	}
	return Matrix{}, fmt.Errorf("scenarios: unknown mode %q (smoke, quick, full, bloat)", mode)
}
