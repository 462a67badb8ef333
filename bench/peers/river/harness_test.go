package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/riverqueue/river"

	"github.com/berkcansavur/relaybus/bench/peer"
	"github.com/berkcansavur/relaybus/bench/protocol"
)

// The harness keeps what it must know of this peer in the main module
// (bench/peer's River); these tests hold it to the peer as built.

// TestHarnessKnowsTheBuildInputs: every package of the main module this
// peer's build compiles lies under the harness's list of its inputs, so a change
// to one of them makes the harness build the peer from the working tree
// instead of HEAD's commit.
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
	p, ok := peer.ByName("river")
	if !ok {
		t.Fatal("the harness knows no river peer")
	}
	n := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		mod, dir, _ := strings.Cut(line, "\t")
		if mod != "github.com/berkcansavur/relaybus" && mod != "github.com/berkcansavur/relaybus/bench/peers/river" {
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
			t.Errorf("the peer compiles %s (%s), which the harness's peer.River.Inputs %q leaves out", rel, mod, p.Inputs())
		}
	}
	if n < 3 {
		t.Fatalf("go list named %d packages of this repository, want the peer, bench/protocol and bench/record:\n%s", n, out)
	}
}

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
