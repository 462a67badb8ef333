package memory

import (
	"cmp"
	"container/heap"
	"time"

	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

// The claim indexes. A claim must not look at every delivery: with a
// backlog of 100,000 that is a scan and a sort per claim. Instead the
// store keeps, under its mutex and in step with every write:
//
//   - per (handler, key), the pending deliveries in sequence order (in
//     flight ones included: an in-flight delivery is still a pending row),
//     and how many of them are in flight;
//   - per (lane, handler), a heap by (AvailableAt, ID) of the candidates:
//     pending deliveries that are not in flight and, when keyed, are the
//     head of their key (lowest sequence) while nothing of their key is in
//     flight. A keyed delivery behind its head waits outside every heap,
//     so a claim never walks over a blocked backlog.
//
// Every change to a delivery's status, AvailableAt or in-flight mark goes
// through setStatus, setInFlight or place, which put it where these rules
// say. checkIndexes (index_test.go) verifies the rules from scratch.

// handlerKey names the per-key queue of one handler.
type handlerKey struct{ handler, key string }

// laneHandler names the candidate heap of one handler in one lane.
type laneHandler struct {
	lane    int
	handler string
}

// keyQueue is the pending deliveries of one (handler, key), in sequence
// order. Sequences are unique within it: an event has one sequence and
// one delivery per handler.
type keyQueue struct {
	items []*delivery
	// flying counts the items in flight.
	flying int
}

func (q *keyQueue) head() *delivery { return q.items[0] }

// add inserts d in sequence order. Publishes append (sequences grow in
// commit order); a requeue, or a new handler added to an old event,
// inserts in the middle.
func (q *keyQueue) add(d *delivery) {
	i := q.search(d.ev.seq)
	q.items = append(q.items, nil)
	copy(q.items[i+1:], q.items[i:])
	q.items[i] = d
}

// remove takes d out. Taking the head, the common case, reslices in O(1)
// instead of copying the queue.
func (q *keyQueue) remove(d *delivery) {
	i := q.search(d.ev.seq)
	if i == len(q.items) || q.items[i] != d {
		panic("relaybus/memory: delivery missing from its key queue") // a broken index, never user input
	}
	if i == 0 {
		q.items[0] = nil
		q.items = q.items[1:]
		return
	}
	q.items = append(q.items[:i], q.items[i+1:]...)
}

// search returns the index of the first delivery with a sequence >= seq.
func (q *keyQueue) search(seq int64) int {
	lo, hi := 0, len(q.items)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if q.items[mid].ev.seq < seq {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

// dueHeap is a min-heap of deliveries by (AvailableAt, ID), implementing
// heap.Interface. Each delivery is in at most one heap, and its heapIndex
// says where, so it can be fixed or removed in O(log n).
type dueHeap struct {
	items []*delivery
}

func (h *dueHeap) Len() int           { return len(h.items) }
func (h *dueHeap) Less(i, j int) bool { return dueBefore(h.items[i], h.items[j]) }

func (h *dueHeap) Swap(i, j int) {
	h.items[i], h.items[j] = h.items[j], h.items[i]
	h.items[i].heapIndex = i
	h.items[j].heapIndex = j
}

func (h *dueHeap) Push(x any) {
	d := x.(*delivery)
	d.heap = h
	d.heapIndex = len(h.items)
	h.items = append(h.items, d)
}

func (h *dueHeap) Pop() any {
	n := len(h.items) - 1
	d := h.items[n]
	h.items[n] = nil
	h.items = h.items[:n]
	d.heap = nil
	d.heapIndex = -1
	return d
}

// cmpDue orders claim candidates as a claim takes them: by AvailableAt,
// then ID.
func cmpDue(a, b *delivery) int {
	if c := a.availableAt.Compare(b.availableAt); c != 0 {
		return c
	}
	return cmp.Compare(a.id, b.id)
}

func dueBefore(a, b *delivery) bool { return cmpDue(a, b) < 0 }

// candidateHeap returns the heap of (lane, handler), creating it on first
// use. Heaps are kept when empty: lanes and handlers are few.
func (s *Store) candidateHeap(lane int, handler string) *dueHeap {
	k := laneHandler{lane, handler}
	h := s.candidates[k]
	if h == nil {
		h = &dueHeap{}
		s.candidates[k] = h
	}
	return h
}

// isCandidate reports whether d may be claimed (due or not): pending, not
// in flight, and unkeyed or the head of its key with nothing of its key
// in flight.
func (s *Store) isCandidate(d *delivery) bool {
	if d.status != relaytype.StatusPending || d.inFlight {
		return false
	}
	if d.ev.ev.Key == "" {
		return true
	}
	q := s.keys[handlerKey{d.handler, d.ev.ev.Key}]
	return q.head() == d && q.flying == 0
}

// setStatus changes d's status and updates the indexes. Call it after
// changing d's other fields: where d goes depends on them.
func (s *Store) setStatus(d *delivery, status relaytype.Status) {
	wasPending := d.status == relaytype.StatusPending
	d.status = status
	isPending := status == relaytype.StatusPending
	if key := d.ev.ev.Key; key != "" && wasPending != isPending {
		hk := handlerKey{d.handler, key}
		q := s.keys[hk]
		var oldHead *delivery
		if q == nil {
			q = &keyQueue{}
			s.keys[hk] = q
		} else {
			oldHead = q.head()
		}
		if wasPending {
			q.remove(d)
		} else {
			q.add(d)
		}
		if len(q.items) == 0 {
			delete(s.keys, hk)
		} else if newHead := q.head(); newHead != oldHead {
			// The head changed hands: the new one may become a candidate,
			// and the old one, if still pending, no longer is.
			s.place(newHead)
			if oldHead != nil && oldHead != d {
				s.place(oldHead)
			}
		}
	}
	s.place(d)
}

// setInFlight marks d in flight or not and updates the indexes: d leaves
// or rejoins the candidates, and so may the head of its key.
func (s *Store) setInFlight(d *delivery, on bool) {
	if d.inFlight == on {
		return
	}
	d.inFlight = on
	if key := d.ev.ev.Key; key != "" && d.status == relaytype.StatusPending {
		q := s.keys[handlerKey{d.handler, key}]
		if on {
			q.flying++
		} else {
			q.flying--
		}
		if h := q.head(); h != d {
			s.place(h)
		}
	}
	s.place(d)
}

// place puts d in the heap it belongs in, or in none, and restores the
// heap order after a change of its AvailableAt. Call it after any change
// to d's status, AvailableAt, in-flight mark or key head.
func (s *Store) place(d *delivery) {
	var want *dueHeap
	if s.isCandidate(d) {
		want = s.candidateHeap(d.lane, d.handler)
	}
	switch {
	case d.heap == want && want != nil:
		heap.Fix(want, d.heapIndex)
	case d.heap != want:
		if d.heap != nil {
			heap.Remove(d.heap, d.heapIndex)
		}
		if want != nil {
			heap.Push(want, d)
		}
	}
}

// unindex takes d, which is being deleted, out of the indexes. Only
// pending deliveries are in them; leaving the pending set through
// setStatus also hands d's key to the next delivery. The status is
// deleted with d.
func (s *Store) unindex(d *delivery) {
	s.setInFlight(d, false)
	if d.status == relaytype.StatusPending {
		s.setStatus(d, relaytype.StatusCompleted)
	}
}

// oldestDue returns the oldest candidate of lane among handlers that is
// due at now, or nil.
func (s *Store) oldestDue(lane int, handlers []string, now time.Time) *delivery {
	var first *delivery
	for _, h := range handlers {
		dh := s.candidates[laneHandler{lane, h}]
		if dh == nil || len(dh.items) == 0 {
			continue
		}
		if d := dh.items[0]; !d.availableAt.After(now) && (first == nil || dueBefore(d, first)) {
			first = d
		}
	}
	return first
}
