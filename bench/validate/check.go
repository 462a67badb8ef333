package validate

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/berkcansavur/relaybus/bench/record"
)

// event is what the published records and the handles say about one
// event.
type event struct {
	id  string
	key string // the publisher's key
	// keyID numbers the distinct keys (-1: unkeyed), so that sorting by
	// key compares integers.
	keyID int32
	// certain: a record whose commit returned for sure, or an ok handle
	// that proves the event exists.
	certain bool
	poison  bool
	// seq is the sequence the handles report (0: none yet).
	seq int64
	// callStart and commit of the first certain record (0: no call start
	// recorded).
	callStart, commit int64
	// firstCall: the earliest call start of any of its records (0: none
	// recorded).
	firstCall int64
	countsIdx int // first of len(handlers) entries in okCounts
}

// handle is one handled record with what the checker learns about it.
type handle struct {
	rec     int32 // index in its file's Handled
	file    int32
	event   int32 // index in checker.events; -1: never published
	handler int32 // index in checker.handlerNames; -1: unknown handler
	// repeat: a handle of its pair after an ok handle of it; explained:
	// a fault explains a repeat of this handle.
	repeat, explained bool
}

type checker struct {
	in           *Input
	r            *Result
	handlerIdx   map[string]int32
	handlerNames []string
	eventIdx     map[string]int32
	events       []event
	handles      []handle
	okCounts     []int32 // okCounts[event.countsIdx+handler]
	// killedAt: per killed process, when its kill was done (Fault.EndNs:
	// it ran nothing later); killStart: when the kill began (StartNs: no
	// rerun of its work can start before)
	killedAt, killStart map[string]int64
	// lostPairs: the (event, handler) pairs a fault cost an attempt (lostAttempt)
	lostPairs map[[2]int32]bool
	// failedPairs: per (event, handler) with a failed handle, its
	// handles in handling order
	failedPairs map[[2]int32][]int32
	// retrying: per keyed delivery, the times between a failed handle
	// and the next handle of it (headOfLine)
	retrying []retry
	dead     map[[2]string]bool
	keyIDs   map[string]int32
}

func newChecker(in *Input) *checker {
	return &checker{in: in, r: &Result{}}
}

func (c *checker) ex(format string, args ...any) {
	if len(c.r.Examples) < MaxExamples {
		c.r.Examples = append(c.r.Examples, fmt.Sprintf(format, args...))
	}
}

func (c *checker) note(format string, args ...any) {
	if len(c.r.Notes) < MaxExamples {
		c.r.Notes = append(c.r.Notes, fmt.Sprintf(format, args...))
	}
}

func (c *checker) check() *Result {
	r, in := c.r, c.in
	var nPub, nHandled int
	for i := range in.Files {
		nPub += len(in.Files[i].Published)
		nHandled += len(in.Files[i].Handled)
	}
	if nPub > MaxRecords || nHandled > MaxRecords {
		r.TooLarge = true
		c.ex("too large: %d handled and %d published records, the limit is %d each", nHandled, nPub, MaxRecords)
		return r
	}
	if len(in.Handlers) == 0 {
		r.NoHandlers = true
		c.ex("no handlers: the window's handler list is unknown (no manifest and no --handlers), so a handler missing from every record would pass")
	}
	c.handlerIdx = make(map[string]int32, len(in.Handlers))
	for _, h := range in.Handlers {
		if _, dup := c.handlerIdx[h]; !dup {
			c.handlerIdx[h] = int32(len(c.handlerNames))
			c.handlerNames = append(c.handlerNames, h)
		}
	}
	c.killedAt = map[string]int64{}
	c.killStart = map[string]int64{}
	c.lostPairs = map[[2]int32]bool{}
	c.failedPairs = map[[2]int32][]int32{}
	for _, f := range in.Expect.Faults {
		if f.Kind == FaultKill {
			c.killedAt[f.Process] = f.EndNs
			c.killStart[f.Process] = f.StartNs
		}
	}
	c.readEvents(nPub)
	c.readHandles(nHandled)
	c.pairs()
	c.keysAndSequences()
	c.keyStates()
	c.causality()
	c.deadLetters()
	c.lost()
	c.unexplained()
	c.leaseTokens()
	c.completions()
	if in.Expect.NoKeyOrder {
		c.skipOrder()
	} else {
		c.order()
		c.headOfLine()
		c.overlaps()
		c.commitOrder()
	}
	c.window()
	c.processes()

	r.Pending, r.Processing = in.Final.Pending, in.Final.Processing
	if r.Pending != 0 || r.Processing != 0 {
		c.ex("left after drain: %d pending, %d processing", r.Pending, r.Processing)
	}
	switch {
	case in.PublishErrors <= 0:
	case !in.Expect.AllowPublishErrors:
		r.PublishErrors = in.PublishErrors
		c.ex("publish errors: %d publish calls failed in a cell without faults", in.PublishErrors)
	case !c.dbFault():
		r.PublishErrors = in.PublishErrors
		c.ex("publish errors: %d publish calls failed in a cell whose faults (no database restart or crash) cannot fail a publish", in.PublishErrors)
	default:
		r.PublishErrorsAllowed = in.PublishErrors
	}
	for _, f := range in.Files {
		if _, killed := c.killedAt[f.Name]; f.TruncatedTail && !killed {
			r.TruncatedFiles++
			c.ex("truncated: the record file of %s ends in a partial line, and the fault plan did not kill it", f.Name)
		}
	}
	r.Valid = true
	for _, v := range r.violations() {
		if v.v != 0 {
			r.Valid = false
		}
	}
	return r
}

