package result

// Table roles. A per-table metric is read from the table of one role in
// each side's window database; which table that was (relaybus_deliveries,
// relaybus_lanes, river_job) is in Sample.Tables, so that a comparison
// of a relaybus ref with a peer says which tables it compared.
const (
	TableRoleDeliveries = "deliveries" // one row per delivery (or job)
	TableRoleLanes      = "lanes"      // relaybus 0.2's lane rows
)

// MetricTableRole maps each per-table metric to the role of the table it
// is read from. The other metrics (WAL, statements, rates, latencies) are
// the database's or the records' and need no label.
var MetricTableRole = map[string]string{
	MetricHOTPctDeliveries:      TableRoleDeliveries,
	MetricInsertsPerDelivery:    TableRoleDeliveries,
	MetricUpdatesPerDelivery:    TableRoleDeliveries,
	MetricDeletesPerDelivery:    TableRoleDeliveries,
	MetricDeadTuplesPerDelivery: TableRoleDeliveries,
	MetricDeadTuplesAfter:       TableRoleDeliveries,
	MetricHOTPctLanes:           TableRoleLanes,
}
