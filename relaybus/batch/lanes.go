package batch

import "slices"

// lanes is the per-key state of a batcher as a plain value: no clock, no
// goroutines, no locks. Every transition takes the time as an argument
// and is deterministic, so lanes_test.go can drive it step by step
// against a simple model. The batcher holds it under one mutex: that
// mutex is the ADR's one transactional variable, and each method call is
// one of its transactions.
//
// A lane is waiting (items, not yet due), ready (in the ready queue:
// full or due) or busy (maxBusy batches in flight). For NewPerKey
// maxBusy is 1: at most one batch per key. For New there is one lane and
// maxBusy is MaxInFlight.
type lanes[K comparable, V any] struct {
	cfg lanesConfig

	m     map[K]*lane[K, V]
	mPeak int // largest len(m) since m was made; see shrinkMap

	// ready holds lanes first come, first served. A lane removed while
	// queued here stays as a stale entry (lane.removed) until popped or
	// compacted away, so cancel is not O(ready lanes).
	ready      queue[*lane[K, V]]
	readyStale int

	// timers holds one entry per item that was not yet due when admitted,
	// in admission order. Deadlines are admission time plus a fixed
	// linger and admission times never decrease, so the order is also
	// deadline order: expire pops from the front only.
	timers queue[timer[K]]

	seq          uint64 // last sequence number given out
	queued       int    // live items in all lanes
	queuedWeight int64
	inFlight     int  // batches taken and not completed
	draining     bool // after flush every lane with items is due
}

type lanesConfig struct {
	maxSize   int
	maxWeight int64 // 0: no weight bound
	linger    int64 // nanoseconds
	maxBusy   int   // batches in flight per lane
}

type lane[K comparable, V any] struct {
	key     K
	items   queue[entry[V]] // front is always live; dead ones are cancelled
	live    int
	dead    int
	weight  int64 // of live items
	busy    int
	inReady bool
	removed bool
}

type entry[V any] struct {
	seq      uint64
	deadline int64
	weight   int64
	val      V
	dead     bool
}

type timer[K comparable] struct {
	key      K
	seq      uint64
	deadline int64
}

// Thresholds for giving memory back after a burst.
const (
	mapShrinkMin   = 1024 // a map below this is never rebuilt
	deadCompactMin = 16   // a lane with fewer dead items is not compacted
)

func newLanes[K comparable, V any](cfg lanesConfig) lanes[K, V] {
	return lanes[K, V]{cfg: cfg, m: make(map[K]*lane[K, V])}
}

// eligible reports whether l's next batch may be taken now: it is full,
// its oldest item is due, or the batcher is draining.
func (s *lanes[K, V]) eligible(l *lane[K, V], now int64) bool {
	if l.live == 0 {
		return false
	}
	return s.draining ||
		l.live >= s.cfg.maxSize ||
		(s.cfg.maxWeight > 0 && l.weight >= s.cfg.maxWeight) ||
		l.items.front().deadline <= now
}

// promote queues l as ready if it is eligible, not already queued and
// below its in-flight limit. It reports whether it did.
func (s *lanes[K, V]) promote(l *lane[K, V], now int64) bool {
	if l.inReady || l.busy >= s.cfg.maxBusy || !s.eligible(l, now) {
		return false
	}
	l.inReady = true
	s.ready.push(l)
	return true
}

// admit appends v to key's lane, creating the lane if needed. It returns
// v's sequence number (its handle for cancel) and whether the lane became
// ready, i.e. whether an idle worker should be woken.
func (s *lanes[K, V]) admit(key K, v V, weight, now int64) (seq uint64, ready bool) {
	l := s.m[key]
	if l == nil {
		l = &lane[K, V]{key: key}
		s.m[key] = l
		s.mPeak = max(s.mPeak, len(s.m))
	}
	s.seq++
	e := entry[V]{seq: s.seq, deadline: now + s.cfg.linger, weight: weight, val: v}
	l.items.push(e)
	l.live++
	l.weight += weight
	s.queued++
	s.queuedWeight += weight
	if e.deadline > now && !s.draining {
		s.timers.push(timer[K]{key: key, seq: e.seq, deadline: e.deadline})
	}
	return e.seq, s.promote(l, now)
}

// take pops the first ready lane and takes its next batch: up to maxSize
// items in submission order, stopping before maxWeight would be exceeded
// (but at least one item). The entries are appended to dst. A lane that
// is still eligible and below maxBusy goes to the back of the line.
func (s *lanes[K, V]) take(now int64, dst []entry[V]) (key K, batch []entry[V], ok bool) {
	for s.ready.len() > 0 {
		l := s.ready.pop()
		if l.removed {
			s.readyStale--
			continue
		}
		l.inReady = false
		if l.live == 0 { // emptied by cancel while another batch runs
			continue
		}
		var w int64
		n := 0
		for l.live > 0 && n < s.cfg.maxSize {
			if next := l.items.front().weight; n > 0 && s.cfg.maxWeight > 0 && w+next > s.cfg.maxWeight {
				break
			}
			e := l.items.pop()
			dst = append(dst, e)
			n++
			w += e.weight
			l.live--
			l.weight -= e.weight
			l.trimFront()
		}
		s.queued -= n
		s.queuedWeight -= w
		l.busy++
		s.inFlight++
		s.promote(l, now)
		return l.key, dst, true
	}
	return key, dst, false
}

