package main

import (
	"fmt"
	"strings"

	"github.com/berkcansavur/relaybus/bench/protocol"
	"github.com/berkcansavur/relaybus/bench/result"
	"github.com/berkcansavur/relaybus/bench/scenarios"
)

// sideInfo is one side's name and hello, as peerMatrix reads them.
type sideInfo struct {
	name string // result.SideBase or result.SideCandidate
	ref  result.RefInfo
}

// peerMatrix fits m to the sides: it removes the cells a peer side
// skips (scenarios.Matrix.SkipForPeer) and returns the run's notes about
// each peer side. It fails when no cell is left.
func peerMatrix(m *scenarios.Matrix, sides []sideInfo) ([]string, error) {
	var notes, skipped []string
	for _, s := range sides {
		peer := protocol.PeerName(s.ref.Capabilities)
		if peer == "" {
			continue
		}
		label := fmt.Sprintf("%s (%s)", s.name, s.ref.Ref)
		skipped = append(skipped, m.SkipForPeer(label, s.ref.Capabilities)...)
		notes = append(notes, scenarios.PeerNotes(peer, label, m)...)
	}
	if len(m.Cells) == 0 {
		return nil, fmt.Errorf("bench: every selected cell is skipped for a peer side:\n  %s", strings.Join(skipped, "\n  "))
	}
	return append(skipped, notes...), nil
}

// helloLine is the progress line of a side's hello.
func helloLine(side string, ref fmt.Stringer, hello *protocol.Message) string {
	if peer := protocol.PeerName(hello.Capabilities); peer != "" {
		return fmt.Sprintf("%s %s: peer %s, protocol %d, capabilities %s", side, ref, hello.Version, hello.Protocol, strings.Join(hello.Capabilities, " "))
	}
	return fmt.Sprintf("%s %s: relaybus %s, protocol %d", side, ref, hello.Version, hello.Protocol)
}