// unexplained flags what only a planted fault or failure may cause:
// publishes whose outcome is unknown (only a database restart or crash
// can leave one), and failed handles of events the workload did not plant
// to fail (poison, or an attempt within Expect.FailFirst) that started
// outside every database fault's reach.
func (c *checker) unexplained() {
	if !c.dbFault() {
		n := int64(0)
		for fi := range c.in.Files {
			for _, p := range c.in.Files[fi].Published {
				if p.Uncertain {
					n++
				}
			}
		}
		if n > 0 {
			c.r.UncertainUnexplained = n
			c.ex("uncertain commits: %d publish calls did not learn their commit's outcome in a cell without a database restart or crash", n)
		}
	}
	type perProc struct {
		n     int64
		first int32
	}
	procs := map[int32]*perProc{}
	for i := range c.handles {
		h := &c.handles[i]
		rec := c.rec(h).h
		if rec.OK || c.events[h.event].poison || rec.Attempt <= c.in.Expect.FailFirst {
			continue
		}
		explained := false
		for fi := range c.in.Expect.Faults {
			if ft := &c.in.Expect.Faults[fi]; c.in.Expect.AllowRedelivery && isDBFault(ft.Kind) && c.inReach(ft, rec.HandleNs) {
				explained = true
				break
			}
		}
		if explained {
			continue
		}
		c.r.FailuresUnexplained++
		p := procs[h.file]
		if p == nil {
			p = &perProc{first: int32(i)}
			procs[h.file] = p
		}
		p.n++
	}
	for fi := range c.in.Files {
		if p := procs[int32(fi)]; p != nil {
			ref := c.rec(&c.handles[p.first])
			c.ex("unplanned failures: %s failed %d handles that no poison, planned failure or database fault explains (first: event %s handler %s attempt %d)",
				ref.proc, p.n, ref.h.EventID, ref.h.Handler, ref.h.Attempt)
		}
	}
}

// dbFault: the window's faults include a database restart or crash.
func (c *checker) dbFault() bool {
	for _, f := range c.in.Expect.Faults {
		if isDBFault(f.Kind) {
			return true
		}
	}
	return false
}

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

// recordRef is a handle's record and the process that wrote it.
type recordRef struct {
	proc string
	h    *record.Handled
}

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

// deadLetters compares the store's dead letters with the planted poison,
// deduplicated and in the store's order so the examples are
// deterministic, and checks their attempts against the budget.
func (c *checker) deadLetters() {
	in, r := c.in, c.r
	dead := make(map[[2]string]bool, len(in.Final.DeadLetters))
	for _, dl := range in.Final.DeadLetters {
		d := [2]string{dl.EventID, dl.Handler}
		if dead[d] {
			continue
		}
		dead[d] = true
		ei, known := c.eventIdx[dl.EventID]
		_, knownHandler := c.handlerIdx[dl.Handler]
		if !known || !knownHandler || !c.events[ei].poison {
			r.DeadUnexpected++
			c.ex("dead unexpected: event %s handler %s is dead-lettered but was not planted as poison", dl.EventID, dl.Handler)
		}
		pair := [2]int32{ei, c.handlerIdx[dl.Handler]}
		lost := known && knownHandler && c.lostPairs[pair]
		if known && knownHandler {
			c.deadAgainstRecords(dl, c.failedPairs[pair])
		}
		if b := in.Expect.MaxAttempts; b > 0 && dl.Attempts != b && !(lost && dl.Attempts == b+1) {
			r.OverBudget++
			c.ex("over budget: dead letter %s handler %s has %d attempts, the budget is %d", dl.EventID, dl.Handler, dl.Attempts, b)
		}
	}
	if !in.Final.DeadLettersTruncated && in.Final.Dead > int64(len(dead)) {
		r.DeadUnexpected += in.Final.Dead - int64(len(dead))
		c.ex("dead unexpected: the store counts %d dead deliveries but lists %d", in.Final.Dead, len(dead))
	}
	if in.Final.Dead < int64(len(dead)) {
		r.DeadLetterMismatches++
		c.ex("dead letters: the store counts %d dead deliveries but lists %d", in.Final.Dead, len(dead))
	}
	if in.Final.DeadLettersTruncated {
		r.DeadLettersUnverified = true
		c.ex("dead letters truncated: the store listed only part of its %d dead deliveries", in.Final.Dead)
	}
	c.dead = dead
}

