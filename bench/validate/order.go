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
// (ties by line position); see the package documentation for the rules.
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
	// Ties in time go by line position (the handle index follows the
	// files and their lines), never by sequence: a frozen clock must not
	// hide a reversed order.
	slices.SortFunc(keyed, func(a, b keyedHandle) int {
		return cmp.Or(cmp.Compare(a.handler, b.handler), cmp.Compare(a.key, b.key),
			cmp.Compare(a.handleNs, b.handleNs), cmp.Compare(a.h, b.h))
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

// retry is the time a keyed delivery was retrying: from a failed handle
// of it (at from) to its next handle (at to).
type retry struct {
	handler, key int32
	seq          int64
	from, to     int64
	h            int32 // the failed handle
}

// retries collects the retry spans of one keyed (event, handler)'s
// handles, in handling order.
func (c *checker) retries(pair []int32) {
	for n := 0; n+1 < len(pair); n++ {
		h := &c.handles[pair[n]]
		e := &c.events[h.event]
		rec := c.rec(h).h
		if e.key == "" || rec.OK {
			continue
		}
		next := c.rec(&c.handles[pair[n+1]]).h
		c.retrying = append(c.retrying, retry{handler: h.handler, key: e.keyID, seq: rec.Sequence, from: rec.HandleNs, to: next.HandleNs, h: pair[n]})
	}
}

// headOfLine checks that no later sequence of a (handler, key) was
// handled ok while an earlier one was retrying: a failed delivery stays
// pending until its next attempt, and a pending delivery is the head of
// its key (or a repeat of a later sequence's head that a live owner
// already passed, which order flags).
func (c *checker) headOfLine() {
	if len(c.retrying) == 0 {
		return
	}
	type okHandle struct {
		handler, key int32
		ns, seq      int64
		h            int32
	}
	var oks []okHandle
	for i := range c.handles {
		h := &c.handles[i]
		e := &c.events[h.event]
		if rec := c.rec(h).h; rec.OK && e.key != "" {
			oks = append(oks, okHandle{h.handler, e.keyID, rec.HandleNs, rec.Sequence, int32(i)})
		}
	}
	slices.SortFunc(oks, func(a, b okHandle) int {
		return cmp.Or(cmp.Compare(a.handler, b.handler), cmp.Compare(a.key, b.key), cmp.Compare(a.ns, b.ns), cmp.Compare(a.h, b.h))
	})
	flagged := map[int32]bool{}
	for _, rt := range c.retrying {
		lo, _ := slices.BinarySearchFunc(oks, rt, func(o okHandle, t retry) int {
			return cmp.Or(cmp.Compare(o.handler, t.handler), cmp.Compare(o.key, t.key), cmp.Compare(o.ns, t.from+1))
		})
		for k := lo; k < len(oks) && oks[k].handler == rt.handler && oks[k].key == rt.key && oks[k].ns < rt.to; k++ {
			if o := &oks[k]; o.seq > rt.seq && !flagged[o.h] {
				flagged[o.h] = true
				c.r.OrderViolations++
				failed, ok := c.rec(&c.handles[rt.h]), c.rec(&c.handles[o.h])
				c.ex("order: handler %s key %q handled sequence %d (event %s, %s) ok while sequence %d (event %s) was retrying: head of line skipped (it failed attempt %d on %s)",
					c.handlerNames[rt.handler], c.events[c.handles[rt.h].event].key, o.seq, ok.h.EventID, ok.proc, rt.seq, failed.h.EventID, failed.h.Attempt, failed.proc)
			}
		}
	}
}
