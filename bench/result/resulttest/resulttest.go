// Package resulttest holds a fixed run for the tests of the packages
// that analyse and render runs.
package resulttest

import (
	"time"

	"github.com/berkcansavur/relaybus/bench/result"
	"github.com/berkcansavur/relaybus/bench/validate"
)

// ValidResult is a VALID validation of 1000 deliveries.
var ValidResult = &validate.Result{Valid: true, Published: 1000, Expected: 1000, HandledOK: 1000}

// Run is a small run with every case the renderer handles: a clear
// improvement, a clear regression, no difference, too few samples, an
// invalid sample, ignored options, series and latencies.
func Run() *result.Run {
	start := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	run := &result.Run{
		Schema: result.SchemaVersion, Mode: result.ModeQuick,
		Base:      result.RefInfo{Ref: "v0.1.0", SHA: "e222e0a0000000000000000000000000000000aa", Version: "0.1.0", Protocol: 1},
		Candidate: result.RefInfo{Ref: "HEAD", SHA: "f00dfeed00000000000000000000000000000bb", Version: "0.2.0", Protocol: 1, Capabilities: []string{"completion_history"}},
		Started:   start, Finished: start.Add(time.Hour),
		Machine:   map[string]string{"goos": "linux", "goarch": "amd64", "cpus": "2"},
		Databases: []result.DatabaseInfo{{Kind: "postgres", Provider: "local", Version: "17.2", Settings: map[string]string{"fsync": "on"}}},
	}
	dispatch := &result.Cell{Scenario: "dispatch", Store: "postgres", Name: "1 inst, defaults (conc 10, batch 10, pool 10, poll 1s)"}
	base := []float64{2100, 2150, 2200, 2170, 2130}
	cand := []float64{3400, 3450, 3390, 3500, 3420}
	walB := []float64{2377, 2380, 2370, 2390, 2375}
	walC := []float64{625, 630, 620, 640, 610}
	order := 0
	for round := range 5 {
		for _, side := range []string{result.SideBase, result.SideCandidate} {
			s := &result.Sample{Side: side, Round: round, Order: order, Validation: ValidResult,
				Series: []float64{1000, 2000, 2100}}
			order++
			if side == result.SideBase {
				s.Metrics = map[string]float64{result.MetricDeliveriesPerS: base[round], result.MetricWALBytesPerDelivery: walB[round], result.MetricStmtsPerDelivery: 1.21}
				s.Ignored = []string{"completion_window_us"}
			} else {
				s.Metrics = map[string]float64{result.MetricDeliveriesPerS: cand[round], result.MetricWALBytesPerDelivery: walC[round], result.MetricStmtsPerDelivery: 1.21}
			}
			dispatch.Samples = append(dispatch.Samples, s)
		}
	}
	// One invalid candidate window: must be listed, not averaged in.
	dispatch.Samples = append(dispatch.Samples, &result.Sample{Side: result.SideCandidate, Round: 5, Order: order,
		Metrics:    map[string]float64{result.MetricDeliveriesPerS: 1},
		Validation: &validate.Result{Lost: 3, Published: 1000, Expected: 1000, HandledOK: 997, Examples: []string{"lost"}}})
	publish := &result.Cell{Scenario: "publish", Store: "postgres", Name: "P=1 batch=1 pool=default"}
	pb := []float64{1350, 1340, 1360, 1355}
	pc := []float64{479, 470, 485, 490}
	for round := range 4 {
		publish.Samples = append(publish.Samples,
			&result.Sample{Side: result.SideBase, Round: round, Validation: ValidResult, Metrics: map[string]float64{result.MetricEventsPerS: pb[round], result.MetricPublishP99Ms: 0.9}},
			&result.Sample{Side: result.SideCandidate, Round: round, Validation: ValidResult, Metrics: map[string]float64{result.MetricEventsPerS: pc[round], result.MetricPublishP99Ms: 4.9}})
	}
	mixed := &result.Cell{Scenario: "mixed", Store: "postgres", Name: "1000/s, defaults dispatchers"}
	for round := range 2 {
		mixed.Samples = append(mixed.Samples,
			&result.Sample{Side: result.SideBase, Round: round, Validation: ValidResult, Metrics: map[string]float64{result.MetricAchievedPerS: 1000, result.MetricE2EP50Ms: 503.6}, Latencies: []float64{1, 2, 3}},
			&result.Sample{Side: result.SideCandidate, Round: round, Validation: ValidResult, Metrics: map[string]float64{result.MetricAchievedPerS: 1000, result.MetricE2EP50Ms: 2262.5}, Latencies: []float64{2, 4, 9}})
	}
	run.Cells = []*result.Cell{dispatch, publish, mixed}
	return run
}
