package postgres

import (
	"sync"
	"time"

	"github.com/berkcansavur/relaybus/relaybus/driver"
)

// The lanes a store instance may hold, per owner, so that a claim locks
// its held lanes through the primary key (claimLockLanes) instead of
// reading all 256 lane rows, one page each (claimLock: about 0.3 ms of a
// claim's server time, measured on a shallow keyed backlog where a claim
// returns four deliveries).
//
// The set is a superset of the lanes (owner, this instance) holds, and
// only liveness depends on it: claimLockLanes checks owner, holder and
// expiry like claimLock, so a lane in the set that is not held is not
// locked, and a held lane missing from it is only not claimed from until
// the next full read. A lane becomes held only through a take (claimWrite),
// whose result names it; the set gains every lane a take returned and
// every lane a lock found held, and loses a lane only when a lock that was
// sent after the lane's last gain found it not held (a concurrent claim
// of the same owner may take a lane between another's lock and the
// moment that one's result is recorded: the generation stamps keep the
// newer gain). It is not trusted after a claim's round trip failed (that
// take may have committed without its result arriving), and is checked
// against a full read at least every heldRecheck anyway.
type heldLanes struct {
	mu     sync.Mutex
	gen    uint64
	owners map[string]*heldSet
}

// heldRecheck is the longest a claim trusts the set without a full read
// of the lanes.
const heldRecheck = time.Second

// heldSet is the set of one owner.
type heldSet struct {
	// stamp is the generation of each lane's last gain; 0 when the lane
	// is not in the set.
	stamp  [driver.LaneCount]uint64
	fullAt time.Time // the last full read; zero: the set is not trusted
}

// heldLock is what a claim's lock statement is sent with: the lanes to
// read (nil: all of them) and the generation it was sent at.
type heldLock struct {
	lanes []int16
	gen   uint64
}

// lock returns how owner's next claim locks its lanes, at now.
func (h *heldLanes) lock(owner string, now time.Time) heldLock {
	h.mu.Lock()
	defer h.mu.Unlock()
	l := heldLock{gen: h.gen}
	set := h.owners[owner]
	if set == nil || set.fullAt.IsZero() || now.Sub(set.fullAt) >= heldRecheck || now.Before(set.fullAt) {
		return l
	}
	l.lanes = []int16{}
	for lane, st := range set.stamp {
		if st != 0 {
			l.lanes = append(l.lanes, int16(lane))
		}
	}
	return l
}

// locked records a lock's result, sent as l at now: locked are the lanes
// it found held (every one, when l.lanes is nil), taken those the same
// round trip took.
func (h *heldLanes) locked(owner string, l heldLock, now time.Time, locked, taken []int16) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.owners == nil {
		h.owners = map[string]*heldSet{}
	}
	set := h.owners[owner]
	if set == nil {
		set = &heldSet{}
		h.owners[owner] = set
	}
	var found [driver.LaneCount]bool
	for _, lane := range locked {
		found[lane] = true
	}
	for lane := range set.stamp {
		// A lane gained after the lock was sent stays: its take may
		// have committed after the lock's snapshot. (A lane the lock did
		// not read was not in the set when it was sent: its stamp is 0,
		// or later than l.gen.)
		if !found[lane] && set.stamp[lane] <= l.gen {
			set.stamp[lane] = 0
		}
	}
	h.gen++
	for _, lane := range locked {
		set.stamp[lane] = h.gen
	}
	for _, lane := range taken {
		set.stamp[lane] = h.gen
	}
	if l.lanes == nil {
		set.fullAt = now
	}
}

// gained records lanes taken by a round trip that locked nothing (a
// claim's later round trips).
func (h *heldLanes) gained(owner string, taken []int16) {
	if len(taken) == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	set := h.owners[owner]
	if set == nil {
		return // not trusted yet: the next lock reads every lane
	}
	h.gen++
	for _, lane := range taken {
		set.stamp[lane] = h.gen
	}
}

// distrust makes owner's next claim read every lane: a round trip failed,
// and a take may have committed without its result arriving.
func (h *heldLanes) distrust(owner string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if set := h.owners[owner]; set != nil {
		set.fullAt = time.Time{}
	}
}
