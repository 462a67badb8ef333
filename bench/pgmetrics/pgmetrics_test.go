package pgmetrics

import (
	"math"
	"strings"
	"testing"

	"github.com/berkcansavur/relaybus/bench/peer"
	"github.com/berkcansavur/relaybus/bench/result"
)

func TestPGWindowMetrics(t *testing.T) {
	before := &Snapshot{WALPos: 1 << 32, HasWALStats: true, WALRecords: 100, WALFPI: 10, Statements: 50, Tables: map[string]TableStats{
		peer.Relaybus.Tables.Deliveries: {Inserted: 1000, Updated: 200, HotUpdated: 0, Deleted: 0},
		peer.Relaybus.Tables.Lanes:      {Inserted: 256, Updated: 10, HotUpdated: 10},
	}}
	after := &Snapshot{WALPos: 1<<32 + 250_000, HasWALStats: true, WALRecords: 1100, WALFPI: 60, Statements: 150, Tables: map[string]TableStats{
		peer.Relaybus.Tables.Deliveries: {Inserted: 1000, Updated: 200, HotUpdated: 0, Deleted: 500, Dead: 480},
		peer.Relaybus.Tables.Lanes:      {Inserted: 256, Updated: 110, HotUpdated: 100},
	}}
	m := map[string]float64{}
	WindowMetrics(m, before, after, 500, false, peer.Relaybus.Tables)
	want := map[string]float64{
		result.MetricWALBytesPerDelivery:   500,
		result.MetricWALRecordsPerDelivery: 2,
		result.MetricWALFPIPerDelivery:     0.1,
		result.MetricInsertsPerDelivery:    0,
		result.MetricUpdatesPerDelivery:    0,
		result.MetricDeletesPerDelivery:    1,
		result.MetricHOTPctLanes:           90,
		result.MetricDeadTuplesAfter:       480,
		result.MetricDeadTuplesPerDelivery: 0.96,
		result.MetricStmtsPerDelivery:      0.2,
	}
	for k, v := range want {
		if got, ok := m[k]; !ok || math.Abs(got-v) > 1e-9 {
			t.Errorf("%s = %v (present %v), want %v", k, got, ok, v)
		}
	}
	// No updates of deliveries in the window: HOT % is undefined, absent.
	if v, ok := m[result.MetricHOTPctDeliveries]; ok {
		t.Errorf("HOT %% of deliveries without updates = %v, want absent", v)
	}
	m = map[string]float64{}
	WindowMetrics(m, before, after, 0, false, peer.Relaybus.Tables)
	if len(m) != 0 {
		t.Errorf("no deliveries: metrics %v, want none", m)
	}
	m = map[string]float64{}
	WindowMetrics(m, before, after, 2500, true, peer.Relaybus.Tables)
	if len(m) != 1 || m[result.MetricWALBytesPerEvent] != 100 {
		t.Errorf("per event: %v", m)
	}
}

// TestRiverWindowMetrics: a River window database has river_job and
// River's other tables; the per-table metrics of a River side (its hello
// chose peer.River) come from river_job, and the labels say so.
func TestRiverWindowMetrics(t *testing.T) {
	before := &Snapshot{WALPos: 1000, Statements: -1, Tables: map[string]TableStats{
		"river_job":    {Inserted: 2000, Updated: 0},
		"river_leader": {Inserted: 1, Updated: 3, HotUpdated: 3},
	}}
	after := &Snapshot{WALPos: 1000 + 600_000, Statements: -1, Tables: map[string]TableStats{
		"river_job":    {Inserted: 3000, Updated: 2000, HotUpdated: 1500, Dead: 800},
		"river_leader": {Inserted: 1, Updated: 9, HotUpdated: 9},
	}}
	m := map[string]float64{}
	WindowMetrics(m, before, after, 1000, false, peer.River.Tables)
	want := map[string]float64{
		result.MetricWALBytesPerDelivery:   600,
		result.MetricInsertsPerDelivery:    1,
		result.MetricUpdatesPerDelivery:    2,
		result.MetricDeletesPerDelivery:    0,
		result.MetricHOTPctDeliveries:      75,
		result.MetricDeadTuplesAfter:       800,
		result.MetricDeadTuplesPerDelivery: 0.8,
	}
	for k, v := range want {
		if got, ok := m[k]; !ok || math.Abs(got-v) > 1e-9 {
			t.Errorf("%s = %v (present %v), want %v", k, got, ok, v)
		}
	}
	for _, absent := range []string{result.MetricHOTPctLanes, result.MetricStmtsPerDelivery, result.MetricWALRecordsPerDelivery} {
		if v, ok := m[absent]; ok {
			t.Errorf("%s = %v, want absent", absent, v)
		}
	}
	if got := TableLabels(peer.River.Tables, after); len(got) != 1 || got[result.TableRoleDeliveries] != "river_job" {
		t.Errorf("labels %v", got)
	}
	relaybus := &Snapshot{Tables: map[string]TableStats{"relaybus_deliveries": {}, "relaybus_lanes": {}, "relaybus_events": {}}}
	if got := TableLabels(peer.Relaybus.Tables, relaybus); len(got) != 2 || got[result.TableRoleLanes] != "relaybus_lanes" {
		t.Errorf("relaybus labels %v", got)
	}
	// A 0.1.0 database: deliveries and no lanes.
	v010 := &Snapshot{Tables: map[string]TableStats{"relaybus_deliveries": {}}}
	if got := TableLabels(peer.Relaybus.Tables, v010); len(got) != 1 || got[result.TableRoleDeliveries] != "relaybus_deliveries" {
		t.Errorf("v0.1.0 labels %v", got)
	}
}

