package validate

// Per delivery: its handles in handling order, the repeats and what
// explains them, the attempts and the budget.

import (
	"cmp"
	"slices"
)

// lostAttempt reports whether a fault cost the pair of these handles (in
// handling order) an attempt: a fault cell, and either an attempt number
// below the highest that has no handle, or a handle by a process the
// fault plan killed, made before the kill.
func (c *checker) lostAttempt(pair []int32) bool {
	if !c.in.Expect.AllowRedelivery {
		return false
	}
	seen := map[int]bool{}
	most := 0
	for _, k := range pair {
		h := &c.handles[k]
		f := &c.in.Files[h.file]
		rec := &f.Handled[h.rec]
		if at, ok := c.killedAt[f.Name]; ok && rec.HandleNs <= at {
			return true
		}
		seen[rec.Attempt] = true
		most = max(most, rec.Attempt)
	}
	for a := 1; a < most; a++ {
		if !seen[a] {
			return true
		}
	}
	return false
}

// explains reports whether a fault could make h's delivery run again:
// h was by a process the fault plan killed, before the kill, or it
// started within a lease of a database restart or crash. The order
// check uses it (a handle no fault explains is firm: its owner was alive
// and moved on); a repeat needs repeatOf too.
func (c *checker) explains(h *handle) bool {
	if !c.in.Expect.AllowRedelivery {
		return false
	}
	f := &c.in.Files[h.file]
	ns := f.Handled[h.rec].HandleNs
	if at, ok := c.killedAt[f.Name]; ok && ns <= at {
		return true
	}
	for i := range c.in.Expect.Faults {
		if ft := &c.in.Expect.Faults[i]; isDBFault(ft.Kind) && c.inReach(ft, ns) {
			return true
		}
	}
	return false
}

// isDBFault: a fault of the database server (a restart or a crash),
// which breaks every connection and can fail any call in flight.
func isDBFault(kind string) bool { return kind == FaultRestart || kind == FaultCrash }

// inReach: ns is within a lease of the database fault ft (from its start
// minus the lease to its end plus the lease): a handle that started then
// may have lost its claim, its completion or its lease to ft.
func (c *checker) inReach(ft *Fault, ns int64) bool {
	lease := c.in.Expect.Lease.Nanoseconds()
	return ns >= ft.StartNs-lease && ns <= ft.EndNs+lease
}

// repeatOf says whether a fault explains rep, a later handle of the same
// delivery, as a rerun of prev ("" when one does), or why none does:
//   - a kill explains it when prev was by the killed process, before the
//     kill, and rep starts after the kill with a higher attempt (a
//     takeover charges the attempt the kill cost);
//   - a database restart or crash explains it when prev started within
//     the fault's reach (inReach) and rep starts after the fault began
//     and after prev, with an attempt no lower than prev's (a restart
//     can fail a completion whose delivery is then released uncharged,
//     and a crash can lose the claim that charged an attempt).
func (c *checker) repeatOf(prev, rep *handle) string {
	if !c.in.Expect.AllowRedelivery {
		return "a cell without faults explains no repeat"
	}
	pf, rf := &c.in.Files[prev.file], &c.in.Files[rep.file]
	p, r := &pf.Handled[prev.rec], &rf.Handled[rep.rec]
	why := "no fault explains it"
	if at, ok := c.killedAt[pf.Name]; ok && p.HandleNs <= at {
		switch {
		case r.HandleNs <= c.killStart[pf.Name]:
			why = "the repeat started before the kill of " + pf.Name
		case r.Attempt <= p.Attempt:
			why = "the repeat carries no higher attempt than the handle it repeats"
		default:
			return ""
		}
	}
	for i := range c.in.Expect.Faults {
		ft := &c.in.Expect.Faults[i]
		if !isDBFault(ft.Kind) || !c.inReach(ft, p.HandleNs) {
			continue
		}
		switch {
		case r.HandleNs < ft.StartNs || r.HandleNs <= p.HandleNs:
			why = "the repeat started before the database " + ft.Kind + " began"
		case r.Attempt < p.Attempt:
			why = "the repeat carries a lower attempt than the handle it repeats"
		default:
			return ""
		}
	}
	return why
}

