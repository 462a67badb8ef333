package validate

// Reading the records: the events the publishers recorded and the
// handles of every process, indexed for the checks.

import (
	"github.com/berkcansavur/relaybus/bench/record"
)

// readEvents collects the published events. A publish retried with the
// same id is one event; it is certain if any of its records is.
func (c *checker) readEvents(n int) {
	c.eventIdx = make(map[string]int32, n)
	c.events = make([]event, 0, n)
	c.keyIDs = map[string]int32{}
	nh := len(c.handlerNames)
	for fi := range c.in.Files {
		killedAt, killed := c.killedAt[c.in.Files[fi].Name]
		for _, p := range c.in.Files[fi].Published {
			if killed && (p.CommitNs > killedAt || p.CallStartNs > killedAt) {
				c.r.Unexpected++
				c.ex("unexpected: %s recorded a commit of event %s after the fault plan killed it", c.in.Files[fi].Name, p.EventID)
				continue
			}
			ei, ok := c.eventIdx[p.EventID]
			if !ok {
				ei = int32(len(c.events))
				keyID := int32(-1)
				if p.Key != "" {
					id, ok := c.keyIDs[p.Key]
					if !ok {
						id = int32(len(c.keyIDs))
						c.keyIDs[p.Key] = id
					}
					keyID = id
				}
				c.events = append(c.events, event{id: p.EventID, key: p.Key, keyID: keyID, poison: c.in.Expect.PoisonEventIDs[p.EventID], countsIdx: int(ei) * nh})
				c.eventIdx[p.EventID] = ei
			}
			e := &c.events[ei]
			if p.Key != e.key {
				c.r.KeyMismatches++
				c.ex("key mismatch: event %s published with keys %q and %q", e.id, e.key, p.Key)
			}
			if p.CallStartNs > 0 && (e.firstCall == 0 || p.CallStartNs < e.firstCall) {
				e.firstCall = p.CallStartNs
			}
			if p.CallStartNs > 0 && p.CommitNs > 0 && p.CallStartNs > p.CommitNs {
				c.r.CausalityViolations++
				c.ex("causality: %s's publish call of event %s started at %d, %d ns after its commit returned",
					c.in.Files[fi].Name, p.EventID, p.CallStartNs, p.CallStartNs-p.CommitNs)
			}
			if !p.Uncertain && !e.certain {
				e.certain, e.callStart, e.commit = true, p.CallStartNs, p.CommitNs
			}
		}
	}
	c.r.Published = int64(len(c.events))
}

// readHandles indexes every handle by its event and handler, counting
// the ones that belong to no published event or known handler.
func (c *checker) readHandles(n int) {
	c.handles = make([]handle, 0, n)
	for fi := range c.in.Files {
		for ri := range c.in.Files[fi].Handled {
			h := &c.in.Files[fi].Handled[ri]
			hd := handle{rec: int32(ri), file: int32(fi), event: -1, handler: -1}
			if ei, ok := c.eventIdx[h.EventID]; ok {
				hd.event = ei
			}
			if hi, ok := c.handlerIdx[h.Handler]; ok {
				hd.handler = hi
			}
			if !h.OK {
				c.r.Failures++
			}
			at, killed := c.killedAt[c.in.Files[fi].Name]
			switch {
			case killed && h.HandleNs > at:
				c.r.Unexpected++
				c.ex("unexpected: %s handled event %s (handler %s) after the fault plan killed it", c.in.Files[fi].Name, h.EventID, h.Handler)
				continue
			case hd.handler < 0:
				c.r.Unexpected++
				c.ex("unexpected: event %s handled by unknown handler %q (ok %v)", h.EventID, h.Handler, h.OK)
				continue
			case hd.event < 0:
				c.r.Unexpected++
				c.ex("unexpected: event %s (handler %s) was never published (ok %v)", h.EventID, h.Handler, h.OK)
				continue
			case h.OK && c.events[hd.event].poison:
				c.r.PoisonHandled++
				c.ex("poison handled: event %s handler %s succeeded (attempt %d), want dead-lettered", h.EventID, h.Handler, h.Attempt)
				continue
			}
			c.handles = append(c.handles, hd)
		}
	}
}

func (c *checker) rec(h *handle) *recordRef {
	return &recordRef{c.in.Files[h.file].Name, &c.in.Files[h.file].Handled[h.rec]}
}

// recordRef is a handle's record and the process that wrote it.
type recordRef struct {
	proc string
	h    *record.Handled
}
