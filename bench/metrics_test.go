package bench

import (
	"math"
	"strings"
	"testing"

	"github.com/berkcansavur/relaybus/bench/report"
)

func TestPGWindowMetrics(t *testing.T) {
	before := &PGSnapshot{HasWALStats: true, WALRecords: 100, WALFPI: 10, Statements: 50, Tables: map[string]PGTableStats{
		tableDeliveries: {Inserted: 1000, Updated: 200, HotUpdated: 0, Deleted: 0},
		tableLanes:      {Inserted: 256, Updated: 10, HotUpdated: 10},
	}}
	after := &PGSnapshot{HasWALStats: true, WALRecords: 1100, WALFPI: 60, Statements: 150, Tables: map[string]PGTableStats{
		tableDeliveries: {Inserted: 1000, Updated: 200, HotUpdated: 0, Deleted: 500, Dead: 480},
		tableLanes:      {Inserted: 256, Updated: 110, HotUpdated: 100},
	}}
	m := map[string]float64{}
	pgWindowMetrics(m, before, after, 250_000, 500, false)
	want := map[string]float64{
		report.MetricWALBytesPerDelivery:   500,
		report.MetricWALRecordsPerDelivery: 2,
		report.MetricWALFPIPerDelivery:     0.1,
		report.MetricUpdatesPerDelivery:    0,
		report.MetricDeletesPerDelivery:    1,
		report.MetricHOTPctLanes:           90,
		report.MetricDeadTuplesAfter:       480,
		report.MetricStmtsPerDelivery:      0.2,
	}
	for k, v := range want {
		if got, ok := m[k]; !ok || math.Abs(got-v) > 1e-9 {
			t.Errorf("%s = %v (present %v), want %v", k, got, ok, v)
		}
	}
	// No updates of deliveries in the window: HOT % is undefined, absent.
	if v, ok := m[report.MetricHOTPctDeliveries]; ok {
		t.Errorf("HOT %% of deliveries without updates = %v, want absent", v)
	}
	m = map[string]float64{}
	pgWindowMetrics(m, before, after, 250_000, 0, false)
	if len(m) != 0 {
		t.Errorf("no deliveries: metrics %v, want none", m)
	}
	m = map[string]float64{}
	pgWindowMetrics(m, before, after, 1000, 10, true)
	if len(m) != 1 || m[report.MetricWALBytesPerEvent] != 100 {
		t.Errorf("per event: %v", m)
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

func TestQuantile(t *testing.T) {
	xs := []float64{1, 2, 3, 4, 5}
	for q, want := range map[float64]float64{0: 1, 0.5: 3, 1: 5, 0.25: 2, 0.9: 4.6} {
		if got := quantile(xs, q); math.Abs(got-want) > 1e-9 {
			t.Errorf("quantile(%v) = %v, want %v", q, got, want)
		}
	}
	if quantile([]float64{7}, 0.99) != 7 {
		t.Error("one value")
	}
}

func TestMongoWindowMetrics(t *testing.T) {
	before := &MongoSnapshot{JournalBytes: 1000, Ops: 10, Updates: 5}
	after := &MongoSnapshot{JournalBytes: 11000, Ops: 110, Updates: 25}
	m := map[string]float64{}
	MongoWindowMetrics(m, before, after, 30, 20000, 100, false)
	want := map[string]float64{
		report.MetricOplogBytesPerDelivery: 200, report.MetricOplogEntriesPerDelivery: 0.3,
		report.MetricJournalBytesPerDelivery: 100, report.MetricOpsPerDelivery: 1, report.MetricMongoUpdatesPerDelivery: 0.2,
	}
	for k, v := range want {
		if math.Abs(m[k]-v) > 1e-9 {
			t.Errorf("%s = %v, want %v", k, m[k], v)
		}
	}
	if toInt64(int32(3)) != 3 || toInt64(int64(4)) != 4 || toInt64(5.0) != 5 || toInt64("x") != 0 {
		t.Error("toInt64")
	}
}
