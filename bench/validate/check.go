package validate

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/berkcansavur/relaybus/bench/record"
)

// event is what the published records say about one event.
type event struct {
	id        string
	key       string
	certain   bool // at least one record whose commit returned for sure
	poison    bool
	countsIdx int // first of len(handlers) entries in okCounts
}

type pair struct {
	eventID, handler string
}

// keyedHandle is one ok handle of a keyed delivery, compact for sorting.
type keyedHandle struct {
	handler  int32
	key      string
	handleNs int64
	seq      int64
	record   int32 // index in Input.Handled, for examples
}

func validate(in *Input) *Result {
	r := &Result{}
	ex := func(format string, args ...any) {
		if len(r.Examples) < MaxExamples {
			r.Examples = append(r.Examples, fmt.Sprintf(format, args...))
		}
	}

	if len(in.Handled) > MaxRecords || len(in.Published) > MaxRecords {
		r.TooLarge = true
		ex("too large: %d handled and %d published records, the limit is %d each", len(in.Handled), len(in.Published), MaxRecords)
		return r
	}

	handlerIdx := make(map[string]int32, len(in.Handlers))
	for _, h := range in.Handlers {
		if _, dup := handlerIdx[h]; !dup {
			handlerIdx[h] = int32(len(handlerIdx))
		}
	}
	nh := int32(len(handlerIdx))
	handlerNames := make([]string, nh)
	for h, i := range handlerIdx {
		handlerNames[i] = h
	}

	// Events. A publish retried with the same id is one event; it is
	// certain if any of its records is.
	// The map holds indexes into eventList rather than pointers: one
	// allocation for a million events instead of a million.
	events := make(map[string]int32, len(in.Published))
	eventList := make([]event, 0, len(in.Published))
	for i := range in.Published {
		p := &in.Published[i]
		ei, ok := events[p.EventID]
		if !ok {
			ei = int32(len(eventList))
			eventList = append(eventList, event{id: p.EventID, key: p.Key, poison: in.Expect.PoisonEventIDs[p.EventID], countsIdx: int(ei) * int(nh)})
			events[p.EventID] = ei
		}
		if !p.Uncertain {
			eventList[ei].certain = true
		}
	}
	lookup := func(id string) *event {
		if ei, ok := events[id]; ok {
			return &eventList[ei]
		}
		return nil
	}
	r.Published = int64(len(eventList))
	for i := range eventList {
		e := &eventList[i]
		if !e.certain {
			r.Uncertain++
		} else if !e.poison {
			r.Expected += int64(nh)
		}
	}

	// okCounts[e.countsIdx+h]: ok handles of (event, handler).
	okCounts := make([]int32, len(eventList)*int(nh))
	var keyed []keyedHandle
	for i := range in.Handled {
		h := &in.Handled[i]
		if !h.OK {
			r.Failures++
			continue
		}
		hi, knownHandler := handlerIdx[h.Handler]
		e := lookup(h.EventID)
		switch {
		case !knownHandler:
			r.Unexpected++
			ex("unexpected: event %s handled by unknown handler %q", h.EventID, h.Handler)
			continue
		case e == nil:
			r.Unexpected++
			ex("unexpected: event %s (handler %s) was never published", h.EventID, h.Handler)
			continue
		case e.poison:
			r.PoisonHandled++
			ex("poison handled: event %s handler %s succeeded (attempt %d), want dead-lettered", h.EventID, h.Handler, h.Attempt)
			continue
		}
		c := &okCounts[e.countsIdx+int(hi)]
		*c++
		if *c > 1 {
			if in.Expect.AllowRedelivery {
				r.Redeliveries++
			} else {
				r.Duplicates++
				ex("duplicate: event %s handler %s handled ok %d times", h.EventID, h.Handler, *c)
			}
		}
		if h.Key != "" {
			keyed = append(keyed, keyedHandle{handler: hi, key: h.Key, handleNs: h.HandleNs, seq: h.Sequence, record: int32(i)})
		}
	}

	// Dead letters, deduplicated, checked in the store's order so the
	// examples are deterministic.
	dead := make(map[pair]bool, len(in.Final.DeadLetters))
	for _, dl := range in.Final.DeadLetters {
		d := pair{dl.EventID, dl.Handler}
		if dead[d] {
			continue
		}
		dead[d] = true
		e := lookup(d.eventID)
		_, knownHandler := handlerIdx[d.handler]
		if e == nil || !knownHandler || !e.poison {
			r.DeadUnexpected++
			ex("dead unexpected: event %s handler %s is dead-lettered but was not planted as poison", d.eventID, d.handler)
		}
	}
	if !in.Final.DeadLettersTruncated && in.Final.Dead > int64(len(dead)) {
		extra := in.Final.Dead - int64(len(dead))
		r.DeadUnexpected += extra
		ex("dead unexpected: the store counts %d dead deliveries but lists %d", in.Final.Dead, len(dead))
	}
	if in.Final.DeadLettersTruncated {
		r.DeadLettersUnverified = true
		ex("dead letters truncated: the store listed only part of its %d dead deliveries", in.Final.Dead)
	}

	// Pairs: handled, lost, dead as planted.
	for i := range eventList {
		e := &eventList[i]
		id := e.id
		for hi := int32(0); hi < nh; hi++ {
			n := okCounts[e.countsIdx+int(hi)]
			if n > 0 {
				r.HandledOK++
				continue
			}
			isDead := dead[pair{id, handlerNames[hi]}]
			switch {
			case e.poison && isDead:
				r.DeadExpected++
			case e.poison && e.certain:
				r.LostPoison++
				ex("lost poison: event %s handler %s neither handled nor dead-lettered", id, handlerNames[hi])
			case e.poison, !e.certain, isDead:
				// An uncertain event may or may not exist; a dead
				// non-poison pair is already counted as dead unexpected.
			default:
				r.Lost++
				ex("lost: event %s handler %s was published but never handled ok", id, handlerNames[hi])
			}
		}
	}

	r.OrderViolations = orderViolations(keyed, in.Handled, in.Expect.AllowRedelivery, handlerNames, ex)

	r.Pending = in.Final.Pending
	r.Processing = in.Final.Processing
	if r.Pending != 0 || r.Processing != 0 {
		ex("left after drain: %d pending, %d processing", r.Pending, r.Processing)
	}

	r.Valid = true
	for _, c := range r.violations() {
		if c.v != 0 {
			r.Valid = false
		}
	}
	return r
}