// pairs walks each (event, handler)'s handles in handling order: it
// counts ok handles, tells repeats from first handles, sorts repeats into
// redeliveries and duplicates, and checks the attempt budget.
func (c *checker) pairs() {
	in, r := c.in, c.r
	c.okCounts = make([]int32, len(c.events)*len(c.handlerNames))
	order := make([]int32, len(c.handles))
	for i := range order {
		order[i] = int32(i)
	}
	ns := func(i int32) int64 { h := &c.handles[i]; return in.Files[h.file].Handled[h.rec].HandleNs }
	slices.SortFunc(order, func(a, b int32) int {
		ha, hb := &c.handles[a], &c.handles[b]
		return cmp.Or(cmp.Compare(ha.event, hb.event), cmp.Compare(ha.handler, hb.handler), cmp.Compare(ns(a), ns(b)),
			cmp.Compare(ha.file, hb.file), cmp.Compare(ha.rec, hb.rec))
	})
	budget := in.Expect.MaxAttempts
	for i := 0; i < len(order); {
		j := i
		first := &c.handles[order[i]]
		for j < len(order) && c.handles[order[j]].event == first.event && c.handles[order[j]].handler == first.handler {
			j++
		}
		// A fault can cost an attempt of this pair that left no handle
		// (its process was killed before recording it) or a failed handle
		// whose final write never committed. A lane-lease store charges
		// that lost attempt at the takeover and, when the delivery was not
		// yet a suspect, gives it one more attempt, alone, even at its
		// budget (docs/lane-protocol.md, Claim step 3: a delivery merely in
		// flight beside the crasher is not buried for it). So in a fault
		// cell a pair whose attempt was lost may run budget + 1 times.
		allow := budget
		if budget > 0 && c.lostAttempt(order[i:j]) {
			allow = budget + 1
			c.lostPairs[[2]int32{first.event, first.handler}] = true
		}
		var lastOK *handle
		failed := 0
		c.attempts(order[i:j])
		c.retries(order[i:j])
		for _, k := range order[i:j] {
			h := &c.handles[k]
			rec := c.rec(h)
			h.explained = c.explains(h)
			if lastOK != nil {
				h.repeat = true
				if why := c.repeatOf(lastOK, h); why == "" {
					r.Redeliveries++
				} else {
					r.Duplicates++
					prev := c.rec(lastOK)
					c.ex("duplicate: event %s handler %s ran again (%s, attempt %d, ok %v) after an ok handle by %s (attempt %d): %s",
						rec.h.EventID, rec.h.Handler, rec.proc, rec.h.Attempt, rec.h.OK, prev.proc, prev.h.Attempt, why)
				}
			}
			if budget > 0 && rec.h.Attempt > allow {
				r.OverBudget++
				c.ex("over budget: event %s handler %s ran attempt %d, the budget is %d", rec.h.EventID, rec.h.Handler, rec.h.Attempt, budget)
			}
			if rec.h.OK {
				c.okCounts[c.events[h.event].countsIdx+int(h.handler)]++
				lastOK = h
			} else {
				failed++
			}
		}
		if failed > 0 {
			c.failedPairs[[2]int32{first.event, first.handler}] = order[i:j]
		}
		if budget > 0 && failed > allow {
			h := c.rec(first)
			r.OverBudget++
			c.ex("over budget: event %s handler %s failed %d times, the budget is %d attempts", h.h.EventID, h.h.Handler, failed, budget)
		}
		i = j
	}
	// An event recorded only as uncertain exists if any handler ran it,
	// ok or not: a failed handle proves it was committed too.
	ran := make([]bool, len(c.events))
	for i := range c.handles {
		ran[c.handles[i].event] = true
	}
	for i := range c.events {
		if e := &c.events[i]; !e.certain && ran[i] {
			e.certain = true
			r.UncertainHandled++
		}
	}
	for i := range c.events {
		e := &c.events[i]
		switch {
		case !e.certain:
			r.Uncertain++
		case !e.poison:
			r.Expected += int64(len(c.handlerNames))
		}
	}
}

// attempts checks the attempt numbers of one (event, handler)'s handles,
// in handling order: each attempt is run once, across every process
// (unless a database restart or crash explains running it again: the
// repeated run started within its reach and the rerun after it began,
// since a crash can lose the claim that charged it and a restart can
// release a delivery uncharged), attempts never go back, and outside
// fault cells they have no gaps (1, 2, 3, ...: no fault can lose one).
func (c *checker) attempts(pair []int32) {
	r := c.r
	last, most := 0, 0
	var byAttempt map[int]int32 // for long pairs only: short ones scan
	if len(pair) > 16 {
		byAttempt = make(map[int]int32, len(pair))
	}
	for n, k := range pair {
		h := &c.handles[k]
		rec := c.rec(h)
		a := rec.h.Attempt
		earlier := pair[:n]
		if byAttempt != nil {
			earlier = nil
			if e, ok := byAttempt[a]; ok {
				earlier = []int32{e}
			} else {
				byAttempt[a] = k
			}
		}
		// The first earlier handle of the same attempt.
		for _, e := range earlier {
			if c.rec(&c.handles[e]).h.Attempt != a {
				continue
			}
			if !c.dbRerun(&c.handles[e], h) {
				prev := c.rec(&c.handles[e])
				r.AttemptViolations++
				c.ex("attempts: event %s handler %s ran attempt %d twice (%s, ok %v, and %s, ok %v) and no database fault explains it",
					rec.h.EventID, rec.h.Handler, a, prev.proc, prev.h.OK, rec.proc, rec.h.OK)
			}
			break
		}
		switch {
		case a < most:
			r.AttemptViolations++
			c.ex("attempts: event %s handler %s ran attempt %d (%s) after attempt %d", rec.h.EventID, rec.h.Handler, a, rec.proc, most)
		case !c.in.Expect.AllowRedelivery && a > last+1 && (n == 0 || a != last):
			r.AttemptViolations++
			c.ex("attempts: event %s handler %s ran attempt %d (%s) with no attempt %d recorded, outside a fault cell",
				rec.h.EventID, rec.h.Handler, a, rec.proc, last+1)
		}
		last, most = a, max(most, a)
	}
}

// dbRerun: a database restart or crash explains running first's attempt
// again as h: first started within the fault's reach, h after the fault
// began.
func (c *checker) dbRerun(first, h *handle) bool {
	if !c.in.Expect.AllowRedelivery {
		return false
	}
	p, r := c.rec(first).h, c.rec(h).h
	for i := range c.in.Expect.Faults {
		if ft := &c.in.Expect.Faults[i]; isDBFault(ft.Kind) && c.inReach(ft, p.HandleNs) && r.HandleNs >= ft.StartNs && r.HandleNs > p.HandleNs {
			return true
		}
	}
	return false
}
