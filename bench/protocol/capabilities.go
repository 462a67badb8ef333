package protocol

import (
	"slices"
	"strings"
)

// Capabilities a worker's hello may list that change how the harness
// treats its side. A relaybus worker lists none of the peer ones; a peer worker (a
// worker of another library, built from bench/peers/<name>) lists
// CapabilityPeer and CapabilityPeerPrefix+name, and CapabilityNoKeyOrder
// when the library does not handle one key's events in commit order.
const (
	// CapabilityPeer: this worker is not a relaybus build.
	CapabilityPeer = "peer"
	// CapabilityPeerPrefix, followed by the peer's name ("peer:river").
	CapabilityPeerPrefix = "peer:"
	// CapabilityNoKeyOrder: the worker does not keep per-key order and
	// records no per-key sequence, so the validator does not check order
	// for its side (every other check still applies).
	CapabilityNoKeyOrder = "no-key-order"
	// CapabilityCompletionRecords: the worker's dispatchers write a
	// completion line (bench/record's C) for every completion the store
	// confirmed, after it returned, so the validator checks each
	// completion against its handle and every handle against the
	// completions before it. A worker without it (v0.2.2 and earlier, a
	// peer) is reported as not checked for completions.
	CapabilityCompletionRecords = "completion-records"
	// CapabilityBatchHandlers: the worker's dispatchers apply
	// Dispatcher.HandlerBatchMax (batch handlers) and
	// Dispatcher.HandlerCallWaitUs (a wait per handler call). A worker
	// without it lists both fields ignored: its handlers take one
	// delivery a call and wait for nothing.
	CapabilityBatchHandlers = "batch-handlers"
)

// HasCapability reports whether caps (a hello's capabilities) lists c.
func HasCapability(caps []string, c string) bool {
	return slices.Contains(caps, c)
}

// PeerName is the peer's name a hello's capabilities declare ("river"),
// or "" for a relaybus worker.
func PeerName(caps []string) string {
	if !HasCapability(caps, CapabilityPeer) {
		return ""
	}
	for _, c := range caps {
		if name, ok := strings.CutPrefix(c, CapabilityPeerPrefix); ok && name != "" {
			return name
		}
	}
	return "unnamed peer"
}