// orderViolations checks per (handler, key) that ok handles, in handle
// order (ties by sequence), have strictly increasing sequences. With
// redelivery allowed, a repeat of an already handled sequence is fine,
// but a first handle of a sequence lower than one already handled is not.
func orderViolations(keyed []keyedHandle, handled []record.Handled, allowRedelivery bool, handlerNames []string, ex func(string, ...any)) int64 {
	slices.SortFunc(keyed, func(a, b keyedHandle) int {
		return cmp.Or(cmp.Compare(a.handler, b.handler), cmp.Compare(a.key, b.key),
			cmp.Compare(a.handleNs, b.handleNs), cmp.Compare(a.seq, b.seq))
	})
	var n int64
	var seen map[int64]bool
	for i := 0; i < len(keyed); {
		j := i
		for j < len(keyed) && keyed[j].handler == keyed[i].handler && keyed[j].key == keyed[i].key {
			j++
		}
		group := keyed[i:j]
		i = j
		if allowRedelivery {
			clear(seen)
			if seen == nil {
				seen = make(map[int64]bool)
			}
		}
		maxSeq, maxEvent := int64(0), ""
		for _, h := range group {
			eventID := handled[h.record].EventID
			if h.seq <= 0 {
				n++
				ex("order: event %s handler %s key %q has sequence %d, want > 0", eventID, handlerNames[h.handler], h.key, h.seq)
				continue
			}
			if allowRedelivery {
				if seen[h.seq] {
					continue
				}
				seen[h.seq] = true
			}
			if h.seq <= maxSeq {
				n++
				ex("order: handler %s key %q handled sequence %d (event %s) after sequence %d (event %s)",
					handlerNames[h.handler], h.key, h.seq, eventID, maxSeq, maxEvent)
				continue
			}
			maxSeq, maxEvent = h.seq, eventID
		}
	}
	return n
}
