package scenarios

import (
	"fmt"
	"slices"
	"strings"

	"github.com/berkcansavur/relaybus/bench/protocol"
)

// River's settings as the river peer (bench/peers/river) runs them, for
// the notes a report carries about a River side. The peer module's tests
// check the ones River exports against River itself.
const (
	// RiverFetchCooldownDefaultMs is river.FetchCooldownDefault: the
	// least time between two fetches of one client. The peer keeps it,
	// lowered to poll_ms where that is shorter (River requires cooldown
	// <= poll interval).
	RiverFetchCooldownDefaultMs = 100
	// RiverRescuerIntervalS is how often River's leader runs its job
	// rescuer (internal/maintenance.JobRescuerIntervalDefault in River
	// v0.51.2; not configurable).
	RiverRescuerIntervalS = 30
	// RiverLeaderTTLS and RiverElectIntervalS: a leader that dies holds
	// its leadership until its TTL ends, and the other clients try to
	// take it every elect interval (internal/leadership in v0.51.2).
	RiverLeaderTTLS     = 15
	RiverElectIntervalS = 5
)

// RiverFetchCooldownMs is the FetchCooldown the river peer runs a
// dispatcher with at pollMs (0: River's default poll, 1 s), when the
// harness passes no fetch_cooldown_ms.
func RiverFetchCooldownMs(pollMs int) int {
	if pollMs > 0 && pollMs < RiverFetchCooldownDefaultMs {
		return pollMs
	}
	return RiverFetchCooldownDefaultMs
}

// peerRuns are the scenarios a peer side runs.
var peerRuns = []int{Publish, Dispatch, Faults, Mixed}

// SkipForPeer removes from m the cells that a peer side (one whose hello
// lists protocol.CapabilityPeer; caps are its capabilities) cannot run
// comparably, and returns one note per skipped cell, naming the side
// (e.g. "base (river)"). A cell is skipped rather than run and flagged:
// scenario 3 (keyed) for a side that keeps no per-key order, the
// handler-work cells and scenario 6 (the upgrade) for every peer, and any
// scenario not defined for peers. A relaybus side skips nothing.
func (m *Matrix) SkipForPeer(side string, caps []string) []string {
	if !protocol.HasCapability(caps, protocol.CapabilityPeer) {
		return nil
	}
	var notes []string
	m.Cells = slices.DeleteFunc(m.Cells, func(c Cell) bool {
		why := peerSkip(c.Scenario, caps)
		if why != "" {
			notes = append(notes, fmt.Sprintf("skipped for %s: %s / %s: %s", side, Names[c.Scenario], c.Name, why))
		}
		return why != ""
	})
	if m.Upgrade != nil {
		// Scenario 6 upgrades the base's database in place with the
		// candidate's setup: between a peer and relaybus there is no
		// such upgrade.
		m.Upgrade = nil
		notes = append(notes, fmt.Sprintf("skipped for %s: upgrade (scenario 6): it upgrades a relaybus database in place from the base's version to the candidate's, which a peer has no part in", side))
	}
	return notes
}

func peerSkip(scenario int, caps []string) string {
	switch {
	case scenario == Keyed && protocol.HasCapability(caps, protocol.CapabilityNoKeyOrder):
		return "scenario 3 measures what keeping per-key order costs, and this side keeps none (no-key-order); run, it would measure unordered dispatch and its order check would be skipped"
	case scenario == Keyed:
		return ""
	case scenario == Work:
		return "the handler-work cells run relaybus's lease renewals beside its completions on purpose; a peer has no such renewals (River has no lease: lease_ms is its JobTimeout), so the cells would compare different work"
	case !slices.Contains(peerRuns, scenario):
		return fmt.Sprintf("scenario %d is defined for relaybus refs only", scenario)
	}
	return ""
}

// PeerNotes are what a reader of a comparison must know about a peer
// side that ran the cells of m: how the harness's settings reached the
// peer and which cells do not compare like with like. side names it
// ("base (river)"). An unknown peer gets a general note.
func PeerNotes(peer, side string, m *Matrix) []string {
	if peer != "river" {
		return []string{fmt.Sprintf("%s is a peer (%s), not a relaybus build: its dispatcher settings and guarantees are its own; see its worker's ready lines (ignored options) and BENCHMARKS.md", side, peer)}
	}
	notes := []string{
		fmt.Sprintf("%s is River, built from bench/peers/river (one River job per (event, handler); the job carries the payload). "+
			"It keeps no per-key order (its validity reads \"no key order\" where keyed handles went unchecked) and retries each job on its own, as relaybus retries each delivery. "+
			"Per-table metrics are read from river_job on its side (see each table's \"tables\" line); WAL is the database's on both sides; "+
			"statements per delivery include River's leader election and maintenance queries", side),
	}
	var cooldowns []string
	seen := map[string]bool{}
	faults, mixed := false, false
	for _, c := range m.Cells {
		switch c.Scenario {
		case Faults:
			faults = true
		case Mixed:
			mixed = true
		}
		if c.DispatcherProcs == 0 {
			continue
		}
		cd := RiverFetchCooldownMs(c.Dispatcher.PollMs)
		conc := c.Dispatcher.Concurrency
		if conc == 0 {
			conc = 10 // the peer's MaxWorkers when the cell sets none
		}
		s := fmt.Sprintf("%s / %s: poll %d ms, cooldown %d ms, at most %d jobs per cooldown per process (about %d/s each)",
			Names[c.Scenario], c.Name, c.Dispatcher.PollMs, cd, conc, conc*1000/cd)
		if !seen[s] {
			seen[s] = true
			cooldowns = append(cooldowns, s)
		}
	}
	if len(cooldowns) > 0 {
		notes = append(notes, fmt.Sprintf("%s ran River's own fetch spacing, not tuned: FetchCooldown is River's default (%d ms), lowered to the cell's poll where that is shorter "+
			"(River requires it; where the poll is under %d ms both sides then poll at the same interval), and the harness passes no fetch_cooldown_ms. "+
			"River fetches at most MaxWorkers (the cell's concurrency) jobs per cooldown, which caps a process where relaybus claims again at once after a full batch: %s",
			side, RiverFetchCooldownDefaultMs, RiverFetchCooldownDefaultMs, strings.Join(cooldowns, "; ")))
	}
	if faults {
		notes = append(notes, fmt.Sprintf("faults: River has no lease. For %s, lease_ms sets JobTimeout and RescueStuckJobsAfter, and River's leader rescues a killed dispatcher's jobs "+
			"on its rescuer's next run, every %d s (not configurable): lease_ms plus up to %d s after the kill, plus up to about %d s more when the killed process was the leader "+
			"(its leadership lapses after %d s, and the others try every %d s), where relaybus's lease lapses after lease_ms. "+
			"The fault cells check that River loses nothing and repeats only what the kill explains, but their recovery does not compare: River's happens in the drain, after the window",
			side, RiverRescuerIntervalS, RiverRescuerIntervalS, RiverLeaderTTLS+RiverElectIntervalS, RiverLeaderTTLS, RiverElectIntervalS))
	}
	if mixed {
		notes = append(notes, fmt.Sprintf("mixed: %s's dispatchers wake on River's LISTEN/NOTIFY when jobs are inserted, while relaybus's poll every poll_ms: commit-to-handler latency compares a notified side with a polling one", side))
	}
	return notes
}
