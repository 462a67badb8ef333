package scenarios

import (
	"strings"
	"testing"
)

var riverCaps = []string{"peer", "peer:river", "no-key-order", "store:postgres"}

func TestSkipForPeer(t *testing.T) {
	m := Quick()
	if notes := m.SkipForPeer("candidate", []string{"store:postgres"}); notes != nil || len(m.Cells) != len(Quick().Cells) {
		t.Fatalf("a relaybus side skipped %v", notes)
	}
	notes := m.SkipForPeer("base (river)", riverCaps)
	for _, c := range m.Cells {
		if c.Scenario == Keyed || c.Scenario == Work {
			t.Errorf("kept %s / %s for River", Names[c.Scenario], c.Name)
		}
	}
	for _, n := range []int{Publish, Dispatch, Faults, Mixed} {
		if !hasScenario(m, n) {
			t.Errorf("skipped scenario %d for River", n)
		}
	}
	if m.Upgrade != nil {
		t.Error("kept scenario 6 (the upgrade) for River")
	}
	if want := 5; len(notes) != want { // 2 keyed and 2 work cells and the upgrade in --quick
		t.Fatalf("%d notes, want %d: %q", len(notes), want, notes)
	}
	for _, n := range notes {
		if !strings.HasPrefix(n, "skipped for base (river): ") {
			t.Errorf("note %q", n)
		}
	}
	if !strings.Contains(notes[0], "keyed / 1 inst, 4 hot keys") || !strings.Contains(notes[0], "no-key-order") {
		t.Errorf("keyed note %q", notes[0])
	}
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}

	// A peer that keeps key order runs scenario 3.
	m = Quick()
	m.SkipForPeer("base", []string{"peer", "peer:other"})
	if !hasScenario(m, Keyed) || hasScenario(m, Work) {
		t.Error("an ordered peer: keyed skipped or work kept")
	}
	// Only skipped cells: nothing left, and Validate says so.
	m = Quick()
	if err := m.Filter([]int{Keyed}); err != nil {
		t.Fatal(err)
	}
	m.SkipForPeer("base", riverCaps)
	if err := m.Validate(); err == nil || !strings.Contains(err.Error(), "no cells") {
		t.Errorf("all skipped: %v", err)
	}
}

func TestRiverFetchCooldown(t *testing.T) {
	for poll, want := range map[int]int{0: 100, 10: 10, 50: 50, 100: 100, 1000: 100} {
		if got := RiverFetchCooldownMs(poll); got != want {
			t.Errorf("RiverFetchCooldownMs(%d) = %d, want %d", poll, got, want)
		}
	}
}

func TestPeerNotes(t *testing.T) {
	m := Quick()
	m.SkipForPeer("base (river)", riverCaps)
	text := strings.Join(PeerNotes("river", "base (river)", &m), "\n")
	for _, want := range []string{
		"base (river) is River",
		"dispatch / 2 inst, tuned (conc 200, batch 200, pool 40, poll 50ms): poll 50 ms, cooldown 50 ms, at most 200 jobs per cooldown per process (about 4000/s each)",
		"faults / SIGKILL 1 of 2 dispatchers, poison 1/50, lease 2s: poll 100 ms, cooldown 100 ms, at most 20 jobs",
		"every 30 s (not configurable)",
		"LISTEN/NOTIFY",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("notes lack %q:\n%s", want, text)
		}
	}
	// Publish only: no dispatcher, fault or mixed note.
	m = Quick()
	if err := m.Filter([]int{Publish}); err != nil {
		t.Fatal(err)
	}
	if notes := PeerNotes("river", "base (river)", &m); len(notes) != 1 {
		t.Errorf("publish-only notes: %q", notes)
	}
	if notes := PeerNotes("other", "base (other)", &m); len(notes) != 1 || !strings.Contains(notes[0], "peer (other)") {
		t.Errorf("unknown peer: %q", notes)
	}
}
