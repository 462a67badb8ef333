package main

import (
	"testing"
	"time"

	"github.com/riverqueue/river"

	"github.com/berkcansavur/relaybus/bench/peer"
	"github.com/berkcansavur/relaybus/bench/protocol"
)

// The harness keeps what it must know of this peer in the main module
// (bench/peer's River); these tests hold it to the peer as built.

// TestHarnessRiverSettings: the fetch cooldown the harness's notes state
// (peer.RiverFetchCooldownMs) is the one the peer gives River.
func TestHarnessRiverSettings(t *testing.T) {
	t.Parallel()
	if got := time.Duration(peer.RiverFetchCooldownDefaultMs) * time.Millisecond; got != river.FetchCooldownDefault {
		t.Errorf("peer.RiverFetchCooldownDefaultMs is %v, River's FetchCooldownDefault %v", got, river.FetchCooldownDefault)
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, &deliveryWorker{})
	for _, poll := range []int{0, 10, 50, 99, 100, 1000} {
		cfg, err := clientConfig(&protocol.Config{Dispatcher: protocol.Dispatcher{PollMs: poll}}, dispatcherOptions{}, workers)
		if err != nil {
			t.Fatal(err)
		}
		got := cmpOr(cfg.FetchCooldown, river.FetchCooldownDefault)
		if want := time.Duration(peer.RiverFetchCooldownMs(poll)) * time.Millisecond; got != want {
			t.Errorf("poll %d ms: the peer's cooldown is %v, the harness says %v", poll, got, want)
		}
	}
}

// TestCapabilities: the hello declares what the harness reads.
func TestCapabilities(t *testing.T) {
	t.Parallel()
	caps := capabilities()
	if protocol.PeerName(caps) != "river" || !protocol.HasCapability(caps, protocol.CapabilityNoKeyOrder) {
		t.Errorf("capabilities %q: want a river peer without key order", caps)
	}
}
