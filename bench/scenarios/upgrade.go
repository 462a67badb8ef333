package scenarios

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/berkcansavur/relaybus/bench/protocol"
)

// Upgrade is scenario 6: a live database upgraded in place from the base's
// version to the candidate's. It runs once (no ABBA: an upgrade happens
// once), on one database, and only when the two sides are different code:
//
//  1. the base's setup, and its preload roles publish a backlog of
//     KeyedEvents keyed events (KeyCount keys) and UnkeyedEvents unkeyed
//     ones, each with every handler of the workload;
//  2. BaseDispatchers base dispatchers handle about HandledShare of the
//     deliveries, then the first is SIGKILLed (rows are left in flight)
//     and the others are stopped;
//  3. the candidate's setup upgrades the database in place (timed, with
//     its WAL bytes and the rows it wrote);
//  4. the candidate's publisher republishes Republish events whose
//     deliveries the base completed: they must add no delivery;
//  5. CandidateDispatchers candidate dispatchers drain the rest.
//
// The validator then checks both sides' records as one run.
type Upgrade struct {
	// Workload: event type, handlers, payload, the base's handler cost.
	// Keys and the id prefix are set per preload.
	Workload                   protocol.Workload
	KeyedEvents, UnkeyedEvents int
	KeyCount                   int
	PreloadPublishers          int
	PreloadBatch               int
	BaseDispatchers            int
	BaseDispatcher             protocol.Dispatcher
	DispatcherPool             int
	HandledShare               float64
	Republish                  int
	CandidateDispatchers       int
	CandidateDispatcher        protocol.Dispatcher
}

// Validate checks the upgrade's bounds.
func (u *Upgrade) Validate() error {
	switch {
	case len(u.Workload.Handlers) == 0:
		return fmt.Errorf("scenarios: upgrade: no handlers")
	case u.KeyedEvents < 0 || u.UnkeyedEvents < 0 || u.KeyedEvents+u.UnkeyedEvents == 0 || u.KeyedEvents+u.UnkeyedEvents > MaxPreload:
		return fmt.Errorf("scenarios: upgrade: %d keyed and %d unkeyed events: want a backlog of 1..%d", u.KeyedEvents, u.UnkeyedEvents, MaxPreload)
	case u.KeyedEvents > 0 && u.KeyCount < 1:
		return fmt.Errorf("scenarios: upgrade: keyed events need a key count")
	case u.PreloadPublishers < 1 || u.PreloadBatch < 1:
		return fmt.Errorf("scenarios: upgrade: the preload needs publishers and a batch")
	case u.BaseDispatchers < 2 || u.BaseDispatchers > MaxProcs || u.CandidateDispatchers < 1 || u.CandidateDispatchers > MaxProcs:
		// One base dispatcher is killed; another must stop gracefully.
		return fmt.Errorf("scenarios: upgrade: want 2..%d base dispatchers (one is killed) and 1..%d candidate dispatchers", MaxProcs, MaxProcs)
	case !(u.HandledShare > 0 && u.HandledShare < 1):
		return fmt.Errorf("scenarios: upgrade: the base's share %v is not in (0, 1)", u.HandledShare)
	case u.Republish < 0 || u.Republish > u.KeyedEvents+u.UnkeyedEvents:
		return fmt.Errorf("scenarios: upgrade: republish %d outside 0..the backlog", u.Republish)
	}
	return nil
}

// Deliveries is the backlog in deliveries.
func (u *Upgrade) Deliveries() int {
	return (u.KeyedEvents + u.UnkeyedEvents) * len(u.Workload.Handlers)
}

// Config is the upgrade's configuration as recorded in the results.
func (u *Upgrade) Config() map[string]any {
	return map[string]any{
		"scenario": UpgradeScenario, "handlers": len(u.Workload.Handlers), "keyed_events": u.KeyedEvents,
		"unkeyed_events": u.UnkeyedEvents, "key_count": u.KeyCount, "base_dispatchers": u.BaseDispatchers,
		"base_share": u.HandledShare, "handler_cost_us": u.Workload.HandlerCostUs, "lease_ms": u.BaseDispatcher.LeaseMs,
		"republish": u.Republish, "candidate_dispatchers": u.CandidateDispatchers,
	}
}

