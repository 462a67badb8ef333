package report

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/berkcansavur/relaybus/bench/compare"
	"github.com/berkcansavur/relaybus/bench/result"
	"github.com/berkcansavur/relaybus/bench/validate"
)

// riverRun is a run of River (base) against a relaybus ref: a mixed
// cell whose River windows went without the key order check, with the
// per-table metrics of river_job against relaybus_deliveries and lanes.
func riverRun() *result.Run {
	start := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	run := &result.Run{
		Schema: result.SchemaVersion, Mode: result.ModeCustom,
		Base: result.RefInfo{Ref: "river", SHA: "c0ffee0000000000000000000000000000000011", Version: "river v0.51.2", Protocol: 1,
			Capabilities: []string{"peer", "peer:river", "no-key-order", "store:postgres"}},
		Candidate: result.RefInfo{Ref: "HEAD", SHA: "c0ffee0000000000000000000000000000000011", Version: "0.2.0-dev", Protocol: 1},
		Started:   start, Finished: start.Add(10 * time.Minute),
		Notes: []string{"skipped for base (river): keyed / 1 inst, 4 hot keys: no key order"},
	}
	cell := &result.Cell{Scenario: "mixed", Store: "postgres", Name: "500/s, tuned dispatchers", Settings: map[string]string{
		result.SideBase:      "River with MaxWorkers 200 (concurrency), FetchPollInterval 50 ms (poll_ms), FetchCooldown 2 ms (fetch_cooldown_ms, as its own benchmark runs it)",
		result.SideCandidate: "relaybus with concurrency 200, batch 200, poll 50 ms (the cell's settings, as relaybus.Config takes them)"}}
	riverOK := &validate.Result{Valid: true, Published: 2000, Expected: 2000, HandledOK: 2000, KeyOrderSkipped: 2000,
		Notes: []string{"per-key order not checked for 2000 keyed handles: the side keeps no per-key order (no-key-order)"}}
	for round := range 4 {
		for i, side := range []string{result.SideBase, result.SideCandidate} {
			s := &result.Sample{Side: side, Round: round + 1, Order: 2*round + i + 1, Validation: riverOK,
				Metrics: map[string]float64{result.MetricAchievedPerS: 500, result.MetricHOTPctDeliveries: 60 + float64(round),
					result.MetricUpdatesPerDelivery: 2, result.MetricWALBytesPerDelivery: 1500 + float64(round)},
				Tables: map[string]string{result.TableRoleDeliveries: "river_job"}}
			if side == result.SideCandidate {
				s.Validation = &validate.Result{Valid: true, Published: 2000, Expected: 2000, HandledOK: 2000}
				s.Metrics[result.MetricHOTPctDeliveries] = 90 + float64(round)
				s.Metrics[result.MetricHOTPctLanes] = 99
				s.Tables = map[string]string{result.TableRoleDeliveries: "relaybus_deliveries", result.TableRoleLanes: "relaybus_lanes"}
			}
			cell.Samples = append(cell.Samples, s)
		}
	}
	run.Cells = []*result.Cell{cell}
	return run
}

func TestRiverReport(t *testing.T) {
	a := compare.Analyze(riverRun(), compare.DefaultSettings())
	for _, tc := range []struct {
		name  string
		write func(*bytes.Buffer, *compare.Analysis) error
	}{
		{"river-terminal", func(b *bytes.Buffer, a *compare.Analysis) error { return WriteTerminal(b, a) }},
		{"river-markdown", func(b *bytes.Buffer, a *compare.Analysis) error { return WriteMarkdown(b, a) }},
	} {
		var b bytes.Buffer
		if err := tc.write(&b, a); err != nil {
			t.Fatal(err)
		}
		out := strings.Join(strings.Fields(b.String()), " ") // the terminal wraps notes
		for _, want := range []string{
			"VALID 8/8 (no key order: base)",
			"tables: HOT upd % deliveries, updates/delivery come from river_job on the base side and relaybus_deliveries on the candidate side",
			"tables: HOT upd % lanes come from no table on the base side and relaybus_lanes on the candidate side",
			"skipped for base (river)",
			"river v0.51.2",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("%s lacks %q", tc.name, want)
			}
		}
		golden(t, tc.name, b.Bytes())
	}
	// A relaybus-only cell says nothing of key order or tables.
	c := &result.Cell{Samples: []*result.Sample{{Side: result.SideBase, Validation: &validate.Result{Valid: true},
		Tables: map[string]string{result.TableRoleDeliveries: "relaybus_deliveries"}}}}
	if v := validity(c); v != "VALID 1/1" {
		t.Errorf("validity %q", v)
	}
}