func TestCheckFsync(t *testing.T) {
	if err := CheckFsync(map[string]string{"fsync": "on"}, false); err != nil {
		t.Fatal(err)
	}
	if err := CheckFsync(map[string]string{"fsync": "off"}, false); err == nil || !strings.Contains(err.Error(), "--allow-fsync-off") {
		t.Fatalf("fsync off: %v", err)
	}
	if err := CheckFsync(map[string]string{"fsync": "off"}, true); err != nil {
		t.Fatal(err)
	}
	if err := CheckFsync(map[string]string{}, false); err == nil {
		t.Fatal("missing fsync accepted")
	}
}

func TestParseLSN(t *testing.T) {
	for in, want := range map[string]uint64{"0/0": 0, "16/B374D848": 0x16<<32 | 0xB374D848, "FFFFFFFF/FFFFFFFF": 1<<64 - 1} {
		if got, err := ParseLSN(in); err != nil || got != want {
			t.Errorf("ParseLSN(%q) = %d, %v, want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "0", "/1", "1/", "x/1", "1/2/3", "100000000/0", "-1/0"} {
		if _, err := ParseLSN(bad); err == nil || !strings.HasPrefix(err.Error(), "pgmetrics: ") {
			t.Errorf("ParseLSN(%q) = %v, want a pgmetrics: error", bad, err)
		}
	}
}

// A window the server crashed in: crash recovery set pg_stat_wal's
// stats_reset and started every cumulative counter again from zero, so
// none of the metrics read from them is reported; WAL bytes (WAL
// positions) and statements (pg_stat_statements kept its counts) are.
func TestWindowMetricsAcrossCrash(t *testing.T) {
	before := &Snapshot{WALPos: 1 << 32, HasWALStats: true, WALRecords: 50_000, WALFPI: 900, Statements: 50,
		StatsReset: "2026-12-01 20:00:00+00", ServerStart: "2026-12-01 20:00:00+00", StatementsReset: "2026-12-01 20:00:00+00",
		Tables: map[string]TableStats{
			peer.Relaybus.Tables.Deliveries: {Inserted: 9000, Updated: 200, HotUpdated: 20, Deleted: 8000, Dead: 700},
			peer.Relaybus.Tables.Lanes:      {Inserted: 256, Updated: 5000, HotUpdated: 5000},
		}}
	after := &Snapshot{WALPos: 1<<32 + 1_500_000, HasWALStats: true, WALRecords: 3, WALFPI: 1, Statements: 600,
		StatsReset: "2026-12-01 20:00:07+00", ServerStart: "2026-12-01 20:00:06+00", StatementsReset: "2026-12-01 20:00:00+00",
		Tables: map[string]TableStats{
			peer.Relaybus.Tables.Deliveries: {Inserted: 100, Updated: 10, HotUpdated: 1, Deleted: 90},
			peer.Relaybus.Tables.Lanes:      {Inserted: 0, Updated: 40, HotUpdated: 40},
		}}
	if !CountersReset(before, after) || StatementsReset(before, after) {
		t.Fatalf("CountersReset %v, StatementsReset %v; want true, false", CountersReset(before, after), StatementsReset(before, after))
	}
	m := map[string]float64{}
	WindowMetrics(m, before, after, 500, false, peer.Relaybus.Tables)
	for _, k := range ResetByCrash {
		if v, ok := m[k]; ok {
			t.Errorf("%s = %v after a crash, want it not measured", k, v)
		}
	}
	if got := m[result.MetricWALBytesPerDelivery]; got != 3000 {
		t.Errorf("WAL bytes/delivery = %v, want 3000 (from WAL positions)", got)
	}
	if got := m[result.MetricStmtsPerDelivery]; got != 1.1 {
		t.Errorf("stmts/delivery = %v, want 1.1", got)
	}
	if len(m) != 2 {
		t.Errorf("metrics %v, want WAL bytes and statements only", m)
	}

	// pg_stat_statements lost its counts too (its stats_reset moved).
	after.StatementsReset = "2026-12-01 20:00:07+00"
	m = map[string]float64{}
	WindowMetrics(m, before, after, 500, false, peer.Relaybus.Tables)
	if v, ok := m[result.MetricStmtsPerDelivery]; ok {
		t.Errorf("stmts/delivery = %v after pg_stat_statements was reset, want it not measured", v)
	}

	// A clean restart kept the statistics: stats_reset did not move, so
	// everything is measured though the server started again.
	after.StatsReset, after.StatementsReset = before.StatsReset, before.StatementsReset
	after.WALRecords, after.WALFPI, after.Tables = 51_000, 950, before.Tables
	m = map[string]float64{}
	WindowMetrics(m, before, after, 500, false, peer.Relaybus.Tables)
	for _, k := range []string{result.MetricWALRecordsPerDelivery, result.MetricDeletesPerDelivery, result.MetricStmtsPerDelivery, result.MetricDeadTuplesAfter} {
		if _, ok := m[k]; !ok {
			t.Errorf("%s not measured across a clean restart", k)
		}
	}

	// Without pg_stat_wal (before PostgreSQL 14), a new postmaster start
	// time is all there is: taken as a reset.
	before.StatsReset, after.StatsReset = "", ""
	if !CountersReset(before, after) {
		t.Error("a restart without pg_stat_wal's stats_reset not taken as a reset")
	}
}
