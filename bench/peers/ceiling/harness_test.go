package main

import (
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/berkcansavur/relaybus/bench/peer"
	"github.com/berkcansavur/relaybus/bench/protocol"
	"github.com/berkcansavur/relaybus/bench/scenarios"
)

// The harness keeps what it must know of this peer in the main module
// (bench/peer's Ceiling); these tests hold it to the peer as built.

// TestHarnessKnowsTheBuildInputs: every package of the main module this
// peer's build compiles lies under the harness's list of its inputs, so
// a change to one of them makes the harness build the peer from the
// working tree instead of HEAD's commit.
func TestHarnessKnowsTheBuildInputs(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", "-f", "{{with .Module}}{{.Path}}{{end}}\t{{.Dir}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	p, ok := peer.ByName(peerName)
	if !ok {
		t.Fatal("the harness knows no ceiling peer")
	}
	n := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		mod, dir, _ := strings.Cut(line, "\t")
		if mod != "github.com/berkcansavur/relaybus" && mod != "github.com/berkcansavur/relaybus/bench/peers/ceiling" {
			continue
		}
		n++
		rel, err := filepath.Rel(root, dir)
		if err != nil {
			t.Fatal(err)
		}
		rel = filepath.ToSlash(rel)
		covered := false
		for _, in := range p.Inputs() {
			if rel == in || strings.HasPrefix(rel, in+"/") {
				covered = true
			}
		}
		if !covered {
			t.Errorf("the peer compiles %s (%s), which the harness's peer.Ceiling.Inputs %q leaves out", rel, mod, p.Inputs())
		}
	}
	if n < 3 {
		t.Fatalf("go list named %d packages of this repository, want the peer, bench/protocol and bench/record:\n%s", n, out)
	}
}

// TestHarnessCeiling: the harness reads this peer's tables and leaves out
// the fault cells its hello refuses, and the peer is not versioned.
func TestHarnessCeiling(t *testing.T) {
	t.Parallel()
	p, ok := peer.ByName(peerName)
	if !ok {
		t.Fatal("the harness knows no ceiling peer")
	}
	if p.Tables.Deliveries != "ceiling_deliveries" || p.Tables.Lanes != "ceiling_lanes" || p.TablePattern != `ceiling\_%` {
		t.Errorf("the harness reads tables %+v (%s), want ceiling_deliveries and ceiling_lanes", p.Tables, p.TablePattern)
	}
	for _, s := range schemaSQL {
		if strings.Contains(s, "CREATE TABLE") && !strings.Contains(s, "ceiling_") {
			t.Errorf("a table outside the harness's pattern: %s", s)
		}
	}
	if slices.Contains(p.Runs, scenarios.Faults) || !slices.Contains(p.Runs, scenarios.Keyed) || p.Versioned() {
		t.Errorf("the harness runs scenarios %v (versioned %v): want no fault cells, the keyed ones, no version", p.Runs, p.Versioned())
	}
	if !protocol.HasCapability(capabilities(), CapabilityNoFaults) {
		t.Error("the hello does not list no-faults")
	}
}
