package main

import (
	"strings"
	"testing"

	"github.com/berkcansavur/relaybus/bench/result"
	"github.com/berkcansavur/relaybus/bench/scenarios"
)

func TestPeerMatrix(t *testing.T) {
	river := result.RefInfo{Ref: "river", Version: "river v0.51.2", Capabilities: []string{"peer", "peer:river", "no-key-order"}}
	head := result.RefInfo{Ref: "HEAD", Version: "0.2.0-dev"}

	m := scenarios.Quick()
	notes, err := peerMatrix(&m, []sideInfo{{result.SideBase, head}, {result.SideCandidate, head}})
	if err != nil || notes != nil || len(m.Cells) != len(scenarios.Quick().Cells) {
		t.Fatalf("relaybus sides: %q %v, %d cells", notes, err, len(m.Cells))
	}

	m = scenarios.Quick()
	notes, err = peerMatrix(&m, []sideInfo{{result.SideBase, river}, {result.SideCandidate, head}})
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Join(notes, "\n")
	for _, want := range []string{"skipped for base (river): keyed", "skipped for base (river): work", "base (river) is River", "cooldown 50 ms"} {
		if !strings.Contains(text, want) {
			t.Errorf("notes lack %q:\n%s", want, text)
		}
	}
	for _, c := range m.Cells {
		if c.Scenario == scenarios.Keyed || c.Scenario == scenarios.Work {
			t.Errorf("cell %s kept", c.Name)
		}
	}

	m = scenarios.Quick()
	if err := m.Filter([]int{scenarios.Keyed}); err != nil {
		t.Fatal(err)
	}
	if _, err := peerMatrix(&m, []sideInfo{{result.SideBase, river}, {result.SideCandidate, head}}); err == nil ||
		!strings.Contains(err.Error(), "every selected cell is skipped") {
		t.Fatalf("only keyed cells: %v", err)
	}
}

func TestLifecycleRefusesAPeer(t *testing.T) {
	_, err := runCLI(t, "lifecycle", "--ref", "river", "--repo", "../..")
	if err == nil || !strings.Contains(err.Error(), "lifecycle takes relaybus refs") {
		t.Fatalf("lifecycle --ref river: %v", err)
	}
}
