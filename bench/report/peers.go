package report

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/berkcansavur/relaybus/bench/peer"
	"github.com/berkcansavur/relaybus/bench/result"
)

// What a report adds when a side is a peer (a worker of another library,
// described in bench/peer): its label, the validity of a side whose key
// order was not checked, which table each side's per-table metrics came
// from and which settings each side ran a cell with.

// refLabel describes a side in the report's header: a relaybus build by
// its version, a peer by what it is and the tree it was built from.
func refLabel(r result.RefInfo) string {
	if d := peer.OfHello(r.Capabilities); d.IsPeer() {
		return fmt.Sprintf("`%s`: peer %s (%s), built from %s of the harness's tree at %s, protocol %d",
			r.Ref, d.Title, r.Version, d.Dir(), r.SHA, r.Protocol)
	}
	return fmt.Sprintf("`%s` %s (version %s, protocol %d)", r.Ref, r.SHA, r.Version, r.Protocol)
}

// termRefLabel is refLabel for the terminal's first line.
func termRefLabel(r result.RefInfo) string {
	if d := peer.OfHello(r.Capabilities); d.IsPeer() {
		return fmt.Sprintf("%s (peer: %s, tree %s)", r.Ref, r.Version, short(r.SHA))
	}
	return fmt.Sprintf("%s (%s)", r.Ref, short(r.SHA))
}

// settingsNotes say, per cell of the group whose sides ran it with
// settings of their own (result.Cell.Settings), what each side ran.
func (g *group) settingsNotes() []string {
	var out []string
	for _, c := range g.cells {
		if len(c.Settings) == 0 {
			continue
		}
		var parts []string
		for _, side := range []string{result.SideBase, result.SideCandidate} {
			if s := c.Settings[side]; s != "" {
				parts = append(parts, side+" runs "+s)
			}
		}
		out = append(out, fmt.Sprintf("settings of %s: %s", c.Name, strings.Join(parts, "; ")))
	}
	return out
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
