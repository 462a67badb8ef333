package peer

import (
	"fmt"
	"slices"
	"strings"

	"github.com/berkcansavur/relaybus/bench/protocol"
	"github.com/berkcansavur/relaybus/bench/scenarios"
)

// Side is one side of a comparison as Fit reads it.
type Side struct {
	// Name is result.SideBase or result.SideCandidate; Label names it in
	// notes ("base (river)").
	Name, Label string
	// Caps are the capabilities of its worker's hello.
	Caps []string
}

// Fit fits m to the sides: it removes the cells a peer side does not run
// (one note each), gives each side of a tuned cell its own tuning
// (Descriptor.Tune), adds a cell "each as its own benchmark runs it"
// beside each tuned dispatch cell when a side has one (Descriptor.Own),
// records per cell what each side runs (scenarios.Cell.Sides) when a
// side is a peer, and returns the run's notes about each peer side. It
// fails when no cell is left. A comparison of two relaybus builds is
// left as it is.
func Fit(m *scenarios.Matrix, sides []Side) ([]string, error) {
	var skipped, notes []string
	anyPeer := false
	for _, s := range sides {
		d := OfHello(s.Caps)
		if !d.IsPeer() {
			continue
		}
		anyPeer = true
		skipped = append(skipped, d.skip(m, s)...)
	}
	if !anyPeer {
		return nil, nil
	}
	if len(m.Cells) == 0 {
		return nil, fmt.Errorf("bench: every selected cell is skipped for a peer side:\n  %s", strings.Join(skipped, "\n  "))
	}
	ownNotes := addOwnCells(m, sides)
	for i := range m.Cells {
		c := &m.Cells[i]
		if c.DispatcherProcs == 0 {
			continue
		}
		if c.Sides == nil {
			c.Sides = map[string]scenarios.SideRun{}
		}
		for _, s := range sides {
			d := OfHello(s.Caps)
			run, ok := c.Sides[s.Name]
			if !ok {
				run.Dispatcher = c.Dispatcher
				if c.Tuned && d.Tune != nil {
					run.Dispatcher = d.Tune(c.Dispatcher)
				}
			}
			run.Settings = d.Title + " with " + d.settings(run.Dispatcher)
			c.Sides[s.Name] = run
		}
	}
	for _, s := range sides {
		d := OfHello(s.Caps)
		if !d.IsPeer() {
			continue
		}
		if d.About != "" {
			notes = append(notes, fmt.Sprintf(d.About, s.Label))
		}
		if d.Notes != nil {
			notes = append(notes, d.Notes(s.Label, m)...)
		}
	}
	notes = append(notes, ownNotes...)
	return append(skipped, notes...), nil
}

// skip removes from m the cells that d, on side s, does not run
// comparably, and returns one note per skipped cell. A cell is skipped
// rather than run and flagged. Scenario 6 (the upgrade) is never run
// with a peer.
func (d *Descriptor) skip(m *scenarios.Matrix, s Side) []string {
	var notes []string
	m.Cells = slices.DeleteFunc(m.Cells, func(c scenarios.Cell) bool {
		why := d.skipReason(c.Scenario, s.Caps)
		if why == "" && d.SkipCell != nil {
			why = d.SkipCell(&c)
		}
		if why != "" {
			notes = append(notes, fmt.Sprintf("skipped for %s: %s / %s: %s", s.Label, scenarios.Names[c.Scenario], c.Name, why))
		}
		return why != ""
	})
	if m.Upgrade != nil {
		// Scenario 6 upgrades the base's database in place with the
		// candidate's setup: between a peer and relaybus there is no
		// such upgrade.
		m.Upgrade = nil
		notes = append(notes, fmt.Sprintf("skipped for %s: upgrade (scenario 6): it upgrades a relaybus database in place from the base's version to the candidate's, which a peer has no part in", s.Label))
	}
	return notes
}

// skipReason is why d does not run scenario, "" when it does.
func (d *Descriptor) skipReason(scenario int, caps []string) string {
	switch {
	case scenario == scenarios.Keyed && protocol.HasCapability(caps, protocol.CapabilityNoKeyOrder):
		return "scenario 3 measures what keeping per-key order costs, and this side keeps none (no-key-order); run, it would measure unordered dispatch and its order check would be skipped"
	case slices.Contains(d.Runs, scenario):
		return ""
	case d.Why[scenario] != "":
		return d.Why[scenario]
	case scenario == scenarios.Work:
		return "the handler-work cells run relaybus's lease renewals beside its completions on purpose; a peer has no such renewals, so the cells would compare different work"
	}
	return fmt.Sprintf("scenario %d is not defined for the %s peer", scenario, d.Name)
}

// addOwnCells adds, after each tuned dispatch cell of m, a cell in which
// each side runs as its own benchmark runs it, when a side's descriptor
// has an Own; a side without one runs the tuned cell's settings (after
// its Tune). It returns a note per side with an Own, which names its
// settings (the cell's settings line says them too).
func addOwnCells(m *scenarios.Matrix, sides []Side) []string {
	var notes []string
	for _, s := range sides {
		if d := OfHello(s.Caps); d.Own != nil {
			notes = append(notes, fmt.Sprintf("cells \"each as its own benchmark runs it\": %s runs %s: %s", s.Label, d.Own.Label, d.Own.Why))
		}
	}
	if len(notes) == 0 {
		return nil
	}
	var cells []scenarios.Cell
	for _, c := range m.Cells {
		cells = append(cells, c)
		if !c.Tuned || c.Scenario != scenarios.Dispatch || c.DispatcherProcs == 0 {
			continue
		}
		own := c
		own.Name = c.Name + ", each as its own benchmark runs it"
		own.Sides = map[string]scenarios.SideRun{}
		for _, s := range sides {
			d := OfHello(s.Caps)
			disp := c.Dispatcher
			if d.Tune != nil {
				disp = d.Tune(disp)
			}
			if d.Own != nil {
				disp = d.Own.Dispatcher(disp)
			}
			own.Sides[s.Name] = scenarios.SideRun{Dispatcher: disp}
		}
		cells = append(cells, own)
	}
	m.Cells = cells
	return notes
}
