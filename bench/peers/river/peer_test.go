package main

import (
	"testing"

	"github.com/berkcansavur/relaybus/bench/protocol"
	"github.com/berkcansavur/relaybus/bench/worker/workerkit/peertest"
)

// The tests run the built binary as the harness does (peertest): one
// process per role, a protocol 1 config on stdin, JSON lines on stdout,
// SIGTERM to stop, records read back and checked.
func TestMain(m *testing.M) { peertest.Main(m, "river") }

// TestPeer makes the checks every peer passes (peertest.Exercise): the
// harness knows its build inputs; what it says before a role runs (its
// command line, hello, refusals and ready lines) is
// testdata/protocol.golden, and the records of a small run are
// testdata/records.golden, byte for byte but for times (River's handle
// records carry no holder or token).
func TestPeer(t *testing.T) {
	peertest.Exercise(t, protocol.Dispatcher{Concurrency: 1, PollMs: 20})
}
