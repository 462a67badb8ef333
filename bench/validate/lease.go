package validate

import (
	"cmp"
	"slices"
)

// leaseTokens checks the lease tokens the handles carry: one token of one
// delivery (event, handler) belongs to one claim, so it is run once, by
// one holder. A token recorded by two holders (a token issued twice: a
// claim lost in a database crash, whose lane came back at its old epoch)
// or run twice by the same holder is a violation in every cell, faults
// or not. Tokens are opaque and compared per delivery only (a lane
// lease's token lane:epoch:claims is shared by deliveries of one lane).
// Handles without a token or a holder (a worker of v0.2.1 or earlier)
// are counted and noted, never passed silently.
func (c *checker) leaseTokens() {
	type key struct {
		event, handler int32
		token          string
	}
	seen := make(map[key]int32, len(c.handles))
	for i := range c.handles {
		h := &c.handles[i]
		ref := c.rec(h)
		if ref.h.Token == "" || ref.h.Holder == "" {
			c.r.TokensUnchecked++
			continue
		}
		k := key{h.event, h.handler, ref.h.Token}
		first, ok := seen[k]
		if !ok {
			seen[k] = int32(i)
			continue
		}
		prev := c.rec(&c.handles[first])
		c.r.TokenConflicts++
		if prev.h.Holder != ref.h.Holder {
			c.ex("lease token: token %q of event %s handler %s held by two holders: %s (%s, attempt %d) and %s (%s, attempt %d)",
				ref.h.Token, ref.h.EventID, ref.h.Handler, prev.h.Holder, prev.proc, prev.h.Attempt, ref.h.Holder, ref.proc, ref.h.Attempt)
		} else {
			c.ex("lease token: token %q of event %s handler %s run twice by holder %s (attempts %d and %d)",
				ref.h.Token, ref.h.EventID, ref.h.Handler, ref.h.Holder, prev.h.Attempt, ref.h.Attempt)
		}
	}
	if c.r.TokensUnchecked > 0 {
		c.note("%d handles not checked for lease tokens: their records carry no token or holder (a worker older than the fields, or a peer without leases)", c.r.TokensUnchecked)
	}
}

// overlaps checks, per (handler, key), that no two handles of different
// sequences ran at the same time: the per-key rule lets a key's next
// delivery be claimed only once the one before it is no longer pending,
// so their [HandleNs, EndNs] intervals are disjoint, failed handles
// included. Only handles whose records carry EndNs are compared; the
// others are counted and noted.
func (c *checker) overlaps() {
	type span struct {
		handler, key int32
		start, end   int64
		seq          int64
		h            int32
	}
	var spans []span
	for i := range c.handles {
		h := &c.handles[i]
		e := &c.events[h.event]
		if e.key == "" {
			continue
		}
		rec := c.rec(h).h
		if rec.EndNs == 0 {
			c.r.OverlapUnchecked++
			continue
		}
		spans = append(spans, span{handler: h.handler, key: e.keyID, start: rec.HandleNs, end: rec.EndNs, seq: rec.Sequence, h: int32(i)})
	}
	if c.r.OverlapUnchecked > 0 {
		c.note("%d keyed handles not checked for overlap: their records carry no handler end (a worker older than the field)", c.r.OverlapUnchecked)
	}
	slices.SortFunc(spans, func(a, b span) int {
		return cmp.Or(cmp.Compare(a.handler, b.handler), cmp.Compare(a.key, b.key), cmp.Compare(a.start, b.start), cmp.Compare(a.h, b.h))
	})
	for i := 0; i < len(spans); {
		j := i
		for j < len(spans) && spans[j].handler == spans[i].handler && spans[j].key == spans[i].key {
			j++
		}
		// best is the span that ends last so far; other the one that ends
		// last among those of another sequence than best's.
		var best, other *span
		for k := i; k < j; k++ {
			x := &spans[k]
			var hit *span
			switch {
			case best != nil && best.seq != x.seq && best.end > x.start:
				hit = best
			case other != nil && other.seq != x.seq && other.end > x.start:
				hit = other
			}
			if hit != nil {
				c.r.OrderViolations++
				a, b := c.rec(&c.handles[hit.h]), c.rec(&c.handles[x.h])
				c.ex("order: handler %s key %q ran sequences %d (event %s, %s) and %d (event %s, %s) at once: the second started %d ns before the first ended",
					c.handlerNames[x.handler], c.events[c.handles[x.h].event].key, hit.seq, a.h.EventID, a.proc, x.seq, b.h.EventID, b.proc, hit.end-x.start)
			}
			switch {
			case best == nil || x.end > best.end:
				if best != nil && best.seq != x.seq {
					other = best
				}
				best = x
			case x.seq != best.seq && (other == nil || x.end > other.end):
				other = x
			}
		}
		i = j
	}
}