// upgrade is scenario 6 with events of each kind: two handlers (so a
// republished event could add a delivery per handler), 1,000 keys, base
// dispatchers whose handlers take 1 ms (so many deliveries are in flight
// when one is killed), 25% handled by the base. Their lease outlasts the
// base's own dispatch, so that it renews no lease: with a 2 s lease, 2 of
// 7 runs had deliveries that a live base dispatcher had handled run again
// (most likely v0.1.0's renewal and completion deadlocking, fixed in
// v0.1.1): duplicates that say nothing about the upgrade. The base's
// dispatch took about 20 s for v0.1.0 on 2 cores with 25,000 events per
// kind (--full: a 60 s lease, renewed after 20 s) and at most 5 s with
// 3,000 (--quick, --smoke: 20 s, renewed after 6.7 s). A candidate that
// keeps the base's leases (0.2.x after 0.2.x: nothing to upgrade, the
// killed dispatcher's lanes stay leased) waits for them to expire in its
// drain, so the lease is not longer than that.
func upgrade(events, leaseMs int) *Upgrade {
	w := workload("none", 0)
	w.Handlers = []string{"h1", "h2"}
	w.HandlerCostUs = 1000
	return &Upgrade{Workload: w, KeyedEvents: events, UnkeyedEvents: events, KeyCount: 1000,
		PreloadPublishers: 4, PreloadBatch: 100,
		BaseDispatchers: 2, DispatcherPool: 10,
		BaseDispatcher: protocol.Dispatcher{Concurrency: 20, Batch: 20, PollMs: 50, LeaseMs: leaseMs},
		HandledShare:   0.25, Republish: 100,
		CandidateDispatchers: 2, CandidateDispatcher: DrainDispatcher}
}

// shortUpgradeLeaseMs is the base's lease in scenario 6 for a base
// without a known renewal flaw (FitBaseLease).
const shortUpgradeLeaseMs = 5000

// FitBaseLease shortens the base's lease of the upgrade to 5 s when the
// base's relaybus version (from its hello) is 0.1.2 or later, and returns
// a note saying so (empty when it changes nothing). The long lease only
// keeps a release with a known renewal flaw (v0.1.0's renewal/completion
// deadlock, v0.1.1's unrenewed finishing lease) from renewing during its
// part; a base with lane leases keeps the killed dispatcher's lanes
// leased across the upgrade, and the candidate's drain waits them out
// (about 18 s of a 20 s lease in --quick).
func (u *Upgrade) FitBaseLease(version string) string {
	if u == nil || u.BaseDispatcher.LeaseMs <= shortUpgradeLeaseMs || !atLeast(version, 0, 1, 2) {
		return ""
	}
	old := u.BaseDispatcher.LeaseMs
	u.BaseDispatcher.LeaseMs = shortUpgradeLeaseMs
	return fmt.Sprintf("scenario 6: the base (relaybus %s) has no known renewal flaw: its lease is %d ms, not %d", version, shortUpgradeLeaseMs, old)
}

// atLeast reports whether version ("MAJOR.MINOR.PATCH", with an optional
// "-suffix" such as "-dev") is at least major.minor.patch; a version it
// cannot read is not.
func atLeast(version string, major, minor, patch int) bool {
	core, _, _ := strings.Cut(version, "-")
	parts := strings.Split(core, ".")
	if len(parts) != 3 {
		return false
	}
	var v [3]int
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return false
		}
		v[i] = n
	}
	want := [3]int{major, minor, patch}
	for i := range v {
		if v[i] != want[i] {
			return v[i] > want[i]
		}
	}
	return true
}
