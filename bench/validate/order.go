package validate

import (
	"cmp"
	"slices"
)

// keyedHandle is one ok handle of a keyed delivery, compact for sorting.
type keyedHandle struct {
	handler  int32
	key      int32 // the publisher's key's event.keyID
	h        int32 // index in checker.handles
	handleNs int64
	seq      int64 // the handle's
}

// skipOrder stands in for order and commitOrder on a side that keeps no
// per-key order: it counts the keyed ok handles they would have checked
// and says so in a note.
func (c *checker) skipOrder() {
	for i := range c.handles {
		h := &c.handles[i]
		if c.rec(h).h.OK && c.events[h.event].key != "" {
			c.r.KeyOrderSkipped++
		}
	}
	if c.r.KeyOrderSkipped > 0 {
		c.note("per-key order not checked for %d keyed handles: the side keeps no per-key order (no-key-order)", c.r.KeyOrderSkipped)
	}
}

// order checks, per (handler, key), the ok handles in handling order
// (ties by sequence); see the package documentation for the rules.
func (c *checker) order() {
	keyed := make([]keyedHandle, 0, len(c.handles))
	for i := range c.handles {
		h := &c.handles[i]
		e := &c.events[h.event]
		rec := c.rec(h).h
		if !rec.OK || e.key == "" {
			continue
		}
		keyed = append(keyed, keyedHandle{handler: h.handler, key: e.keyID, handleNs: rec.HandleNs, seq: rec.Sequence, h: int32(i)})
	}
	slices.SortFunc(keyed, func(a, b keyedHandle) int {
		return cmp.Or(cmp.Compare(a.handler, b.handler), cmp.Compare(a.key, b.key),
			cmp.Compare(a.handleNs, b.handleNs), cmp.Compare(a.seq, b.seq))
	})
	allow := c.in.Expect.AllowRedelivery
	for i := 0; i < len(keyed); {
		j := i
		for j < len(keyed) && keyed[j].handler == keyed[i].handler && keyed[j].key == keyed[i].key {
			j++
		}
		var (
			maxFirst      int64  // highest sequence with a first ok handle so far
			maxFirstEvent string // its event
			// maxFirm is the highest sequence handled by a handle no fault
			// explains: the owner that handled it was alive and moved on.
			maxFirm int64
			// The previous handle, when it was a repeat: a replay continues
			// in order within one process.
			replaying  bool
			replayFile int32
			replaySeq  int64
		)
		for _, k := range keyed[i:j] {
			h := &c.handles[k.h]
			ref := c.rec(h)
			name, key := c.handlerNames[k.handler], c.events[h.event].key
			switch {
			case k.seq <= 0:
				c.r.OrderViolations++
				c.ex("order: event %s handler %s key %q has sequence %d, want > 0", ref.h.EventID, name, key, k.seq)
			case !h.repeat:
				if k.seq <= maxFirst {
					c.r.OrderViolations++
					c.ex("order: handler %s key %q handled sequence %d (event %s) after sequence %d (event %s)",
						name, key, k.seq, ref.h.EventID, maxFirst, maxFirstEvent)
				} else {
					maxFirst, maxFirstEvent = k.seq, ref.h.EventID
				}
				replaying = false
			case !allow:
				c.r.OrderViolations++
				c.ex("order: handler %s key %q ran sequence %d (event %s) again after it was handled", name, key, k.seq, ref.h.EventID)
			case maxFirm > k.seq:
				c.r.OrderViolations++
				c.ex("order: handler %s key %q ran sequence %d (event %s) again after sequence %d, which a live owner had handled",
					name, key, k.seq, ref.h.EventID, maxFirm)
			case replaying && replayFile == h.file && k.seq <= replaySeq:
				c.r.OrderViolations++
				c.ex("order: %s replayed handler %s key %q out of order: sequence %d after %d", ref.proc, name, key, k.seq, replaySeq)
			default:
				replaying, replayFile, replaySeq = true, h.file, k.seq
			}
			if !h.explained && k.seq > maxFirm {
				maxFirm = k.seq
			}
		}
		i = j
	}
}

// commitOrder checks per key that two commits that did not overlap in
// time got increasing sequences: if one call's commit returned before
// another call started, the key's counter row was already committed, so
// the later call must take a higher sequence.
func (c *checker) commitOrder() {
	type commit struct {
		key        int32 // event.keyID
		event      int32
		start, end int64
		seq        int64
	}
	var cs []commit
	for i := range c.events {
		e := &c.events[i]
		if e.key == "" || e.seq == 0 || !e.certain || e.commit == 0 {
			continue
		}
		if e.callStart == 0 {
			c.r.CommitOrderSkipped++
			continue
		}
		cs = append(cs, commit{key: e.keyID, start: e.callStart, end: e.commit, seq: e.seq, event: int32(i)})
	}
	c.r.CommitOrderChecked = int64(len(cs))
	if c.r.CommitOrderSkipped > 0 {
		c.note("commit order not checked for %d keyed events: their publisher records carry no call start (a worker older than the field)", c.r.CommitOrderSkipped)
	}
	slices.SortFunc(cs, func(a, b commit) int { return cmp.Or(cmp.Compare(a.key, b.key), cmp.Compare(a.start, b.start)) })
	for i := 0; i < len(cs); {
		j := i
		for j < len(cs) && cs[j].key == cs[i].key {
			j++
		}
		byStart := cs[i:j]
		byEnd := slices.Clone(byStart)
		slices.SortFunc(byEnd, func(a, b commit) int { return cmp.Compare(a.end, b.end) })
		// Sweep the calls in start order; done holds every call that
		// returned before the current one started.
		var maxSeq int64
		var maxEvent int32
		d := 0
		for _, x := range byStart {
			for d < len(byEnd) && byEnd[d].end < x.start {
				if byEnd[d].seq > maxSeq {
					maxSeq, maxEvent = byEnd[d].seq, byEnd[d].event
				}
				d++
			}
			if maxSeq >= x.seq {
				c.r.CommitOrderViolations++
				c.ex("commit order: key %q: event %s (sequence %d) committed before event %s (sequence %d) started",
					c.events[x.event].key, c.events[maxEvent].id, maxSeq, c.events[x.event].id, x.seq)
			}
		}
		i = j
	}
}
