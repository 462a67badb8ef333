package memory

import (
	"cmp"
	"container/heap"
	"time"

	"github.com/berkcansavur/relaybus/relaybus"
)

// The claim indexes. A claim must not look at every live delivery: with
// a backlog of 100,000 that is a scan and a sort per claim. Instead the
// store keeps, under its mutex and in step with every write:
//
//   - per (handler, key), the live (pending or processing) deliveries in
//     sequence order: the first is the head, the only one of its key a
//     claim may take;
//   - per handler, a heap by (AvailableAt, ID) of the pending deliveries a
//     claim may take: unkeyed ones and the heads of their keys. A pending
//     delivery behind its key's head waits outside every heap, so a claim
//     never skips over it;
//   - per handler, a heap by (LeaseExpiresAt, ID) of the processing
//     deliveries, so the expired leases are found without looking at the
//     current ones.
//
// Every change to a delivery's status, AvailableAt or LeaseExpiresAt goes
// through setStatus or place, which put it where these rules say.
// checkIndexes (memory_internal_test.go) verifies the rules from scratch.

// handlerKey names the per-key queue of one handler.
type handlerKey struct{ handler, key string }

// handlerIndex holds one handler's claim heaps.
type handlerIndex struct {
	pending *dueHeap // by AvailableAt: pending deliveries a claim may take
	leased  *dueHeap // by LeaseExpiresAt: processing deliveries
}

// keyQueue is the live deliveries of one (handler, key), in sequence
// order. Sequences are unique within it: an event has one sequence and
// one delivery per handler.
type keyQueue struct {
	items []*delivery
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

// dueHeap is a min-heap of deliveries by (at(d), ID), implementing
// heap.Interface. Each delivery is in at most one heap, and its heapIndex
// says where, so it can be fixed or removed in O(log n).
type dueHeap struct {
	items []*delivery
	at    func(*delivery) time.Time
}

func newDueHeap(at func(*delivery) time.Time) *dueHeap { return &dueHeap{at: at} }

func availableAt(d *delivery) time.Time    { return d.availableAt }
func leaseExpiresAt(d *delivery) time.Time { return d.leaseExpiresAt }

func (h *dueHeap) Len() int { return len(h.items) }

func (h *dueHeap) Less(i, j int) bool {
	a, b := h.items[i], h.items[j]
	if c := h.at(a).Compare(h.at(b)); c != 0 {
		return c < 0
	}
	return a.id < b.id
}

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

// peekDue returns the first delivery if it is due at now, else nil.
func (h *dueHeap) peekDue(now time.Time) *delivery {
	if len(h.items) == 0 || h.at(h.items[0]).After(now) {
		return nil
	}
	return h.items[0]
}

// appendDue appends every delivery due at now, in no particular order.
// It walks the heap from the root and stops below any delivery that is
// not due (its subtree is later still), so it looks at the due ones and
// at most one more per due one plus the root.
func (h *dueHeap) appendDue(out []*delivery, now time.Time) []*delivery {
	stack := []int{0}
	for len(stack) > 0 {
		i := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if i >= len(h.items) || h.at(h.items[i]).After(now) {
			continue
		}
		out = append(out, h.items[i])
		stack = append(stack, 2*i+1, 2*i+2)
	}
	return out
}

// cmpDue orders claim candidates as a claim takes them: by AvailableAt,
// then ID. Expired leases are taken in this order too, not by expiry.
func cmpDue(a, b *delivery) int {
	if c := a.availableAt.Compare(b.availableAt); c != 0 {
		return c
	}
	return cmp.Compare(a.id, b.id)
}

func dueBefore(a, b *delivery) bool { return cmpDue(a, b) < 0 }

func isLive(st relaybus.Status) bool {
	return st == relaybus.StatusPending || st == relaybus.StatusProcessing
}

// handlerIndex returns the heaps of handler, creating them on first use.
// They are kept when empty: handlers are few and long-lived.
func (s *Store) handlerIndex(handler string) *handlerIndex {
	hi := s.handlers[handler]
	if hi == nil {
		hi = &handlerIndex{pending: newDueHeap(availableAt), leased: newDueHeap(leaseExpiresAt)}
		s.handlers[handler] = hi
	}
	return hi
}

// isHead reports whether no live delivery of d's handler and key has a
// lower sequence than d (always true for an unkeyed one). d must be live.
func (s *Store) isHead(d *delivery) bool {
	if d.ev.ev.Key == "" {
		return true
	}
	return s.keys[handlerKey{d.handler, d.ev.ev.Key}].head() == d
}

// setStatus changes d's status and updates the indexes. Call it after
// changing d's other fields: where d goes depends on them.
func (s *Store) setStatus(d *delivery, status relaybus.Status) {
	wasLive := isLive(d.status)
	d.status = status
	if key := d.ev.ev.Key; key != "" && wasLive != isLive(status) {
		hk := handlerKey{d.handler, key}
		q := s.keys[hk]
		var oldHead *delivery
		if q == nil {
			q = &keyQueue{}
			s.keys[hk] = q
		} else {
			oldHead = q.head()
		}
		if wasLive {
			q.remove(d)
		} else {
			q.add(d)
		}
		if len(q.items) == 0 {
			delete(s.keys, hk)
		} else if newHead := q.head(); newHead != oldHead {
			// The head changed hands: the new one may become claimable,
			// and the old one, if still live, no longer is.
			s.place(newHead)
			if oldHead != nil && oldHead != d {
				s.place(oldHead)
			}
		}
	}
	s.place(d)
}

// place puts d in the heap it belongs in, or in none, and restores the
// heap order after a change of the time it is ordered by. Call it after
// any change to d's status, AvailableAt or LeaseExpiresAt.
func (s *Store) place(d *delivery) {
	var want *dueHeap
	switch d.status {
	case relaybus.StatusPending:
		if s.isHead(d) {
			want = s.handlerIndex(d.handler).pending
		}
	case relaybus.StatusProcessing:
		want = s.handlerIndex(d.handler).leased
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

// unindex takes d, which is being deleted, out of the indexes. Only live
// deliveries are in them; leaving the live set through setStatus also
// hands d's key to the next delivery. The status is deleted with d.
func (s *Store) unindex(d *delivery) {
	if isLive(d.status) {
		s.setStatus(d, relaybus.StatusCompleted)
	}
}
