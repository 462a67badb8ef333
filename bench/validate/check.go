package validate

import (
	"fmt"
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
