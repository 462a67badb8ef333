package result

import "sort"

// MetricInfo describes one metric the runner measures.
type MetricInfo struct {
	Name string // key in Sample.Metrics
	// Unit is the unit in bench.txt (benchfmt): no spaces, unique per
	// metric so benchstat never merges two metrics.
	Unit string
	// Title is the column title in tables.
	Title          string
	HigherIsBetter bool
	// Additive: the metric can be 0 (a count of rare things, a share),
	// so a ratio of medians means nothing near 0 and its interval can
	// cross below 0. Comparisons report the difference instead.
	Additive bool
}

// Metric names (keys of Sample.Metrics).
const (
	MetricDeliveriesPerS          = "deliveries_per_s"
	MetricEventsPerS              = "events_per_s"
	MetricWALBytesPerDelivery     = "wal_bytes_per_delivery"
	MetricWALBytesPerEvent        = "wal_bytes_per_event"
	MetricWALRecordsPerDelivery   = "wal_records_per_delivery"
	MetricWALFPIPerDelivery       = "wal_fpi_per_delivery"
	MetricHOTPctDeliveries        = "hot_pct_deliveries"
	MetricHOTPctLanes             = "hot_pct_lanes"
	MetricUpdatesPerDelivery      = "updates_per_delivery"
	MetricInsertsPerDelivery      = "inserts_per_delivery"
	MetricDeletesPerDelivery      = "deletes_per_delivery"
	MetricDeadTuplesAfter         = "dead_tuples_after"
	MetricDeadTuplesPerDelivery   = "dead_tuples_per_delivery"
	MetricStmtsPerDelivery        = "stmts_per_delivery"
	MetricPublishP50Ms            = "publish_p50_ms"
	MetricPublishP99Ms            = "publish_p99_ms"
	MetricE2EP50Ms                = "e2e_p50_ms"
	MetricE2EP95Ms                = "e2e_p95_ms"
	MetricE2EP99Ms                = "e2e_p99_ms"
	MetricBacklogMax              = "backlog_max"
	MetricAchievedPerS            = "achieved_per_s"
	MetricRedeliveries            = "redeliveries"
	MetricOplogBytesPerDelivery   = "oplog_bytes_per_delivery"
	MetricOplogBytesPerEvent      = "oplog_bytes_per_event"
	MetricOplogEntriesPerDelivery = "oplog_entries_per_delivery"
	MetricJournalBytesPerDelivery = "journal_bytes_per_delivery"
	MetricOpsPerDelivery          = "ops_per_delivery"
	MetricMongoUpdatesPerDelivery = "mongo_updates_per_delivery"
)

// Metrics is the registry, in table column order.
var Metrics = []MetricInfo{
	{MetricDeliveriesPerS, "deliveries/s", "deliveries/s", true, false},
	{MetricEventsPerS, "events/s", "events/s", true, false},
	{MetricAchievedPerS, "achieved/s", "achieved/s", true, false},
	{MetricWALBytesPerDelivery, "wal-B/delivery", "WAL B/delivery", false, false},
	{MetricWALBytesPerEvent, "wal-B/event", "WAL B/event", false, false},
	{MetricWALRecordsPerDelivery, "wal-records/delivery", "WAL records/delivery", false, false},
	{MetricWALFPIPerDelivery, "wal-fpi/delivery", "WAL FPI/delivery", false, true},
	{MetricHOTPctDeliveries, "hot-pct-deliveries", "HOT upd % deliveries", true, true},
	{MetricHOTPctLanes, "hot-pct-lanes", "HOT upd % lanes", true, true},
	{MetricInsertsPerDelivery, "inserts/delivery", "inserts/delivery", false, true},
	{MetricUpdatesPerDelivery, "updates/delivery", "updates/delivery", false, true},
	{MetricDeletesPerDelivery, "deletes/delivery", "deletes/delivery", false, true},
	{MetricDeadTuplesPerDelivery, "dead-tuples/delivery", "dead tuples/delivery", false, true},
	{MetricDeadTuplesAfter, "dead-tuples-after", "dead tuples after", false, true},
	{MetricStmtsPerDelivery, "stmts/delivery", "stmts/delivery", false, false},
	{MetricPublishP50Ms, "publish-p50-ms", "publish p50 ms", false, false},
	{MetricPublishP99Ms, "publish-p99-ms", "publish p99 ms", false, false},
	{MetricE2EP50Ms, "e2e-p50-ms", "e2e p50 ms", false, false},
	{MetricE2EP95Ms, "e2e-p95-ms", "e2e p95 ms", false, false},
	{MetricE2EP99Ms, "e2e-p99-ms", "e2e p99 ms", false, false},
	{MetricBacklogMax, "backlog-max", "backlog max", false, true},
	{MetricRedeliveries, "redeliveries", "redeliveries", false, true},
	{MetricOplogBytesPerDelivery, "oplog-B/delivery", "oplog B/delivery", false, false},
	{MetricOplogBytesPerEvent, "oplog-B/event", "oplog B/event", false, false},
	{MetricOplogEntriesPerDelivery, "oplog-entries/delivery", "oplog entries/delivery", false, false},
	{MetricJournalBytesPerDelivery, "journal-B/delivery", "journal B/delivery", false, false},
	{MetricOpsPerDelivery, "ops/delivery", "ops/delivery", false, false},
	{MetricMongoUpdatesPerDelivery, "mongo-updates/delivery", "updates/delivery (mongo)", false, true},
	// The bloat cells' (bloat.go).
	{MetricTableBytesGrowth, "table-B-growth", "table+index B growth", false, true},
	{MetricDeadTuplesMax, "dead-tuples-max", "dead tuples max", false, true},
	{MetricDeliveriesLastFirst, "deliveries-last/first", "deliveries/s last/first minute", true, false},
	{MetricE2EP99LastFirst, "e2e-p99-last/first", "e2e p99 last/first minute", false, false},
}

// MetricByName finds a metric in the registry.
func MetricByName(name string) (MetricInfo, bool) {
	for _, m := range Metrics {
		if m.Name == name {
			return m, true
		}
	}
	return MetricInfo{}, false
}

// MetricList lists the metrics any sample of c has, registry order
// first, then unknown names sorted (with their name as unit and title).
func (c *Cell) MetricList() []MetricInfo {
	have := map[string]bool{}
	for _, s := range c.Samples {
		for name := range s.Metrics {
			have[name] = true
		}
	}
	var out []MetricInfo
	for _, m := range Metrics {
		if have[m.Name] {
			out = append(out, m)
			delete(have, m.Name)
		}
	}
	rest := make([]string, 0, len(have))
	for name := range have {
		rest = append(rest, name)
	}
	sort.Strings(rest)
	for _, name := range rest {
		out = append(out, MetricInfo{Name: name, Unit: name, Title: name})
	}
	return out
}