// complete records that a batch taken from key's lane finished. The lane
// is removed if it is empty and idle, or rejoins the back of the line if
// it is eligible. It reports whether the lane became ready.
func (s *lanes[K, V]) complete(key K, now int64) bool {
	l := s.m[key]
	if l == nil || l.busy == 0 {
		panic("batch: complete without a batch in flight") // a bug in this package, not user input
	}
	l.busy--
	s.inFlight--
	if l.live == 0 && l.busy == 0 {
		s.remove(l)
		return false
	}
	return s.promote(l, now)
}

// expire makes due every waiting lane whose oldest item's deadline has
// passed, in the order of those items. It returns how many became ready.
func (s *lanes[K, V]) expire(now int64) int {
	n := 0
	for s.timers.len() > 0 && s.timers.front().deadline <= now {
		t := s.timers.pop()
		l := s.m[t.key]
		// An entry older than the lane's oldest live item belongs to an
		// item already taken or cancelled (or to an earlier lane for the
		// same key); the lane is handled at its oldest item's entry.
		if l == nil || l.live == 0 || l.items.front().seq > t.seq {
			continue
		}
		if s.promote(l, now) {
			n++
		}
	}
	return n
}

// nextDeadline returns the earliest pending deadline. It may belong to
// an item no longer waiting; the cost is one early wake-up.
func (s *lanes[K, V]) nextDeadline() (int64, bool) {
	if s.timers.len() == 0 {
		return 0, false
	}
	return s.timers.front().deadline, true
}

// cancel removes the waiting item seq from key's lane. It fails if the
// item is not waiting (taken into a batch, or never there).
func (s *lanes[K, V]) cancel(key K, seq uint64) (v V, ok bool) {
	l := s.m[key]
	if l == nil || l.live == 0 {
		return v, false
	}
	// Sequence numbers increase along a lane: binary search.
	lo, hi := 0, l.items.len()
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if l.items.at(mid).seq < seq {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if lo == l.items.len() {
		return v, false
	}
	e := l.items.at(lo)
	if e.seq != seq || e.dead {
		return v, false
	}
	v = e.val
	var zero V
	e.val = zero
	e.dead = true
	l.dead++
	l.live--
	l.weight -= e.weight
	s.queued--
	s.queuedWeight -= e.weight
	l.trimFront()
	if l.dead >= deadCompactMin && l.dead > l.live {
		l.items.filter(func(e *entry[V]) bool { return !e.dead })
		l.dead = 0
	}
	if l.live == 0 && l.busy == 0 {
		s.remove(l)
	}
	return v, true
}

// flush starts draining: from now on every lane with items is due. Lanes
// that can run now join the line in the order of their oldest items.
func (s *lanes[K, V]) flush(now int64) int {
	s.draining = true
	s.timers.reset()
	var due []*lane[K, V]
	for _, l := range s.m {
		if !l.inReady && l.busy < s.cfg.maxBusy && l.live > 0 {
			due = append(due, l)
		}
	}
	slices.SortFunc(due, func(a, b *lane[K, V]) int {
		return cmpUint64(a.items.front().seq, b.items.front().seq)
	})
	for _, l := range due {
		s.promote(l, now)
	}
	return len(due)
}

// drain removes every waiting item and appends its value to dst. Lanes
// with a batch in flight stay until complete.
func (s *lanes[K, V]) drain(dst []V) []V {
	for _, l := range s.m {
		for l.items.len() > 0 {
			if e := l.items.pop(); !e.dead {
				dst = append(dst, e.val)
			}
		}
		l.live, l.dead, l.weight, l.inReady = 0, 0, 0, false
		if l.busy == 0 {
			s.remove(l)
		}
	}
	s.ready.reset()
	s.readyStale = 0
	s.timers.reset()
	s.queued, s.queuedWeight = 0, 0
	return dst
}

// remove forgets an empty, idle lane, so memory follows waiting items
// rather than keys ever seen.
func (s *lanes[K, V]) remove(l *lane[K, V]) {
	delete(s.m, l.key)
	l.removed = true
	l.items.reset()
	if l.inReady {
		s.readyStale++
		if s.readyStale >= deadCompactMin && s.readyStale > s.ready.len()/2 {
			s.ready.filter(func(p **lane[K, V]) bool { return !(*p).removed })
			s.readyStale = 0
		}
	}
	// Go maps never give back their buckets; rebuild once the map has
	// shrunk to a quarter of its peak, which keeps the cost amortised O(1).
	if s.mPeak >= mapShrinkMin && len(s.m) < s.mPeak/4 {
		m := make(map[K]*lane[K, V], len(s.m))
		for k, v := range s.m {
			m[k] = v
		}
		s.m = m
		s.mPeak = len(m)
	}
}

// trimFront drops cancelled entries from the front, keeping the
// invariant that a lane's front item is live.
func (l *lane[K, V]) trimFront() {
	for l.items.len() > 0 && l.items.front().dead {
		l.items.pop()
		l.dead--
	}
}

func cmpUint64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
