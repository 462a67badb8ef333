package report

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/berkcansavur/relaybus/bench/protocol"
	"github.com/berkcansavur/relaybus/bench/result"
)

// What a report adds when a side is a peer (a worker of another library,
// such as River): its label, the validity of a side whose key order was
// not checked, and which table each side's per-table metrics came from.

// peerName is the peer a side is ("river"), "" for a relaybus build.
func peerName(r result.RefInfo) string {
	return protocol.PeerName(r.Capabilities)
}

// refLabel describes a side in the report's header: a relaybus build by
// its version, a peer by what it is and the tree it was built from.
func refLabel(r result.RefInfo) string {
	if p := peerName(r); p != "" {
		return fmt.Sprintf("`%s`: peer %s (%s), built from bench/peers/%s of the harness's tree at %s, protocol %d",
			r.Ref, p, r.Version, p, r.SHA, r.Protocol)
	}
	return fmt.Sprintf("`%s` %s (version %s, protocol %d)", r.Ref, r.SHA, r.Version, r.Protocol)
}

// termRefLabel is refLabel for the terminal's first line.
func termRefLabel(r result.RefInfo) string {
	if p := peerName(r); p != "" {
		return fmt.Sprintf("%s (peer: %s, tree %s)", r.Ref, r.Version, short(r.SHA))
	}
	return fmt.Sprintf("%s (%s)", r.Ref, short(r.SHA))
}

// keyOrderNote is " (no key order: base)" when some VALID window of a
// side of c had keyed handles whose order the validator did not check,
// because that side keeps no per-key order; "" otherwise.
func keyOrderNote(c *result.Cell) string {
	var sides []string
	for _, side := range []string{result.SideBase, result.SideCandidate} {
		for _, s := range c.Samples {
			if s.Side == side && s.Validation != nil && s.Validation.KeyOrderSkipped > 0 {
				sides = append(sides, side)
				break
			}
		}
	}
	if len(sides) == 0 {
		return ""
	}
	return " (no key order: " + strings.Join(sides, ", ") + ")"
}

// tableNotes say, when the two sides read a per-table metric of the
// group from differently named tables (a relaybus ref against a peer),
// which table each side's came from.
func (g *group) tableNotes() []string {
	roles := map[string][]string{} // role -> the group's metric titles
	for _, m := range g.metrics {
		if role, ok := result.MetricTableRole[m.Name]; ok {
			roles[role] = append(roles[role], m.Title)
		}
	}
	var out []string
	names := make([]string, 0, len(roles))
	for role := range roles {
		names = append(names, role)
	}
	sort.Strings(names)
	for _, role := range names {
		tables := map[string][]string{}
		for _, c := range g.cells {
			for _, s := range c.Samples {
				if t := s.Tables[role]; t != "" && !slices.Contains(tables[s.Side], t) {
					tables[s.Side] = append(tables[s.Side], t)
				}
			}
		}
		b, k := strings.Join(tables[result.SideBase], ", "), strings.Join(tables[result.SideCandidate], ", ")
		if b == k {
			continue
		}
		out = append(out, fmt.Sprintf("tables: %s come from %s on the base side and %s on the candidate side",
			strings.Join(roles[role], ", "), orNone(b), orNone(k)))
	}
	return out
}

func orNone(s string) string {
	if s == "" {
		return "no table"
	}
	return s
}
