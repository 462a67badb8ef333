package relaytype

import "time"

// StoreHealth is a store's report on its own upkeep (the optional
// driver.HealthReporter capability; relaybus/postgres has it): what
// decides whether the database keeps up with a queue whose rows are
// inserted and deleted at the rate of the work. A store fills what it has
// a counterpart for and leaves the rest zero.
//
// The row counts and update counters are the database's statistics, not
// counts: PostgreSQL's cumulative statistics (pg_stat_all_tables), which
// each server process reports at most once a second, and which a
// statistics reset sets back to zero.
type StoreHealth struct {
	// At is when the store read it, on the database's clock; the ages
	// below are measured on that clock too, against times it recorded.
	At time.Time

	// DeliveriesLiveRows and DeliveriesDeadRows are the deliveries
	// table's live rows and the dead row versions that vacuum has not
	// removed yet (PostgreSQL: n_live_tup, n_dead_tup). A completion
	// deletes a row, so every delivery leaves one dead version behind
	// until vacuum removes it; claims read past them until then.
	DeliveriesLiveRows int64
	DeliveriesDeadRows int64
	// DeliveriesLastAutovacuum is when autovacuum last vacuumed the
	// deliveries table, DeliveriesLastVacuum when a VACUUM did; zero when
	// never since the statistics were reset.
	DeliveriesLastAutovacuum time.Time
	DeliveriesLastVacuum     time.Time

	// LaneUpdates counts the updates of lane rows since the statistics
	// were reset, and LaneHOTUpdates those that were heap-only (HOT):
	// they wrote no index entry. A claim and a hand-back update lane
	// rows; the lanes table is laid out for HOT updates (a page per lane,
	// half of it free), so a share well below 1 means pages that could
	// not be pruned (see LaneHOTShare).
	LaneUpdates    int64
	LaneHOTUpdates int64

	// XminHolder is the session or prepared transaction that holds the
	// database's xmin horizon furthest back: no row version deleted after
	// its snapshot was taken can be removed, by vacuum or by page
	// pruning, until it ends. Nil when nothing holds a snapshot or a
	// transaction ID (the reading's own session aside).
	XminHolder *XminHolder
}

// LaneHOTShare is LaneHOTUpdates / LaneUpdates, and false when there was
// no lane update.
func (h *StoreHealth) LaneHOTShare() (float64, bool) {
	if h.LaneUpdates <= 0 {
		return 0, false
	}
	return float64(h.LaneHOTUpdates) / float64(h.LaneUpdates), true
}

// XminHolder kinds.
const (
	// XminHolderSession: a server process (a client's session, or a
	// walsender) whose snapshot or transaction holds the horizon.
	XminHolderSession = "session"
	// XminHolderPrepared: a prepared transaction (PREPARE TRANSACTION)
	// not yet committed or rolled back; no session holds it.
	XminHolderPrepared = "prepared transaction"
)

// XminHolder describes what holds a PostgreSQL database's xmin horizon
// back (StoreHealth.XminHolder).
type XminHolder struct {
	// Kind is XminHolderSession or XminHolderPrepared.
	Kind string
	// PID is the server process of a session (pg_stat_activity.pid,
	// for pg_terminate_backend); 0 for a prepared transaction.
	PID int
	// Name is a session's application_name, or a prepared
	// transaction's GID (for COMMIT PREPARED or ROLLBACK PREPARED).
	Name string
	// User is the role the session or transaction runs as.
	User string
	// State is a session's state ("active", "idle in transaction", ...)
	// and BackendType its kind ("client backend", "walsender", ...);
	// empty for a prepared transaction.
	State       string
	BackendType string
	// XactStart is when its transaction started (a prepared
	// transaction: when it was prepared); zero when the session has no
	// transaction (a walsender holding the horizon for a standby).
	XactStart time.Time
	// QueryStart is when a session's current or last query started;
	// zero for a prepared transaction.
	QueryStart time.Time
	// Age is StoreHealth.At less XactStart; 0 when XactStart is zero.
	Age time.Duration
	// XminAge is how many transaction IDs the horizon it holds is behind
	// the newest (PostgreSQL's age() of its xmin or transaction ID). At
	// about 2 billion the database must stop and be vacuumed
	// (wraparound); long before that, its dead rows pile up.
	XminAge int64
}
