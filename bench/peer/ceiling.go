package peer

import (
	"fmt"

	"github.com/berkcansavur/relaybus/bench/protocol"
	"github.com/berkcansavur/relaybus/bench/scenarios"
)

// The ceiling peer's defaults (bench/peers/ceiling/options.go), for the
// settings line of its cells.
const (
	ceilingDefaultStreams  = 4
	ceilingDefaultMaxLanes = 16
	ceilingDefaultBatch    = 10
)

// Ceiling is the lane pattern in plain SQL (bench/peers/ceiling): what
// the database does with relaybus 0.2's pattern when a program does
// nothing else. It has no library version and no tuning of its own
// beyond the harness's settings.
var Ceiling = &Descriptor{
	Name:         "ceiling",
	Title:        "the plain-SQL ceiling",
	Imports:      []string{"bench/protocol", "bench/record", "bench/stats", "bench/worker/workerkit", "relaybus"},
	Tables:       Tables{Deliveries: "ceiling_deliveries", Lanes: "ceiling_lanes"},
	TablePattern: `ceiling\_%`,
	Runs:         []int{scenarios.Publish, scenarios.Dispatch, scenarios.Keyed, scenarios.Mixed},
	Why: map[int]string{scenarios.Faults: "the ceiling writes nothing at claim, so a delivery whose handler ran before a kill, restart or crash runs again at the same attempt, " +
		"which the validator rightly calls a duplicate (its hello lists no-faults)"},
	SkipCell: func(c *scenarios.Cell) string {
		if c.Scenario == scenarios.Keyed && c.Workload.Keys == "hot" {
			return "the ceiling takes a hot key's next deliveries in one claim and drains the cell's preload inside the window, so its windows run dry " +
				"(INVALID: idle) even after the preload is doubled twice, while a preload deep enough for it would push relaybus's drain past the drain timeout; " +
				"the hot-key cell compares relaybus with v0.1.0 and River"
		}
		return ""
	},
	About: "%s is the plain-SQL ceiling, built from bench/peers/ceiling: relaybus 0.2's tables and lane pattern in plain pgx, with nothing of the engine " +
		"(no leases, fencing, renewals, completion batcher or dispatcher). Per-table metrics are read from ceiling_deliveries and ceiling_lanes on its side; " +
		"its lanes are only locked, never written. Each cell's settings line says what it ran",
	Settings: func(d protocol.Dispatcher) string {
		streams, ok := optionInt(d, "streams")
		if !ok {
			streams = ceilingDefaultStreams
		}
		lanes, ok := optionInt(d, "max_lanes")
		if !ok {
			lanes = ceilingDefaultMaxLanes
		}
		batch := d.Batch
		if batch == 0 {
			batch = ceilingDefaultBatch
		}
		return fmt.Sprintf("%d claim streams per process, batch %d, at most %d lanes per claim, poll %s "+
			"(batch and poll_ms are the cell's; streams and max_lanes its defaults unless the cell sets them; concurrency only spreads costly handlers over goroutines)",
			streams, batch, lanes, orDefault(d.PollMs, " ms"))
	},
}
