package report

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/berkcansavur/relaybus/bench/compare"
	"github.com/berkcansavur/relaybus/bench/pgmetrics"
	"github.com/berkcansavur/relaybus/bench/result"
	"github.com/berkcansavur/relaybus/bench/result/resulttest"
)

// crashRun is a faults table as a run recorded before the runner left
// the reset counters out: a SIGKILL cell and a cell that crashes the
// server, whose windows carry the nonsense differences crash recovery
// made of pg_stat_wal and pg_stat_user_tables. It goes through run.json,
// as `bench report` reads it.
func crashRun(t *testing.T) *compare.Analysis {
	t.Helper()
	kill := &result.Cell{Scenario: "faults", Store: "postgres", Name: "SIGKILL 1 of 2 dispatchers, poison 1/50, lease 2s",
		Config: map[string]any{"kill_dispatcher_at": 0.3}}
	crash := &result.Cell{Scenario: "faults", Store: "postgres", Name: "database crash x3, poison 1/50, lease 2s",
		Config: map[string]any{"crash_db_at": []float64{0.1, 0.4, 0.7}}}
	for round := range 4 {
		for _, side := range []string{result.SideBase, result.SideCandidate} {
			f := float64(round + 1)
			kill.Samples = append(kill.Samples, &result.Sample{Side: side, Round: round, Validation: resulttest.ValidResult,
				Metrics: map[string]float64{result.MetricDeliveriesPerS: 1200 + f, result.MetricWALBytesPerDelivery: 1300 + f,
					result.MetricWALRecordsPerDelivery: 13 + f/10, result.MetricDeletesPerDelivery: 1.27, result.MetricStmtsPerDelivery: 1.13}})
			crash.Samples = append(crash.Samples, &result.Sample{Side: side, Round: round, Validation: resulttest.ValidResult,
				Metrics: map[string]float64{result.MetricDeliveriesPerS: 500 + f, result.MetricWALBytesPerDelivery: 3073 + f,
					result.MetricWALRecordsPerDelivery: -441 - f, result.MetricWALFPIPerDelivery: -5, result.MetricInsertsPerDelivery: -0.22,
					result.MetricDeletesPerDelivery: -0.16, result.MetricDeadTuplesAfter: 0, result.MetricStmtsPerDelivery: 1.11 + f/100}})
		}
	}
	run := resulttest.Run()
	run.Cells = []*result.Cell{kill, crash}
	b, err := json.Marshal(run)
	if err != nil {
		t.Fatal(err)
	}
	var back result.Run
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	return compare.Analyze(&back, compare.DefaultSettings())
}

// A cell that crashes the server reports none of the counters crash
// recovery resets, in any output, and says why; its throughput, WAL
// bytes and statements stay, and so do the SIGKILL cell's counters.
func TestCrashCellCounters(t *testing.T) {
	a := crashRun(t)
	gs := groups(a)
	if len(gs) != 1 {
		t.Fatalf("groups %d, want 1", len(gs))
	}
	g := gs[0]
	kill, crash := g.cells[0], g.cells[1]
	if !crashesServer(crash) || crashesServer(kill) {
		t.Fatalf("crashesServer: kill %v, crash %v", crashesServer(kill), crashesServer(crash))
	}
	for _, name := range pgmetrics.ResetByCrash {
		if c := g.byCell[crash][name]; c != nil {
			t.Errorf("crash cell reports %s: %s", name, compare.FormatComparison(c))
		}
	}
	for _, name := range []string{result.MetricDeliveriesPerS, result.MetricWALBytesPerDelivery, result.MetricStmtsPerDelivery} {
		if g.byCell[crash][name] == nil {
			t.Errorf("crash cell lost %s", name)
		}
	}
	for _, name := range []string{result.MetricWALRecordsPerDelivery, result.MetricDeletesPerDelivery} {
		if g.byCell[kill][name] == nil {
			t.Errorf("SIGKILL cell lost %s", name)
		}
	}

	var term, md, bench bytes.Buffer
	if err := WriteTerminal(&term, a); err != nil {
		t.Fatal(err)
	}
	if err := WriteMarkdown(&md, a); err != nil {
		t.Fatal(err)
	}
	if err := WriteBench(&bench, a); err != nil {
		t.Fatal(err)
	}
	for _, out := range []string{term.String(), md.String(), bench.String()} {
		for _, n := range []string{"-441", "-442", "-5.00", "-0.22", "-0.16"} {
			if strings.Contains(out, n) {
				t.Errorf("a reset counter's difference %s is in the output:\n%s", n, out)
			}
		}
	}
	for _, out := range []string{term.String(), md.String()} {
		if !strings.Contains(strings.Join(strings.Fields(out), " "), "crash recovery resets PostgreSQL's cumulative statistics") {
			t.Errorf("no note on why the crash cell's counters are not measured:\n%s", out)
		}
	}
	for _, r := range forestRows(a) {
		if notMeasured(r.cmp.Cell, r.cmp.Metric.Name) {
			t.Errorf("summary plot row %q", r.label)
		}
	}
	// The terminal says so in the crash cell's rows.
	for _, row := range g.termRows() {
		if row[1] == "WAL records/delivery" && row[5] == "not measured in this cell" {
			return
		}
	}
	t.Error("no \"not measured in this cell\" row for the crash cell's WAL records")
}
