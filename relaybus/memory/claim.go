package memory

// Claiming: the lanes a claim takes and the deliveries it picks.

import (
	"container/heap"
	"context"
	"slices"
	"time"

	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

// DeliveryClaim implements driver.Store with the lane protocol of the
// PostgreSQL store (docs/lane-protocol.md): pick from the lanes
// (params.Owner, this store) holds, then, while that does not fill the
// limit, take 4, 8, 16, ... more lanes that are free or abandoned and have
// due work, oldest due work first; taking an abandoned lane charges what
// it had in flight. A suspect is returned alone, only as the first thing
// the claim finds and only to a caller that is not params.Busy; a busy
// caller whose oldest candidate is a suspect gets nothing and takes no
// lane. Lanes left with nothing in flight are handed back.
//
// Candidates come from the indexes (index.go): a claim costs about
// Limit heap operations plus the lanes it looks at, whatever the backlog.
func (s *Store) DeliveryClaim(ctx context.Context, params *driver.DeliveryClaimParams) ([]*relaytype.Delivery, error) {
	if err := params.Validate(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	now := params.Now.Round(0)
	expiresAt := now.Add(params.LeaseDuration)
	handlers := slices.Compact(slices.Sorted(slices.Values(params.Handlers)))
	runs := keyRuns(params.KeyRuns)

	s.mu.Lock()
	defer s.mu.Unlock()

	var own []int
	for i := range s.lanes {
		if s.lanes[i].held(params.Owner, s.holder, now) {
			own = append(own, i)
		}
	}
	picked, blocked := s.pickFrom(own, handlers, runs, params.Limit, !params.Busy, params.Busy, now, expiresAt)
	tried := map[int]bool{}
	for step := claimTakeFirst; !blocked && len(picked) < params.Limit && !(len(picked) == 1 && picked[0].suspect); step *= 2 {
		taken := s.take(min(step, params.Limit-len(picked), driver.LaneCount), handlers, tried, params.Owner, now, expiresAt)
		if len(taken) == 0 {
			break
		}
		for _, l := range taken {
			tried[l] = true
		}
		var more []*delivery
		more, blocked = s.pickFrom(taken, handlers, runs, params.Limit-len(picked), !params.Busy && len(picked) == 0, params.Busy, now, expiresAt)
		picked = append(picked, more...)
	}
	slices.SortFunc(picked, cmpDue)
	out := make([]*relaytype.Delivery, len(picked))
	for i, d := range picked {
		out[i] = s.snapshot(d)
	}
	return out, nil
}

// pickFrom claims up to limit of the candidates of lanes, records them in
// flight, and hands back each of lanes left with nothing in flight.
// allowSuspect: a suspect may be returned, alone, when it is the oldest
// candidate. busy (the caller has deliveries in flight): when the oldest
// candidate is a suspect, nothing is picked and blocked is true, so that
// the claim takes no lanes either and the caller drains (a busy caller
// holding a suspect lets another delivery's crash charge it).
//
// runs are the claim's key runs (driver.DeliveryClaimParams.KeyRuns), by
// handler: a keyed pick of such a handler brings the deliveries of its
// key that follow it (see extendRuns), within limit.
func (s *Store) pickFrom(lanes []int, handlers []string, runs map[string]int, limit int, allowSuspect, busy bool, now, expiresAt time.Time) (picks []*delivery, blocked bool) {
	if busy {
		if first := s.topCandidates(lanes, handlers, 1, true, now); len(first) > 0 && first[0].suspect {
			blocked = true
			limit = 0 // still hand back the lanes left with nothing in flight
		}
	}
	cand := s.topCandidates(lanes, handlers, limit, allowSuspect, now)
	switch {
	case len(cand) > 0 && cand[0].suspect:
		picks = cand[:1]
	default:
		for _, d := range cand {
			if !d.suspect {
				picks = append(picks, d)
			}
		}
	}
	if len(runs) > 0 && !(len(picks) == 1 && picks[0].suspect) {
		picks = s.extendRuns(picks, runs, limit, now)
	}
	for _, d := range picks {
		l := &s.lanes[d.lane]
		l.inFlight[d.id] = d
		l.expiresAt = expiresAt
		s.setInFlight(d, true)
	}
	for _, i := range lanes {
		if l := &s.lanes[i]; len(l.inFlight) == 0 {
			l.handBack()
		}
	}
	return picks, blocked
}

// topCandidates returns the first limit candidates of lanes and handlers
// due at now, by (AvailableAt, ID); suspects only when allowSuspect. It
// walks the candidate heaps as one: a frontier of heap nodes, popping the
// least and pushing its children, so it looks at about limit nodes.
func (s *Store) topCandidates(lanes []int, handlers []string, limit int, allowSuspect bool, now time.Time) []*delivery {
	f := &frontier{}
	for _, l := range lanes {
		for _, h := range handlers {
			if dh := s.candidates[laneHandler{l, h}]; dh != nil && len(dh.items) > 0 {
				f.nodes = append(f.nodes, node{dh, 0})
			}
		}
	}
	heap.Init(f)
	var out []*delivery
	for f.Len() > 0 && len(out) < limit {
		n := heap.Pop(f).(node)
		d := n.h.items[n.i]
		if d.availableAt.After(now) {
			continue // its subtree is later still
		}
		if allowSuspect || !d.suspect {
			out = append(out, d)
		}
		for _, c := range []int{2*n.i + 1, 2*n.i + 2} {
			if c < len(n.h.items) {
				heap.Push(f, node{n.h, c})
			}
		}
	}
	return out
}

// node is a position in a candidate heap; frontier orders nodes by the
// delivery there.
type node struct {
	h *dueHeap
	i int
}

type frontier struct{ nodes []node }

func (f *frontier) Len() int { return len(f.nodes) }

func (f *frontier) Less(i, j int) bool {
	return dueBefore(f.nodes[i].h.items[f.nodes[i].i], f.nodes[j].h.items[f.nodes[j].i])
}

func (f *frontier) Swap(i, j int) { f.nodes[i], f.nodes[j] = f.nodes[j], f.nodes[i] }

func (f *frontier) Push(x any) { f.nodes = append(f.nodes, x.(node)) }

func (f *frontier) Pop() any {
	n := f.nodes[len(f.nodes)-1]
	f.nodes = f.nodes[:len(f.nodes)-1]
	return n
}

// take takes up to n lanes that a claim may take, are not in tried, and
// have due work of handlers (a candidate, or a delivery in flight under
// an expired lease), oldest due work first. Taking raises the epoch and
// leases the lane to (owner, this store); taking an abandoned lane charges
// each delivery it had in flight one attempt and marks it a suspect (see
// charge). It returns the lanes taken.
func (s *Store) take(n int, handlers []string, tried map[int]bool, owner string, now, expiresAt time.Time) []int {
	type want struct {
		lane int
		due  *delivery
	}
	var ws []want
	for i := range s.lanes {
		l := &s.lanes[i]
		if tried[i] || !l.takeable(now) {
			continue
		}
		due := s.oldestDue(i, handlers, now)
		for _, d := range l.inFlight {
			if slices.Contains(handlers, d.handler) && !d.availableAt.After(now) && (due == nil || dueBefore(d, due)) {
				due = d
			}
		}
		if due != nil {
			ws = append(ws, want{i, due})
		}
	}
	slices.SortFunc(ws, func(a, b want) int {
		if c := cmpDue(a.due, b.due); c != 0 {
			return c
		}
		return a.lane - b.lane
	})
	var taken []int
	for _, w := range ws[:min(n, len(ws))] {
		l := &s.lanes[w.lane]
		l.epoch++
		l.owner, l.holder, l.expiresAt = owner, s.holder, expiresAt
		for _, d := range l.inFlight {
			s.charge(d, now)
		}
		taken = append(taken, w.lane)
	}
	return taken
}

// charge counts the lost attempt of d, in flight in a lane being taken
// over: it becomes a suspect, and is buried if that spends its budget and
// it was a suspect already. One that was not may only have run beside the
// delivery that crashed the process; its next attempt, which runs alone,
// decides (docs/lane-protocol.md, Claim step 3, variant BURY_ANY).
func (s *Store) charge(d *delivery, now time.Time) {
	s.leave(d)
	wasSuspect := d.suspect
	d.attempts++
	d.claims++
	d.suspect = true
	d.updatedAt = now
	if wasSuspect && d.attempts >= d.maxAttempts {
		d.lastError = expiredFinalAttempt
		s.setStatus(d, relaytype.StatusDead)
		return
	}
	s.place(d)
}

// keyRuns returns the claim's key runs by handler (nil when there are
// none).
func keyRuns(rs []driver.KeyRun) map[string]int {
	if len(rs) == 0 {
		return nil
	}
	m := make(map[string]int, len(rs))
	for _, r := range rs {
		m[r.Handler] = r.Max
	}
	return m
}

// extendRuns appends to picks, while they number fewer than limit, the
// run of each keyed pick of a handler in runs: the pending deliveries of
// its (handler, key) after it, in sequence order, up to the handler's
// max in all, stopping at the first that is not due or is a suspect. A
// keyed pick is its key's head with nothing of its key in flight (a
// candidate), so nothing after it is in flight either. Runs are extended
// in the order of picks and each from its head on, so a run cut by the
// limit is a prefix.
func (s *Store) extendRuns(picks []*delivery, runs map[string]int, limit int, now time.Time) []*delivery {
	heads := len(picks)
	for _, d := range picks[:heads] {
		if len(picks) >= limit {
			break
		}
		max := runs[d.handler]
		if max <= 1 || d.ev.ev.Key == "" || d.suspect {
			continue
		}
		q := s.keys[handlerKey{d.handler, d.ev.ev.Key}]
		for i := 1; i < len(q.items) && i < max && len(picks) < limit; i++ {
			n := q.items[i]
			if n.inFlight || n.suspect || n.availableAt.After(now) {
				break
			}
			picks = append(picks, n)
		}
	}
	return picks
}

// ClaimsKeyRuns reports that DeliveryClaim honours
// driver.DeliveryClaimParams.KeyRuns (driver.KeyRunClaimer).
func (s *Store) ClaimsKeyRuns() bool { return true }
