package validate

// Causality per event and process, and each key's sequences.

import (
	"cmp"
	"slices"
	"time"
)

// causality checks every handle against its event's publish call and
// its own end, per process: a handler cannot start before the call that
// published its event started (a dispatcher whose clock is behind shows
// so), nor end before it started. Records without call starts or ends
// skip the part that needs them.
func (c *checker) causality() {
	type lag struct {
		n     int64
		worst int64
		at    int32 // the handle that lags most
	}
	behind := map[int32]*lag{} // per file
	for i := range c.handles {
		h := &c.handles[i]
		e := &c.events[h.event]
		ref := c.rec(h)
		if ref.h.EndNs != 0 && ref.h.EndNs < ref.h.HandleNs {
			c.r.CausalityViolations++
			c.ex("causality: %s's handle of event %s handler %s ended %d ns before it started", ref.proc, ref.h.EventID, ref.h.Handler, ref.h.HandleNs-ref.h.EndNs)
		}
		if e.firstCall == 0 {
			c.r.CausalityUnchecked++
			continue
		}
		if ref.h.HandleNs >= e.firstCall {
			continue
		}
		c.r.CausalityViolations++
		l := behind[h.file]
		if l == nil {
			l = &lag{}
			behind[h.file] = l
		}
		l.n++
		if d := e.firstCall - ref.h.HandleNs; d > l.worst {
			l.worst, l.at = d, int32(i)
		}
	}
	if c.r.CausalityUnchecked > 0 {
		c.note("%d handles not checked for causality (a handle after its publish call's start): their events' publish records carry no call start (a worker older than the field)", c.r.CausalityUnchecked)
	}
	for fi := range c.in.Files {
		l := behind[int32(fi)]
		if l == nil {
			continue
		}
		ref := c.rec(&c.handles[l.at])
		c.ex("causality: %s started %d handles before their events' publish calls started, by up to %v (event %s handler %s): its clock is behind or the records are not its own",
			c.in.Files[fi].Name, l.n, time.Duration(l.worst), ref.h.EventID, ref.h.Handler)
	}
}

// keysAndSequences checks every handle's key against the publisher's
// and gives each keyed event one sequence, owned by it alone.
func (c *checker) keysAndSequences() {
	r := c.r
	for i := range c.handles {
		h := &c.handles[i]
		e := &c.events[h.event]
		rec := c.rec(h).h
		if rec.Key != e.key {
			r.KeyMismatches++
			c.ex("key mismatch: event %s published with key %q, handler %s reports %q", e.id, e.key, rec.Handler, rec.Key)
		}
		if c.in.Expect.NoKeyOrder || e.key == "" || rec.Sequence <= 0 {
			continue // order() flags a keyed handle without a sequence
		}
		switch {
		case e.seq == 0:
			e.seq = rec.Sequence
		case e.seq != rec.Sequence:
			r.SequenceConflicts++
			c.ex("sequence conflict: event %s handled with sequences %d and %d", e.id, e.seq, rec.Sequence)
		}
	}
	type keySeq struct {
		key string
		seq int64
	}
	c.sequenceGaps()
	owner := make(map[keySeq]int32, len(c.events))
	for i := range c.events {
		e := &c.events[i]
		if e.key == "" || e.seq == 0 {
			continue
		}
		k := keySeq{e.key, e.seq}
		if o, ok := owner[k]; ok {
			r.SequenceConflicts++
			c.ex("sequence conflict: events %s and %s both hold sequence %d of key %q", c.events[o].id, e.id, e.seq, e.key)
			continue
		}
		owner[k] = int32(i)
	}
}

// sequenceGaps checks that each key's sequences, as its events' handles
// report them, run 1, 2, 3, ... without a gap: a key's counter is taken
// in the publishing transaction, so a missing sequence is an event that
// committed and that no handle of any process recorded (one the
// publisher did not record either, or lost), not a rolled-back call.
// (The highest sequences of a key are seen only where something handled
// them; keyStates holds them against the store's per-key counters, which
// show a lost tail.)
func (c *checker) sequenceGaps() {
	if c.in.Expect.NoKeyOrder {
		return
	}
	type keySeq struct {
		key int32
		seq int64
	}
	var ks []keySeq
	// unknown: per key, events whose sequence no handle reported (a
	// lost event, or one whose every handle a killed process never
	// wrote): each may hold one missing sequence.
	unknown := make([]int64, len(c.keyIDs))
	for i := range c.events {
		e := &c.events[i]
		switch {
		case e.key == "":
		case e.seq > 0:
			ks = append(ks, keySeq{e.keyID, e.seq})
		default:
			unknown[e.keyID]++
		}
	}
	slices.SortFunc(ks, func(a, b keySeq) int { return cmp.Or(cmp.Compare(a.key, b.key), cmp.Compare(a.seq, b.seq)) })
	names := make([]string, len(c.keyIDs))
	for k, id := range c.keyIDs {
		names[id] = k
	}
	for i := 0; i < len(ks); {
		j := i
		var missing, firstPrev, firstSeq int64
		prev := int64(0)
		for ; j < len(ks) && ks[j].key == ks[i].key; j++ {
			if x := ks[j].seq; x > prev+1 {
				if missing == 0 {
					firstPrev, firstSeq = prev, x
				}
				missing += x - prev - 1
			}
			prev = ks[j].seq
		}
		if missing > unknown[ks[i].key] {
			c.r.SequenceGaps++
			c.ex("sequence gap: key %q has sequence %d after %d: %d sequences below %d were never handled, and %d events of the key could hold them (an event nobody recorded, or lost)",
				names[ks[i].key], firstSeq, firstPrev, missing, prev, unknown[ks[i].key])
		}
		i = j
	}
}
