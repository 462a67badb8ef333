package result

import (
	"github.com/berkcansavur/relaybus/bench/protocol"
	"github.com/berkcansavur/relaybus/bench/validate"
)

// Upgrade is the one run of scenario 6: a live database of the base's
// version upgraded in place by the candidate's setup, then drained by the
// candidate's dispatchers.
type Upgrade struct {
	Config map[string]any
	// Skipped says why it did not run (both sides are the same code:
	// there is nothing to upgrade). A skipped upgrade is neither VALID
	// nor INVALID.
	Skipped string `json:",omitempty"`
	// Error says why it failed to run; such a run is INVALID.
	Error string `json:",omitempty"`
	// Validation is the validator's verdict over both sides' records;
	// Checks are the upgrade's own checks of the store's state, each a
	// line that says what was compared, and Failed those that failed.
	Validation *validate.Result `json:",omitempty"`
	Checks     []string         `json:",omitempty"`
	Failed     []string         `json:",omitempty"`
	// The store's state (role inspect): after the base's workers stopped
	// (by the base), after the upgrade and after the republish (by the
	// candidate), and after the drain.
	BeforeUpgrade, AfterUpgrade, AfterRepublish, Final *protocol.Inspect `json:",omitempty"`
	// Metrics: upgrade_s, upgrade_wal_bytes, upgrade_rows_inserted,
	// _updated, _deleted, in_flight_at_kill, base_handled,
	// candidate_handled, redeliveries, republished,
	// republish_deliveries_added, drain_deliveries_per_s.
	Metrics map[string]float64
	// Tables: what the upgrade did to each relaybus table.
	Tables []UpgradeTable `json:",omitempty"`
	// Ignored lists the options either side's workers ignored, by side.
	Ignored map[string][]string `json:",omitempty"`
	// PhaseSeconds: how long each step took.
	PhaseSeconds map[string]float64 `json:",omitempty"`
}

// UpgradeTable is what the upgrade wrote to one table (pg_stat_user_tables
// differences), and whether it was rewritten whole (a new relfilenode).
type UpgradeTable struct {
	Table                       string
	Inserted, Updated, Deleted  int64
	HotUpdated                  int64
	Rewritten, Created, Dropped bool `json:",omitempty"`
}

// Upgrade metric names.
const (
	UpgradeSeconds             = "upgrade_s"
	UpgradeWALBytes            = "upgrade_wal_bytes"
	UpgradeRowsInserted        = "upgrade_rows_inserted"
	UpgradeRowsUpdated         = "upgrade_rows_updated"
	UpgradeRowsDeleted         = "upgrade_rows_deleted"
	UpgradeInFlightAtKill      = "in_flight_at_kill"
	UpgradeBaseHandled         = "base_handled"
	UpgradeCandidateHandled    = "candidate_handled"
	UpgradeRedeliveries        = "redeliveries"
	UpgradeRepublished         = "republished"
	UpgradeRepublishAdded      = "republish_deliveries_added"
	UpgradeDrainDeliveriesPerS = "drain_deliveries_per_s"
)

// IsValid reports whether the upgrade ran, validated and passed its
// checks (false when it was skipped).
func (u *Upgrade) IsValid() bool {
	return u.Skipped == "" && u.Error == "" && u.Validation != nil && u.Validation.Valid && len(u.Failed) == 0
}

// Verdict is "VALID", "INVALID" or "skipped".
func (u *Upgrade) Verdict() string {
	switch {
	case u.Skipped != "":
		return "skipped"
	case u.IsValid():
		return "VALID"
	}
	return "INVALID"
}
