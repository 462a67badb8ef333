package report

import (
	"fmt"
	"sort"
	"strings"

	"github.com/berkcansavur/relaybus/bench/protocol"
	"github.com/berkcansavur/relaybus/bench/result"
)

// UpgradeReason says why an upgrade (scenario 6) is INVALID.
func UpgradeReason(u *result.Upgrade) string {
	var parts []string
	if u.Error != "" {
		parts = append(parts, "error: "+u.Error)
	}
	parts = append(parts, u.Failed...)
	if u.Validation != nil && !u.Validation.Valid {
		parts = append(parts, u.Validation.String())
		if len(u.Validation.Examples) > 0 {
			parts = append(parts, "e.g. "+u.Validation.Examples[0])
		}
	}
	if len(parts) == 0 {
		parts = append(parts, "not validated")
	}
	return strings.Join(parts, "; ")
}

// upgradeLines are the upgrade's section: its verdict, what the
// candidate's setup did to the base's database, the store's state at each
// step, who handled what, and the checks.
func upgradeLines(run *result.Run) []string {
	u := run.Upgrade
	if u == nil {
		return nil
	}
	title := fmt.Sprintf("%s -> %s, upgraded in place, one run (no ABBA)", run.Base.Ref, run.Candidate.Ref)
	if u.Skipped != "" {
		return []string{title + ": " + u.Skipped}
	}
	m := u.Metrics
	out := []string{fmt.Sprintf("%s: %s", title, u.Verdict())}
	if !u.IsValid() {
		out = append(out, "why: "+UpgradeReason(u))
	}
	if _, ok := m[result.UpgradeSeconds]; ok {
		out = append(out, fmt.Sprintf("the candidate's setup upgraded the database in %.2f s, %s WAL bytes; rows inserted %s, updated %s, deleted %s",
			m[result.UpgradeSeconds], commas(m[result.UpgradeWALBytes]), commas(m[result.UpgradeRowsInserted]),
			commas(m[result.UpgradeRowsUpdated]), commas(m[result.UpgradeRowsDeleted])))
		var tables []string
		for _, t := range u.Tables {
			s := fmt.Sprintf("%s +%d ~%d (HOT %d) -%d", t.Table, t.Inserted, t.Updated, t.HotUpdated, t.Deleted)
			switch {
			case t.Created:
				s += " created"
			case t.Dropped:
				s += " dropped"
			case t.Rewritten:
				s += " rewritten whole"
			}
			tables = append(tables, s)
		}
		out = append(out, "per table (inserted, updated, deleted): "+strings.Join(tables, "; "))
	}
	state := func(name string, in *protocol.Inspect) {
		if in != nil {
			out = append(out, fmt.Sprintf("%s: pending %d, processing %d, completed %d, dead %d", name, in.Pending, in.Processing, in.Completed, in.Dead))
		}
	}
	state("store when the base's workers had stopped (base's inspect)", u.BeforeUpgrade)
	state("after the upgrade (candidate's inspect)", u.AfterUpgrade)
	state("after the republish (candidate's inspect)", u.AfterRepublish)
	state("after the candidate's drain", u.Final)
	if _, ok := m[result.UpgradeBaseHandled]; ok {
		out = append(out, fmt.Sprintf("handled ok: base %s, candidate %s (drain %s deliveries/s); %s event(s) the base completed republished, %s delivery(ies) added; redeliveries %s of %s in flight at the kill",
			commas(m[result.UpgradeBaseHandled]), commas(m[result.UpgradeCandidateHandled]), commas(m[result.UpgradeDrainDeliveriesPerS]),
			commas(m[result.UpgradeRepublished]), commas(m[result.UpgradeRepublishAdded]),
			commas(m[result.UpgradeRedeliveries]), commas(m[result.UpgradeInFlightAtKill])))
	}
	if u.Validation != nil {
		out = append(out, "validation of both sides' records: "+u.Validation.String())
	}
	for _, c := range u.Checks {
		mark := "ok"
		for _, f := range u.Failed {
			if f == c {
				mark = "FAILED"
			}
		}
		out = append(out, "check "+mark+": "+c)
	}
	sides := make([]string, 0, len(u.Ignored))
	for side := range u.Ignored {
		sides = append(sides, side)
	}
	sort.Strings(sides)
	for _, side := range sides {
		out = append(out, fmt.Sprintf("options ignored by %s: %s", side, strings.Join(u.Ignored[side], ", ")))
	}
	return out
}

// commas formats a count with thousands separators (one decimal below
// 100).
func commas(v float64) string {
	if v != v {
		return "-"
	}
	if v < 100 && v != float64(int64(v)) {
		return fmt.Sprintf("%.1f", v)
	}
	s := fmt.Sprintf("%d", int64(v+0.5))
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}
