package runner

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/berkcansavur/relaybus/bench/protocol"
	"github.com/berkcansavur/relaybus/bench/result"
	"github.com/berkcansavur/relaybus/bench/scenarios"
	"github.com/berkcansavur/relaybus/bench/validate"
)

func testWorkload() protocol.Workload {
	return protocol.Workload{EventType: "t", Handlers: []string{"a"}, Keys: "none", PayloadBytes: 8}
}

func dispatchTestCell(preload, dispatchers int) *scenarios.Cell {
	return &scenarios.Cell{Scenario: scenarios.Dispatch, Name: "test dispatch", Workload: testWorkload(),
		Preload: preload, PreloadPublishers: 1, PreloadBatch: 10, DispatcherProcs: dispatchers,
		Dispatcher: protocol.Dispatcher{Concurrency: 1, Batch: 1}}
}

// measure runs one window of c on a fake cluster.
func measure(t *testing.T, fc *fakeCluster, c *scenarios.Cell, tune func(*Step)) (*result.Sample, *Step) {
	t.Helper()
	step := &Step{Server: fc, Launch: fc.launch, Warmup: 20 * time.Millisecond, Window: 300 * time.Millisecond,
		DrainTimeout: 10 * time.Second, StopTimeout: time.Second}
	if tune != nil {
		tune(step)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w := Window{Cell: 0, Round: 1, Side: result.SideBase, Order: 1, Name: "rb_t_c01_r1_b", Dir: "cell01/r1-base"}
	p := step.Prepare(ctx, w, c, &Side{Name: result.SideBase, Bin: "fake"}, filepath.Join(t.TempDir(), w.Dir))
	s := step.Measure(ctx, p, nil)
	if len(fc.dbs) != 0 {
		t.Errorf("window databases left behind: %v", fc.dbs)
	}
	return s, step
}

func TestMeasureDispatchWindow(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster()
	fc.handleEvery = time.Millisecond
	s, _ := measure(t, fc, dispatchTestCell(2000, 1), nil)
	if !s.IsValid() {
		t.Fatalf("sample INVALID: %q %v", s.Error, s.Validation)
	}
	if s.Validation.Published != 2000 || s.Validation.HandledOK != 2000 {
		t.Fatalf("validation %v", s.Validation)
	}
	rate := s.Metrics[result.MetricDeliveriesPerS]
	// One fake dispatcher handles a delivery a millisecond at most.
	if rate <= 0 || rate > 1100 {
		t.Fatalf("deliveries/s = %v", rate)
	}
	if wal := s.Metrics[result.MetricWALBytesPerDelivery]; wal < 400 || wal > 600 {
		t.Fatalf("WAL B/delivery = %v, want about 500 (the fake writes 500 per completion)", wal)
	}
	if _, ok := s.Metrics[result.MetricEventsPerS]; ok {
		t.Fatal("a dispatch-only cell has no events/s")
	}
	if len(s.Series) == 0 {
		t.Fatal("no series")
	}
}

func TestMeasurePublishOnlyWindow(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster()
	c := &scenarios.Cell{Scenario: scenarios.Publish, Name: "test publish", Workload: testWorkload(),
		PublisherProcs: 2, Publisher: protocol.Publisher{Publishers: 1, Batch: 1}}
	s, _ := measure(t, fc, c, nil)
	if !s.IsValid() {
		t.Fatalf("sample INVALID: %q %v", s.Error, s.Validation)
	}
	if s.Metrics[result.MetricEventsPerS] <= 0 {
		t.Fatalf("events/s %v", s.Metrics)
	}
	if _, ok := s.Metrics[result.MetricDeliveriesPerS]; ok {
		t.Fatal("a publish-only cell has no deliveries/s: the drain is not measured")
	}
	// Everything published in and after the window was drained and handled.
	if s.Validation.HandledOK != s.Validation.Expected || s.Validation.Expected == 0 {
		t.Fatalf("validation %v", s.Validation)
	}
}

func TestMeasureKillFault(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster()
	fc.handleEvery = time.Millisecond
	c := dispatchTestCell(3000, 2)
	c.Scenario, c.KillDispatcherAt, c.AllowRedelivery = scenarios.Faults, 0.3, true
	s, _ := measure(t, fc, c, nil)
	if !s.IsValid() {
		t.Fatalf("sample INVALID: %q %v", s.Error, s.Validation)
	}
	if _, ok := s.Metrics[result.MetricRedeliveries]; !ok {
		t.Fatalf("fault cell without a redeliveries metric: %v", s.Metrics)
	}
}

func TestMeasureWorkerThatExits(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster()
	fc.misbehave["disp-0"] = "exit"
	s, _ := measure(t, fc, dispatchTestCell(500, 1), nil)
	if s.IsValid() || !strings.Contains(s.Error, "dispatcher") || !strings.Contains(s.Error, "lost its connection") {
		t.Fatalf("a dispatcher that died mid-window must make the window INVALID: %q", s.Error)
	}
}

func TestMeasurePreloadRanOut(t *testing.T) {
	t.Parallel()
	s, _ := measure(t, newFakeCluster(), dispatchTestCell(50, 1), nil)
	if s.IsValid() || !strings.Contains(s.Error, "the preload ran out") {
		t.Fatalf("a window that ran dry must be INVALID: %q", s.Error)
	}
}

func TestMeasureDrainTimeout(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster()
	for _, n := range []string{"disp-0", "drain-0", "drain-1"} {
		fc.misbehave[n] = "idle"
	}
	s, _ := measure(t, fc, dispatchTestCell(50, 1), func(s *Step) { s.DrainTimeout = 300 * time.Millisecond })
	if s.IsValid() || !strings.Contains(s.Error, "not drained") {
		t.Fatalf("an undrained window must be INVALID: %q", s.Error)
	}
}

func TestMeasureDuplicatesAreInvalid(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster()
	fc.misbehave["disp-0"] = "twice"
	s, _ := measure(t, fc, dispatchTestCell(3000, 1), nil)
	if s.Error != "" || s.Validation == nil || s.Validation.Valid || s.Validation.Duplicates == 0 {
		t.Fatalf("duplicates must make the window INVALID: %q %v", s.Error, s.Validation)
	}
}

func TestRunnerRunsThePlan(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster()
	run := runCell(t, fc, dispatchTestCell(3000, 1), &Step{Window: 100 * time.Millisecond, DrainTimeout: 10 * time.Second})
	if len(run.Cells) != 1 || len(run.Cells[0].Samples) != 4 {
		t.Fatalf("run %+v", run)
	}
	var order []string
	for i, s := range run.Cells[0].Samples {
		if s.Order != i+1 || !s.IsValid() {
			t.Errorf("sample %d: order %d valid %v (%q)", i, s.Order, s.IsValid(), s.Error)
		}
		order = append(order, s.Side[:1])
	}
	if strings.Join(order, "") != "bccb" {
		t.Fatalf("order %v", order)
	}
	// Each window after the first was prepared after the previous one's
	// measured window had ended, and no database was created while a
	// window was measured.
	// The preload was published once per side, in a template database,
	// and every window's database is a copy of its side's template.
	measuring := ""
	var created, cloned []string
	for _, e := range fc.events {
		kind, rest, _ := strings.Cut(e, " ")
		db, from, _ := strings.Cut(rest, " from ")
		switch kind {
		case "create", "clone":
			if measuring != "" {
				t.Fatalf("%s created while %s was measured: %q", db, measuring, fc.events)
			}
			if kind == "create" {
				created = append(created, db)
			} else {
				cloned = append(cloned, db[len(db)-1:]+"<"+from[len(from)-1:])
			}
		case "begin":
			measuring = db
		case "end":
			measuring = ""
		}
	}
	if len(created) != 2 || !strings.HasSuffix(created[0], "_tp_b") || !strings.HasSuffix(created[1], "_tp_c") {
		t.Fatalf("created %v; want the two templates", created)
	}
	if strings.Join(cloned, " ") != "b<b c<c c<c b<b" {
		t.Fatalf("cloned %v; want each window from its side's template", cloned)
	}
	// Every window handled the template's preload, under its ids.
	for _, s := range run.Cells[0].Samples {
		if s.Validation == nil || s.Validation.Published < 3000 {
			t.Errorf("sample %s %d: validation %+v; want the 3000 preloaded events", s.Side, s.Order, s.Validation)
		}
	}
}

// Issue 11, points 3 and 6: what makes a window INVALID besides its
// deliveries.
func TestMeasureInvalidWindows(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		misbehave map[string]string
		cell      func() *scenarios.Cell
		tune      func(*Step)
		wantErr   string // in Sample.Error
		wantValid string // in the validation's String
	}{
		{name: "a dispatcher that ignores SIGTERM", misbehave: map[string]string{"disp-0": "stubborn"},
			tune: func(s *Step) { s.StopTimeout = 100 * time.Millisecond }, wantErr: "ignored SIGTERM"},
		{name: "a setup that never ends", misbehave: map[string]string{"setup": "hang"},
			tune: func(s *Step) { s.SetupTimeout = 200 * time.Millisecond }, wantErr: "setup: runner: setup (role setup) did not finish within 200ms"},
		{name: "a truncated record of a live dispatcher", misbehave: map[string]string{"disp-0": "cut"},
			wantValid: "truncated record files 1"},
		{name: "an idle window", misbehave: map[string]string{"disp-0": "idle"},
			wantValid: "idle window"},
		{name: "publish errors outside fault cells", misbehave: map[string]string{"pub-0": "errors"},
			cell: func() *scenarios.Cell {
				return &scenarios.Cell{Scenario: scenarios.Publish, Name: "test publish", Workload: testWorkload(),
					PublisherProcs: 1, Publisher: protocol.Publisher{Publishers: 1, Batch: 1}}
			}, wantValid: "publish errors"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fc := newFakeCluster()
			fc.misbehave = tc.misbehave
			c := dispatchTestCell(3000, 1)
			if tc.cell != nil {
				c = tc.cell()
			}
			s, _ := measure(t, fc, c, tc.tune)
			if s.IsValid() {
				t.Fatalf("VALID: %v", s.Validation)
			}
			if tc.wantErr != "" && !strings.Contains(s.Error, tc.wantErr) {
				t.Fatalf("error %q, want %q", s.Error, tc.wantErr)
			}
			if tc.wantValid != "" && (s.Validation == nil || !strings.Contains(s.Validation.String(), tc.wantValid)) {
				t.Fatalf("validation %v (error %q), want %q", s.Validation, s.Error, tc.wantValid)
			}
		})
	}
}

