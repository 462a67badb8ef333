package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/berkcansavur/relaybus/bench/peer"
	"github.com/berkcansavur/relaybus/bench/protocol"
	"github.com/berkcansavur/relaybus/bench/scenarios"
)

// The harness keeps what it must know of this peer in the main module
// (bench/peer's Ceiling); these tests hold it to the peer as built.

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