// deadAgainstRecords checks a dead letter's attempts against the handles
// recorded for its delivery (pair, in handling order): no attempt failed
// on record beyond its count, and every attempt it counts failed on
// record, except in a fault cell the ones a fault explains: an attempt a
// killed process ran before its kill (its last records may never have
// been written, and the attempt in flight is charged at the takeover),
// which is any attempt below the lowest one recorded after the kill, and
// one more per database restart or crash.
func (c *checker) deadAgainstRecords(dl DeadLetter, pair []int32) {
	if dl.Attempts <= 0 {
		return
	}
	recorded := make([]bool, dl.Attempts+1)
	most := 0
	for _, k := range pair {
		if rec := c.rec(&c.handles[k]).h; !rec.OK {
			most = max(most, rec.Attempt)
			if rec.Attempt >= 1 && rec.Attempt <= dl.Attempts {
				recorded[rec.Attempt] = true
			}
		}
	}
	if most > dl.Attempts {
		c.r.DeadLetterMismatches++
		c.ex("dead letters: %s handler %s is dead with %d attempts, but attempt %d failed on record", dl.EventID, dl.Handler, dl.Attempts, most)
		return
	}
	// killedBelow: attempts below it may have been run by a killed
	// process, unrecorded.
	killedBelow, spare := 0, 0
	if c.in.Expect.AllowRedelivery {
		for _, f := range c.in.Expect.Faults {
			if isDBFault(f.Kind) {
				spare++
				continue
			}
			low := dl.Attempts + 1 // the lowest attempt recorded after the kill
			for _, k := range pair {
				if rec := c.rec(&c.handles[k]).h; rec.HandleNs > f.EndNs {
					low = min(low, rec.Attempt)
				}
			}
			killedBelow = max(killedBelow, low)
		}
	}
	missing := 0
	for a := 1; a <= dl.Attempts; a++ {
		if !recorded[a] && a >= killedBelow {
			missing++
		}
	}
	if missing > spare {
		n := 0
		for _, r := range recorded {
			if r {
				n++
			}
		}
		c.r.DeadLetterMismatches++
		c.ex("dead letters: %s handler %s is dead with %d attempts, but the records show %d failed attempts and no fault explains %d of the others",
			dl.EventID, dl.Handler, dl.Attempts, n, missing-spare)
	}
}

// lost counts, per (event, handler), what was handled, lost or dead as
// planted.
func (c *checker) lost() {
	r := c.r
	for i := range c.events {
		e := &c.events[i]
		for hi, name := range c.handlerNames {
			if c.okCounts[e.countsIdx+hi] > 0 {
				r.HandledOK++
				continue
			}
			isDead := c.dead[[2]string{e.id, name}]
			switch {
			case e.poison && isDead:
				r.DeadExpected++
			case e.poison && e.certain:
				r.LostPoison++
				c.ex("lost poison: event %s handler %s neither handled nor dead-lettered", e.id, name)
			case e.poison, !e.certain, isDead:
				// An uncertain event may or may not exist; a dead
				// non-poison pair is already counted as dead unexpected.
			default:
				r.Lost++
				c.ex("lost: event %s handler %s was published but never handled ok", e.id, name)
			}
		}
	}
}

// window flags a run that published nothing, or whose measured window
// saw no commit and no handle.
func (c *checker) window() {
	if c.r.Published == 0 {
		c.r.Empty = true
		c.ex("empty: no event was published")
	}
	w := c.in.Expect.Window
	if w == nil {
		return
	}
	inside := func(ns int64) bool { return ns >= w.StartNs && ns < w.EndNs }
	for i := range c.events {
		if e := &c.events[i]; e.commit != 0 && inside(e.commit) {
			return
		}
	}
	for _, f := range c.in.Files {
		for _, h := range f.Handled {
			if h.OK && inside(h.HandleNs) {
				return
			}
		}
	}
	c.r.Idle = true
	c.ex("idle: no event was committed and no delivery handled inside the measured window")
}