// The window folder holds what `bench validate DIR` needs, and it gives
// the same verdict.
func TestMeasureWritesAValidatableFolder(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster()
	fc.handleEvery = time.Millisecond
	c := dispatchTestCell(1000, 2)
	c.Scenario, c.KillDispatcherAt, c.AllowRedelivery = scenarios.Faults, 0.3, true
	step := &Step{Server: fc, Launch: fc.launch, Window: 300 * time.Millisecond, DrainTimeout: 10 * time.Second}
	dir := filepath.Join(t.TempDir(), "w")
	w := Window{Round: 1, Side: result.SideBase, Order: 1, Name: "rb_t_c01_r1_b"}
	s := step.Measure(context.Background(), step.Prepare(context.Background(), w, c, &Side{Name: result.SideBase}, dir), nil)
	m, files, found, err := validate.ReadDir(dir)
	if err != nil || !found {
		t.Fatalf("ReadDir: %v (manifest found %v)", err, found)
	}
	if len(m.Faults) != 1 || m.Faults[0].Kind != validate.FaultKill || m.Faults[0].Process != "disp-0" || m.Window == nil {
		t.Fatalf("manifest %+v", m)
	}
	again := validate.Validate(m.Input(files))
	if again.String() != s.Validation.String() || !again.Valid {
		t.Fatalf("re-validated %s, the window said %s", again, s.Validation)
	}
}

