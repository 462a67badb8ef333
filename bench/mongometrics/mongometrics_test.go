package mongometrics

import (
	"math"
	"testing"

	"github.com/berkcansavur/relaybus/bench/result"
)

func TestWindowMetrics(t *testing.T) {
	before := &Snapshot{JournalBytes: 1000, Ops: 10, Updates: 5}
	after := &Snapshot{JournalBytes: 11000, Ops: 110, Updates: 25}
	m := map[string]float64{}
	WindowMetrics(m, before, after, 30, 20000, 100, false)
	want := map[string]float64{
		result.MetricOplogBytesPerDelivery: 200, result.MetricOplogEntriesPerDelivery: 0.3,
		result.MetricJournalBytesPerDelivery: 100, result.MetricOpsPerDelivery: 1, result.MetricMongoUpdatesPerDelivery: 0.2,
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
