package validate

import "github.com/berkcansavur/relaybus/bench/protocol"

// completions checks the completion lines (record.Completed) that the
// dispatchers listed with Process.CompletionRecords wrote, against the
// handles of every process:
//   - a completion names an ok handle in its own file (same event,
//     handler, attempt and lease token: the claim the process ran), and
//     comes after that handle ended;
//   - a delivery is completed at most once, whoever completed it;
//   - no handle of a delivery starts after its completion: a confirmed
//     completion removed the delivery, so no claim can return it again,
//     whatever fault the cell planted;
//   - no handle of a higher attempt started before the completion: a
//     later claim had taken the delivery over, so the store accepted a
//     completion under a superseded lease (a fencing failure);
//   - a dispatcher that exited with its done line wrote one completion
//     line for each completion it counted (Counters.Completed; a killed
//     process may lose its last lines, which it writes after the store
//     answered);
//   - in a cell without faults whose every dispatcher writes them, every
//     delivery handled ok was completed.
//
// Dispatchers without completion records (a worker older than the
// capability, a peer) are noted as not checked for completions.
func (c *checker) completions() {
	in, r := c.in, c.r
	writes := map[string]bool{}
	dispatchers, unchecked := 0, 0
	for i := range in.Processes {
		p := &in.Processes[i]
		if p.Role != protocol.RoleDispatcher {
			continue
		}
		dispatchers++
		if p.CompletionRecords {
			writes[p.Name] = true
		} else {
			unchecked++
		}
	}
	if dispatchers == 0 {
		// No process list (processes notes it) or no dispatcher.
		return
	}
	if unchecked > 0 {
		c.note("%d of %d dispatchers not checked for completions: their workers write no completion records (older than the field, or a peer)", unchecked, dispatchers)
	}
	if len(writes) == 0 {
		return
	}
	type claim struct {
		file, event, handler int32
		attempt              int
		token                string
	}
	okHandle := map[claim]int32{}
	for i := range c.handles {
		h := &c.handles[i]
		rec := c.rec(h).h
		if rec.OK && writes[in.Files[h.file].Name] {
			okHandle[claim{h.file, h.event, h.handler, rec.Attempt, rec.Token}] = int32(i)
		}
	}
	completed := map[[2]int32]completion{}
	for fi := range in.Files {
		f := &in.Files[fi]
		if len(f.Completed) > 0 && !writes[f.Name] {
			r.CompletionViolations++
			c.ex("completion: %s wrote %d completion lines, but the manifest does not list it as a dispatcher that writes them", f.Name, len(f.Completed))
			continue
		}
		for ci := range f.Completed {
			cr := &f.Completed[ci]
			ei, okE := c.eventIdx[cr.EventID]
			hi, okH := c.handlerIdx[cr.Handler]
			if !okE || !okH {
				r.CompletionViolations++
				c.ex("completion: %s completed event %s handler %s, which no publish record or handler list names", f.Name, cr.EventID, cr.Handler)
				continue
			}
			k, ok := okHandle[claim{int32(fi), ei, hi, cr.Attempt, cr.Token}]
			if !ok {
				r.CompletionViolations++
				c.ex("completion without its handle: %s completed event %s handler %s attempt %d under token %s, and holds no ok handle of that claim",
					f.Name, cr.EventID, cr.Handler, cr.Attempt, cr.Token)
				continue
			}
			if h := c.rec(&c.handles[k]).h; h.EndNs > 0 && cr.CompletedNs < h.EndNs {
				r.CompletionViolations++
				c.ex("completion before its handle ended: %s completed event %s handler %s at %d, %d ns before the handler returned",
					f.Name, cr.EventID, cr.Handler, cr.CompletedNs, h.EndNs-cr.CompletedNs)
			}
			pair := [2]int32{ei, hi}
			if prev, twice := completed[pair]; twice {
				r.CompletionViolations++
				c.ex("completed twice: event %s handler %s was completed by %s and again by %s", cr.EventID, cr.Handler, in.Files[prev.file].Name, f.Name)
				continue
			}
			completed[pair] = completion{int32(fi), ci, cr.CompletedNs}
		}
	}
	// Every handle of a completed delivery against its completion.
	for i := range c.handles {
		h := &c.handles[i]
		d, ok := completed[[2]int32{h.event, h.handler}]
		if !ok {
			continue
		}
		cr := &in.Files[d.file].Completed[d.idx]
		ref := c.rec(h)
		switch {
		case ref.h.HandleNs > d.ns:
			r.CompletionViolations++
			c.ex("handled after its completion: event %s handler %s ran again (%s, attempt %d) %d ns after %s's completion of attempt %d committed",
				ref.h.EventID, ref.h.Handler, ref.proc, ref.h.Attempt, ref.h.HandleNs-d.ns, in.Files[d.file].Name, cr.Attempt)
		case ref.h.Attempt > cr.Attempt:
			r.CompletionViolations++
			c.ex("completion under a superseded lease: %s completed event %s handler %s attempt %d, after %s had started attempt %d of it",
				in.Files[d.file].Name, cr.EventID, cr.Handler, cr.Attempt, ref.proc, ref.h.Attempt)
		}
	}
	c.completionCounts(writes, len(in.Expect.Faults) == 0 && unchecked == 0, completed)
}

// completion is where a delivery's completion line is: its file, its
// index there, and its time.
type completion struct {
	file int32
	idx  int
	ns   int64
}

// completionCounts checks the completion lines against the dispatchers'
// counters and, where every delivery must have been completed (all: no
// fault, every dispatcher writes them), that each delivery handled ok
// was.
func (c *checker) completionCounts(writes map[string]bool, all bool, completed map[[2]int32]completion) {
	in, r := c.in, c.r
	files := make(map[string]int, len(in.Files))
	for i := range in.Files {
		files[in.Files[i].Name+RecordFileExt] = i
	}
	for i := range in.Processes {
		p := &in.Processes[i]
		fi, ok := files[p.Record]
		if !writes[p.Name] || p.End != EndDone || p.Counters == nil || !ok {
			continue
		}
		if n := int64(len(in.Files[fi].Completed)); n != p.Counters.Completed {
			r.CompletionViolations++
			c.ex("completion records: %s ended with its done line counting %d completions; its record file holds %d completion lines",
				p.Name, p.Counters.Completed, n)
		}
	}
	if !all {
		return
	}
	for ei := range c.events {
		e := &c.events[ei]
		for hi := range c.handlerNames {
			if c.okCounts[e.countsIdx+hi] == 0 {
				continue
			}
			if _, ok := completed[[2]int32{int32(ei), int32(hi)}]; !ok {
				r.CompletionViolations++
				c.ex("handled but never completed: event %s handler %s was handled ok in a cell without faults, and no dispatcher recorded its completion",
					e.id, c.handlerNames[hi])
			}
		}
	}
}