// TestMeasureNoKeyOrderSide: a side whose workers keep no per-key order
// is validated without the order checks, and its manifest says so, so
// that `bench validate` of a kept window re-checks it the same way.
func TestMeasureNoKeyOrderSide(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster()
	fc.handleEvery = time.Millisecond
	c := dispatchTestCell(2000, 1)
	c.Workload.Keys, c.Workload.KeyCount = "many", 10
	step := &Step{Server: fc, Launch: fc.launch, Warmup: 20 * time.Millisecond, Window: 300 * time.Millisecond,
		DrainTimeout: 10 * time.Second, StopTimeout: time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w := Window{Cell: 0, Round: 1, Side: result.SideBase, Order: 1, Name: "rb_t_c01_r1_b", Dir: "cell01/r1-base"}
	dir := filepath.Join(t.TempDir(), w.Dir)
	p := step.Prepare(ctx, w, c, &Side{Name: result.SideBase, Bin: "fake", NoKeyOrder: true}, dir)
	s := step.Measure(ctx, p, nil)
	if !s.IsValid() {
		t.Fatalf("sample INVALID: %q %v", s.Error, s.Validation)
	}
	if s.Validation.KeyOrderSkipped != 2000 || len(s.Validation.Notes) == 0 {
		t.Fatalf("key order skipped for %d handles (notes %q), want 2000", s.Validation.KeyOrderSkipped, s.Validation.Notes)
	}
	m, _, found, err := validate.ReadDir(dir)
	if err != nil || !found || !m.NoKeyOrder {
		t.Fatalf("manifest %+v found %v: %v", m, found, err)
	}
}

// TestMeasureWaitsForDrainDispatchers: a drain that is over at its first
// look stops the drain dispatchers only after they said ready; stopped
// before, a real worker dies without a done line (INVALID).
func TestMeasureWaitsForDrainDispatchers(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster()
	fc.handleEvery = time.Millisecond
	fc.misbehave["drain-0"] = "lazy"
	s, _ := measure(t, fc, dispatchTestCell(2000, 1), nil)
	if !s.IsValid() {
		t.Fatalf("sample INVALID: %q %v", s.Error, s.Validation)
	}
}

// TestDrainDispatchersKeepTheCellsLease: the drain's dispatchers run with
// the cell's lease (River's leader rescues a killed dispatcher's jobs
// after its own rescue delay), and with the drain's fast settings.
func TestDrainDispatchersKeepTheCellsLease(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster()
	fc.handleEvery = time.Millisecond
	c := dispatchTestCell(2000, 1)
	c.Dispatcher.LeaseMs = 2000
	if s, _ := measure(t, fc, c, nil); !s.IsValid() {
		t.Fatalf("sample INVALID: %q %v", s.Error, s.Validation)
	}
	n := 0
	for _, cfg := range fc.configs {
		if !strings.HasPrefix(cfg.Name, "drain-") {
			continue
		}
		n++
		want := scenarios.DrainDispatcher
		want.LeaseMs = 2000
		if cfg.Dispatcher.LeaseMs != want.LeaseMs || cfg.Dispatcher.Concurrency != want.Concurrency || cfg.Dispatcher.PollMs != want.PollMs {
			t.Errorf("%s: dispatcher %+v, want %+v", cfg.Name, cfg.Dispatcher, want)
		}
	}
	if n != drainDispatchers {
		t.Fatalf("%d drain dispatchers, want %d", n, drainDispatchers)
	}
}

// A template whose setup fails is built once per side and makes every
// window of that side and cell INVALID with the reason; nothing is left
// behind.
func TestFailedTemplateInvalidatesItsWindows(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster()
	fc.misbehave["setup"] = "hang"
	run := runCell(t, fc, dispatchTestCell(100, 1), &Step{Window: 100 * time.Millisecond, SetupTimeout: 100 * time.Millisecond})
	for _, s := range run.Cells[0].Samples {
		if !strings.Contains(s.Error, "preload template rb_") || !strings.Contains(s.Error, "did not finish within 100ms") {
			t.Errorf("sample %s %d: error %q; want the template's setup timeout", s.Side, s.Order, s.Error)
		}
	}
	setups := 0
	for _, c := range fc.configs {
		if c.Role == protocol.RoleSetup {
			setups++
		}
	}
	if setups != 2 {
		t.Errorf("%d setups ran; want one per side", setups)
	}
}

// A cell whose preload runs out is run again from its first window with
// twice the preload (up to MaxPreloadRaises times): every window of both
// sides then starts on the same backlog, and the run says so.
func TestRanOutPreloadIsRaised(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster()
	// At most one delivery per 2 ms: a 200 ms window handles at most 100,
	// so a preload of 30 runs out, 60 most likely does, 120 cannot.
	fc.handleEvery = 2 * time.Millisecond
	run := runCell(t, fc, dispatchTestCell(30, 1), &Step{Window: 200 * time.Millisecond, DrainTimeout: 10 * time.Second})
	c := run.Cells[0]
	if p := c.Config["preload"]; p != 60 && p != 120 {
		t.Fatalf("preload %v; want 60 or 120", p)
	}
	if len(c.Samples) != 4 {
		t.Fatalf("%d samples; want the 4 of the last run of the cell", len(c.Samples))
	}
	for i, s := range c.Samples {
		if s.Order != i+1 || !s.IsValid() {
			t.Errorf("sample %d: order %d, valid %v (%q)", i, s.Order, s.IsValid(), s.Error)
		}
		if s.Validation.Published < int64(c.Config["preload"].(int)) {
			t.Errorf("sample %d published %d; want at least the preload", i, s.Validation.Published)
		}
	}
	if len(run.Warnings) == 0 || !strings.Contains(run.Warnings[0], "the preload of 30 ran out") {
		t.Errorf("warnings %q; want the raise named", run.Warnings)
	}
}

// runCell runs two rounds of cell c, base and candidate, through a
// Runner on fc with step, and checks that the run left no database.
func runCell(t *testing.T, fc *fakeCluster, c *scenarios.Cell, step *Step) *result.Run {
	t.Helper()
	step.Server, step.Launch = fc, fc.launch
	m := scenarios.Matrix{Mode: result.ModeCustom, Rounds: 2, Window: scenarios.MinWindow, Cells: []scenarios.Cell{*c}}
	r, err := New(m, &Side{Name: result.SideBase, Bin: "b"}, &Side{Name: result.SideCandidate, Bin: "c"}, step, t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	run, err := r.Run(context.Background(), result.Run{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if len(fc.dbs) != 0 {
			t.Errorf("databases left after the run: %v", slices.Collect(maps.Keys(fc.dbs)))
		}
	})
	return run
}

func crashTestCell() *scenarios.Cell {
	c := dispatchTestCell(3000, 2)
	c.Scenario, c.CrashDBAt, c.AllowRedelivery = scenarios.Faults, []float64{0.2, 0.5, 0.8}, true
	return c
}

// TestMeasureCrashFault: the window crashes the server at each point,
// each time at a claim; the manifest records the crashes with their
// spans inside the window, and the window's dispatchers report often
// enough for a crash to follow a claim closely.
func TestMeasureCrashFault(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster()
	fc.handleEvery = time.Millisecond
	step := &Step{Server: fc, Launch: fc.launch, Warmup: 20 * time.Millisecond, Window: 300 * time.Millisecond,
		DrainTimeout: 10 * time.Second, StopTimeout: time.Second}
	dir := filepath.Join(t.TempDir(), "w")
	w := Window{Round: 1, Side: result.SideBase, Order: 1, Name: "rb_t_c01_r1_b"}
	s := step.Measure(context.Background(), step.Prepare(context.Background(), w, crashTestCell(), &Side{Name: result.SideBase}, dir), nil)
	if !s.IsValid() {
		t.Fatalf("sample INVALID: %q %v", s.Error, s.Validation)
	}
	if fc.crashes != 3 || fc.restarts != 0 {
		t.Fatalf("%d crashes, %d restarts; want 3 crashes", fc.crashes, fc.restarts)
	}
	if warnings := step.Warnings(); len(warnings) != 0 {
		t.Fatalf("warnings %q", warnings)
	}
	m, _, found, err := validate.ReadDir(dir)
	if err != nil || !found || m.Window == nil {
		t.Fatalf("ReadDir: %v (manifest found %v)", err, found)
	}
	if len(m.Faults) != 3 {
		t.Fatalf("faults %+v, want 3 crashes", m.Faults)
	}
	for i, f := range m.Faults {
		point := m.Window.StartNs + int64(crashTestCell().CrashDBAt[i]*float64(300*time.Millisecond))
		if f.Kind != validate.FaultCrash || f.StartNs < point || f.EndNs < f.StartNs || f.StartNs > point+int64(crashAfterClaim) {
			t.Errorf("fault %d %+v: want a crash after its point %d", i, f, point)
		}
	}
	for _, cfg := range fc.configs {
		if strings.HasPrefix(cfg.Name, "disp-") && cfg.CountersIntervalMs != crashCountersMs {
			t.Errorf("%s reports every %d ms, want %d", cfg.Name, cfg.CountersIntervalMs, crashCountersMs)
		}
		if strings.HasPrefix(cfg.Name, "drain-") && cfg.CountersIntervalMs != 0 {
			t.Errorf("drain dispatcher %s reports every %d ms, want the default", cfg.Name, cfg.CountersIntervalMs)
		}
	}
}

// TestCrashWithoutClaims: dispatchers that claim nothing do not hold the
// crash back past crashAfterClaim, and the run says it crashed without a
// claim.
func TestCrashWithoutClaims(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster()
	fc.misbehave = map[string]string{"disp-0": "idle", "disp-1": "idle"}
	start := time.Now()
	_, step := measure(t, fc, crashTestCell(), nil)
	if fc.crashes != 3 {
		t.Fatalf("%d crashes, want 3", fc.crashes)
	}
	if w := step.Warnings(); len(w) != 1 || !strings.Contains(w[0], "saw no claim") {
		t.Fatalf("warnings %q, want one about crashes without a claim", w)
	}
	if took := time.Since(start); took > 30*time.Second {
		t.Fatalf("the window took %s", took)
	}
}

// TestCrashReplacesExitedWorkers: a dispatcher that fails in a crash is
// replaced while the window runs, and its exit is a warning, not the
// window's error.
func TestCrashReplacesExitedWorkers(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster()
	fc.handleEvery = time.Millisecond
	fc.misbehave = map[string]string{"disp-1": "crash-exit"}
	s, step := measure(t, fc, crashTestCell(), nil)
	if !s.IsValid() {
		t.Fatalf("sample INVALID: %q %v", s.Error, s.Validation)
	}
	var names []string
	for _, cfg := range fc.configs {
		if cfg.Role == protocol.RoleDispatcher {
			names = append(names, cfg.Name)
		}
	}
	// Replaced once, although the loop looks at it at every tick after.
	if !slices.Contains(names, "disp-1-re1") || slices.Contains(names, "disp-1-re2") {
		t.Fatalf("dispatchers %v, want disp-1 replaced once", names)
	}
	if w := step.Warnings(); len(w) != 1 || !strings.Contains(w[0], "disp-1 exited after a database fault") {
		t.Fatalf("warnings %q", w)
	}
}

// TestManifestListsTheProcesses: a window's manifest lists every worker
// that wrote records in it (the template's preload, the dispatchers, the
// drain dispatchers, a replacement after a database fault), how each
// ended and its last counters, and the validator checks the record
// files against them (issue 24).
func TestManifestListsTheProcesses(t *testing.T) {
	t.Parallel()
	type want struct {
		role, end    string
		drain, tmpl  bool
		replaces     string
		handledAbove int64 // Counters.Handled must exceed it
	}
	for _, tc := range []struct {
		name      string
		cell      func() *scenarios.Cell
		misbehave map[string]string
		procs     map[string]want
	}{
		{name: "a kill cell on a template's preload", cell: func() *scenarios.Cell {
			c := dispatchTestCell(1000, 2)
			c.Scenario, c.KillDispatcherAt, c.AllowRedelivery = scenarios.Faults, 0.3, true
			return c
		}, procs: map[string]want{
			"preload": {role: protocol.RolePreload, end: validate.EndDone, tmpl: true, handledAbove: -1},
			"disp-0":  {role: protocol.RoleDispatcher, end: validate.EndKilled},
			"disp-1":  {role: protocol.RoleDispatcher, end: validate.EndDone},
			"drain-0": {role: protocol.RoleDispatcher, end: validate.EndDone, drain: true, handledAbove: -1},
			"drain-1": {role: protocol.RoleDispatcher, end: validate.EndDone, drain: true, handledAbove: -1},
		}},
		{name: "a crash cell whose dispatcher fails and is replaced", cell: crashTestCell, misbehave: map[string]string{"disp-1": "crash-exit"},
			procs: map[string]want{
				"preload":    {role: protocol.RolePreload, end: validate.EndDone, tmpl: true, handledAbove: -1},
				"disp-0":     {role: protocol.RoleDispatcher, end: validate.EndDone},
				"disp-1":     {role: protocol.RoleDispatcher, end: validate.EndFailed, handledAbove: -1},
				"disp-1-re1": {role: protocol.RoleDispatcher, end: validate.EndDone, replaces: "disp-1", handledAbove: -1},
				"drain-0":    {role: protocol.RoleDispatcher, end: validate.EndDone, drain: true, handledAbove: -1},
				"drain-1":    {role: protocol.RoleDispatcher, end: validate.EndDone, drain: true, handledAbove: -1},
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fc := newFakeCluster()
			fc.handleEvery = time.Millisecond
			fc.misbehave = tc.misbehave
			step := &Step{Server: fc, Launch: fc.launch, Warmup: 20 * time.Millisecond, Window: 300 * time.Millisecond,
				DrainTimeout: 10 * time.Second, StopTimeout: time.Second}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			defer step.Close(ctx)
			root := t.TempDir()
			w := Window{Round: 1, Side: result.SideBase, Order: 1, Name: "rb_t_c01_r1_b", Dir: "cell01/r1-base", Template: "rb_t_c01_tp_b"}
			dir := filepath.Join(root, w.Dir)
			c := tc.cell()
			s := step.Measure(ctx, step.Prepare(ctx, w, c, &Side{Name: result.SideBase}, dir), nil)
			if !s.IsValid() {
				t.Fatalf("sample INVALID: %q %v", s.Error, s.Validation)
			}
			if s.Validation.ProcessesUnchecked || slices.ContainsFunc(s.Validation.Notes, func(n string) bool { return strings.Contains(n, "processes") }) {
				t.Fatalf("records not checked against the processes: %q", s.Validation.Notes)
			}
			m, files, found, err := validate.ReadDir(dir)
			if err != nil || !found {
				t.Fatalf("ReadDir: %v (manifest found %v)", err, found)
			}
			if len(m.Processes) != len(tc.procs) || len(files) != len(tc.procs) {
				t.Fatalf("%d processes, %d record files, want %d: %+v", len(m.Processes), len(files), len(tc.procs), m.Processes)
			}
			for _, p := range m.Processes {
				want, ok := tc.procs[p.Name]
				switch {
				case !ok:
					t.Errorf("unexpected process %+v", p)
				case p.Role != want.role || p.End != want.end || p.Drain != want.drain || p.Template != want.tmpl || p.Replaces != want.replaces ||
					p.Record != p.Name+validate.RecordFileExt:
					t.Errorf("process %+v, want %+v", p, want)
				case p.Counters == nil || p.Counters.Handled <= want.handledAbove:
					t.Errorf("process %s: counters %+v, want handled > %d", p.Name, p.Counters, want.handledAbove)
				case p.End == validate.EndFailed && p.Error == "":
					t.Errorf("process %s failed without an error", p.Name)
				}
			}
			if p := m.Processes[0]; p.Name != "preload" || p.Counters.Published != int64(c.Preload) {
				t.Errorf("first process %+v, want the preload with its %d commits", p, c.Preload)
			}
			// A record line lost from a process that exited cleanly makes
			// the kept folder INVALID, named.
			rec := filepath.Join(dir, "drain-0"+validate.RecordFileExt)
			data, err := os.ReadFile(rec)
			if err != nil {
				t.Fatal(err)
			}
			lines := strings.SplitAfter(string(data), "\n")
			if len(lines) < 2 {
				t.Skipf("drain-0 recorded %d lines; nothing to lose", len(lines)-1)
			}
			if err := os.WriteFile(rec, []byte(strings.Join(lines[1:], "")), 0o644); err != nil {
				t.Fatal(err)
			}
			m, files, _, err = validate.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			if r := validate.Validate(m.Input(files)); r.Valid || r.CounterMismatches != 1 || !strings.Contains(strings.Join(r.Examples, "\n"), "counters: drain-0 ended with its done line") {
				t.Fatalf("a lost line of drain-0: %s %q", r, r.Examples)
			}
		})
	}
}

// TestSideSettings: where a cell says how each side runs it
// (scenarios.Cell.Sides), each side's window dispatchers get its own
// settings, the run's cell records what each side ran, and the head the
// caller gave is kept.
func TestSideSettings(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster()
	// Paced so that no window can handle its whole preload: a preload that
	// runs out runs the cell again (more windows than the two asked for),
	// which on a fast machine made this test count three of each.
	fc.handleEvery = 2 * time.Millisecond
	c := dispatchTestCell(400, 1)
	c.Sides = map[string]scenarios.SideRun{
		result.SideBase:      {Dispatcher: protocol.Dispatcher{Concurrency: 3, Batch: 3}, Settings: "base's own"},
		result.SideCandidate: {Dispatcher: protocol.Dispatcher{Concurrency: 5, Batch: 5}, Settings: "candidate's own"},
	}
	step := &Step{Server: fc, Launch: fc.launch, Window: 200 * time.Millisecond, DrainTimeout: 10 * time.Second}
	m := scenarios.Matrix{Mode: result.ModeCustom, Rounds: 2, Window: scenarios.MinWindow, Cells: []scenarios.Cell{*c}}
	r, err := New(m, &Side{Name: result.SideBase, Bin: "b"}, &Side{Name: result.SideCandidate, Bin: "c"}, step, t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	run, err := r.Run(context.Background(), result.Run{Notes: []string{"a note"}, Warnings: []string{"the caller's"}, Machine: map[string]string{"cpus": "2"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(run.Notes) != 1 || run.Warnings[0] != "the caller's" || run.Machine["cpus"] != "2" || run.Schema != result.SchemaVersion || run.Mode != result.ModeCustom {
		t.Errorf("the head was not kept: %+v", run)
	}
	if s := run.Cells[0].Settings; s[result.SideBase] != "base's own" || s[result.SideCandidate] != "candidate's own" {
		t.Errorf("settings %q", s)
	}
	fc.mu.Lock()
	defer fc.mu.Unlock()
	byConc := map[int]int{}
	for _, cfg := range fc.configs {
		if cfg.Role == protocol.RoleDispatcher && strings.HasPrefix(cfg.Name, "disp-") {
			byConc[cfg.Dispatcher.Concurrency]++
			if cfg.Dispatcher.Batch != cfg.Dispatcher.Concurrency {
				t.Errorf("%s: %+v, want one side's settings whole", cfg.Name, cfg.Dispatcher)
			}
		}
	}
	if len(byConc) != 2 || byConc[3] != 2 || byConc[5] != 2 {
		t.Errorf("window dispatchers by concurrency %v, want 2 windows of each side's", byConc)
	}
}
