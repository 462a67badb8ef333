package memory

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

// checkIndexes rebuilds the claim indexes' rules (index.go) and the
// lanes' in-flight lists from the deliveries, and reports the first place
// the kept ones disagree.
func checkIndexes(s *Store) error {
	queued := 0
	for hk, q := range s.keys {
		if len(q.items) == 0 {
			return fmt.Errorf("key %v: empty queue kept", hk)
		}
		flying := 0
		for i, d := range q.items {
			if s.deliveries[d.id] != d || d.status != relaytype.StatusPending || d.handler != hk.handler || d.ev.ev.Key != hk.key {
				return fmt.Errorf("key %v: queue holds delivery %d (status %s) that does not belong", hk, d.id, d.status)
			}
			if i > 0 && q.items[i-1].ev.seq >= d.ev.seq {
				return fmt.Errorf("key %v: queue out of sequence order at %d", hk, i)
			}
			if d.inFlight {
				flying++
			}
		}
		if flying != q.flying {
			return fmt.Errorf("key %v: %d in flight, the queue says %d", hk, flying, q.flying)
		}
		queued += len(q.items)
	}
	keyedPending, inHeaps := 0, 0
	inFlight := make([]int, driver.LaneCount)
	for _, d := range s.deliveries {
		if d.lane != driver.LaneOf(d.ev.ev.Key, d.ev.ev.ID) {
			return fmt.Errorf("delivery %d: lane %d, LaneOf says %d", d.id, d.lane, driver.LaneOf(d.ev.ev.Key, d.ev.ev.ID))
		}
		if d.inFlight {
			if d.status != relaytype.StatusPending {
				return fmt.Errorf("delivery %d: in flight but %s", d.id, d.status)
			}
			if s.lanes[d.lane].inFlight[d.id] != d {
				return fmt.Errorf("delivery %d: in flight but not in lane %d's list", d.id, d.lane)
			}
			inFlight[d.lane]++
		}
		if d.status == relaytype.StatusPending && d.ev.ev.Key != "" {
			keyedPending++
			if q := s.keys[handlerKey{d.handler, d.ev.ev.Key}]; q == nil || !slices.Contains(q.items, d) {
				return fmt.Errorf("delivery %d: pending and keyed but not in its key queue", d.id)
			}
		}
		var want *dueHeap
		if candidateByScan(s, d) {
			want = s.candidates[laneHandler{d.lane, d.handler}]
			if want == nil {
				return fmt.Errorf("delivery %d: a candidate without a heap", d.id)
			}
		}
		if d.heap != want {
			return fmt.Errorf("delivery %d (status %s, in flight %v): in the wrong heap", d.id, d.status, d.inFlight)
		}
		if want != nil {
			inHeaps++
			if d.heapIndex < 0 || d.heapIndex >= len(want.items) || want.items[d.heapIndex] != d {
				return fmt.Errorf("delivery %d: heap index %d is stale", d.id, d.heapIndex)
			}
		}
	}
	if queued != keyedPending {
		return fmt.Errorf("key queues hold %d deliveries, want %d", queued, keyedPending)
	}
	total := 0
	for k, dh := range s.candidates {
		total += len(dh.items)
		for i := 1; i < len(dh.items); i++ {
			if dh.Less(i, (i-1)/2) {
				return fmt.Errorf("heap %v: order broken at %d", k, i)
			}
		}
	}
	if total != inHeaps {
		return fmt.Errorf("heaps hold %d deliveries, want %d (a deleted delivery left behind?)", total, inHeaps)
	}
	for i := range s.lanes {
		l := &s.lanes[i]
		if len(l.inFlight) != inFlight[i] {
			return fmt.Errorf("lane %d: lists %d in flight, %d deliveries say so", i, len(l.inFlight), inFlight[i])
		}
		if len(l.inFlight) > 0 && l.owner == "" {
			return fmt.Errorf("lane %d: deliveries in flight in a free lane", i)
		}
		if (l.owner == "") != (l.holder == "") || l.txLocks < 0 {
			return fmt.Errorf("lane %d: owner %q, holder %q, tx locks %d", i, l.owner, l.holder, l.txLocks)
		}
	}
	return nil
}

// candidateByScan is the candidate rule by a scan of every delivery:
// pending, not in flight, and unkeyed or the lowest pending sequence of
// its handler and key with none of them in flight.
func candidateByScan(s *Store, d *delivery) bool {
	if d.status != relaytype.StatusPending || d.inFlight {
		return false
	}
	if d.ev.ev.Key == "" {
		return true
	}
	for _, o := range s.deliveries {
		if o != d && o.status == relaytype.StatusPending && o.handler == d.handler && o.ev.ev.Key == d.ev.ev.Key &&
			(o.inFlight || o.ev.seq < d.ev.seq) {
			return false
		}
	}
	return true
}

// referenceCandidates is topCandidates by a scan: the candidates of lanes
// and handlers due at now, by (AvailableAt, ID), the first limit of them
// (suspects only when allowSuspect).
func referenceCandidates(s *Store, lanes []int, handlers []string, limit int, allowSuspect bool, now time.Time) []int64 {
	var due []*delivery
	for _, d := range s.deliveries {
		if slices.Contains(lanes, d.lane) && slices.Contains(handlers, d.handler) && candidateByScan(s, d) &&
			!d.availableAt.After(now) && (allowSuspect || !d.suspect) {
			due = append(due, d)
		}
	}
	sort.Slice(due, func(i, j int) bool { return dueBefore(due[i], due[j]) })
	var out []int64
	for _, d := range due[:min(limit, len(due))] {
		out = append(out, d.id)
	}
	return out
}

// TestClaimMatchesScan drives the store with random operations and checks
// after each that the indexes obey their rules, and at each claim that
// the indexed claim returns and buries exactly what the full scan would.
func TestClaimMatchesScan(t *testing.T) {
	t.Parallel()
	for seed := range uint64(30) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			t.Parallel()
			runRandomOps(t, seed, 400)
		})
	}
}

func runRandomOps(t *testing.T, seed uint64, ops int) {
	ctx := t.Context()
	rng := rand.New(rand.NewPCG(seed, 0x6d656d))
	s := New(&Options{RetainCompleted: seed%2 == 0})
	handlers := []string{"h1", "h2", "h3"}
	keys := []string{"", "", "a", "b", "c"}
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	var eventIDs []string
	var leases []relaytype.Lease // every lease ever returned, current or not
	owners := []string{"o1", "o2"}
	tick := func() time.Duration { return time.Duration(rng.IntN(20)) * time.Second }
	someLease := func() (relaytype.Lease, bool) {
		if len(leases) == 0 {
			return relaytype.Lease{}, false
		}
		return leases[rng.IntN(len(leases))], true
	}
	someID := func() string { return fmt.Sprint(1 + rng.Int64N(max(s.lastID, 1))) }

	for op := range ops {
		now = now.Add(tick() - 5*time.Second) // mostly forward, sometimes back
		var err error
		switch rng.IntN(11) {
		case 0, 1, 2: // publish new events, or old ones with more handlers
			p := &driver.EventPublishParams{Now: now}
			for range 1 + rng.IntN(4) {
				var ev relaytype.Event
				if len(eventIDs) > 0 && rng.IntN(5) == 0 {
					ev = relaytype.Event{ID: eventIDs[rng.IntN(len(eventIDs))], Type: "t"}
				} else {
					ev = relaytype.Event{ID: fmt.Sprint("e", len(eventIDs)), Type: "t", Key: keys[rng.IntN(len(keys))]}
					eventIDs = append(eventIDs, ev.ID)
				}
				if slices.ContainsFunc(p.Events, func(ep *driver.EventPublish) bool { return ep.Event.ID == ev.ID }) {
					continue
				}
				ep := &driver.EventPublish{Event: &ev}
				for _, h := range handlers {
					if rng.IntN(2) == 0 {
						ep.Deliveries = append(ep.Deliveries, driver.DeliverySpec{Handler: h, MaxAttempts: 1 + rng.IntN(3)})
					}
				}
				p.Events = append(p.Events, ep)
			}
			tx, _ := s.TxBegin(ctx)
			if _, err = s.EventPublishTx(ctx, tx, p); err == nil {
				err = s.TxCommit(ctx, tx)
			}
		case 3, 4, 5: // claim
			p := &driver.DeliveryClaimParams{
				Owner:         owners[rng.IntN(len(owners))],
				Limit:         1 + rng.IntN(5),
				LeaseDuration: time.Duration(1+rng.IntN(30)) * time.Second,
				Now:           now,
			}
			for _, h := range handlers {
				if rng.IntN(2) == 0 {
					p.Handlers = append(p.Handlers, h)
				}
			}
			if len(p.Handlers) == 0 {
				p.Handlers = []string{"h1", "h1"} // a handler named twice
			}
			// The indexed candidates are the scanned ones, for random
			// sets of lanes.
			var lanes []int
			for l := range driver.LaneCount {
				if rng.IntN(3) == 0 {
					lanes = append(lanes, l)
				}
			}
			hs := slices.Compact(slices.Sorted(slices.Values(p.Handlers)))
			allow := rng.IntN(2) == 0
			want := referenceCandidates(s, lanes, hs, p.Limit, allow, p.Now)
			var got []int64
			for _, d := range s.topCandidates(lanes, hs, p.Limit, allow, p.Now) {
				got = append(got, d.id)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("op %d: indexed candidates %v, the scan takes %v", op, got, want)
			}
			var ds []*relaytype.Delivery
			ds, err = s.DeliveryClaim(ctx, p)
			for _, d := range ds {
				leases = append(leases, d.Lease())
			}
			if len(ds) > 1 && slices.ContainsFunc(ds, func(d *relaytype.Delivery) bool { return d.Suspect }) {
				t.Fatalf("op %d: a suspect claimed with %d others", op, len(ds)-1)
			}
		case 6: // complete, one or several
			if l, ok := someLease(); ok {
				if rng.IntN(2) == 0 {
					_, err = s.DeliveryComplete(ctx, &driver.DeliveryCompleteParams{Lease: l, Now: now})
				} else {
					l2, _ := someLease()
					_, err = s.DeliveryCompleteMany(ctx, &driver.DeliveryCompleteManyParams{Leases: []relaytype.Lease{l, l2}, Now: now})
				}
			}
		case 7: // reschedule, possibly into the past
			if l, ok := someLease(); ok {
				_, err = s.DeliveryReschedule(ctx, &driver.DeliveryRescheduleParams{Lease: l, Error: "x", AvailableAt: now.Add(tick() - 5*time.Second), Now: now})
			}
		case 8: // bury, release or extend
			if l, ok := someLease(); ok {
				switch rng.IntN(3) {
				case 0:
					_, err = s.DeliveryBury(ctx, &driver.DeliveryBuryParams{Lease: l, Error: "x", Now: now})
				case 1:
					_, err = s.DeliveryRelease(ctx, &driver.DeliveryReleaseParams{Lease: l, Now: now})
				case 2:
					_, err = s.LeaseExtend(ctx, &driver.LeaseExtendParams{Owner: owners[rng.IntN(len(owners))], Leases: []relaytype.Lease{l}, ExpiresAt: now.Add(tick() + time.Second), Now: now})
				}
			}
		case 9: // requeue (often a delivery that is not dead), or relinquish
			if rng.IntN(3) == 0 {
				_, err = s.OwnerRelinquish(ctx, &driver.OwnerRelinquishParams{Owner: owners[rng.IntN(len(owners))], Now: now})
			} else if err = s.DeliveryRequeue(ctx, &driver.DeliveryRequeueParams{DeliveryID: someID(), Now: now}); err != nil {
				err = nil // not found or not dead: fine, nothing changed
			}
		case 10: // purge what finished
			_, err = s.Purge(ctx, &driver.PurgeParams{CompletedBefore: now, DeadBefore: now.Add(-30 * time.Second), Limit: rng.IntN(3), Now: now})
		}
		if err != nil {
			t.Fatalf("op %d: %v", op, err)
		}
		if err := checkIndexes(s); err != nil {
			t.Fatalf("op %d: %v", op, err)
		}
	}
}

// TestRequeueBehindProcessing pins the case that puts a delivery in
// flight behind its key's head: a requeued dead delivery with a lower
// sequence. The requeued head waits while the later one is in flight (no
// two of a key at once); the takeover of the expired lane ends that
// flight, and then the head goes first.
func TestRequeueBehindProcessing(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := New(nil)
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	tx, _ := s.TxBegin(ctx)
	_, err := s.EventPublishTx(ctx, tx, &driver.EventPublishParams{Now: now, Events: []*driver.EventPublish{
		{Event: &relaytype.Event{ID: "e1", Type: "t", Key: "k"}, Deliveries: []driver.DeliverySpec{{Handler: "h", MaxAttempts: 3}}},
		{Event: &relaytype.Event{ID: "e2", Type: "t", Key: "k"}, Deliveries: []driver.DeliverySpec{{Handler: "h", MaxAttempts: 3}}},
	}})
	if err != nil || s.TxCommit(ctx, tx) != nil {
		t.Fatal(err)
	}
	claim := func(at time.Time) []string {
		t.Helper()
		ds, err := s.DeliveryClaim(ctx, &driver.DeliveryClaimParams{Owner: "o", Handlers: []string{"h"}, Limit: 10, LeaseDuration: time.Minute, Now: at})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, d := range ds {
			ids = append(ids, d.ID)
			if d.ID != "1" {
				continue
			}
			if ok, err := s.DeliveryBury(ctx, &driver.DeliveryBuryParams{Lease: d.Lease(), Error: "x", Now: at}); !ok || err != nil {
				t.Fatalf("bury 1: %v %v", ok, err)
			}
		}
		if err := checkIndexes(s); err != nil {
			t.Fatal(err)
		}
		return ids
	}
	if got := claim(now); !slices.Equal(got, []string{"1"}) {
		t.Fatalf("first claim %v, want [1] (buried after)", got)
	}
	// Claim 2 and keep it: the helper buries only 1.
	if got := claim(now); !slices.Equal(got, []string{"2"}) {
		t.Fatalf("second claim %v, want [2]", got)
	}
	if err := s.DeliveryRequeue(ctx, &driver.DeliveryRequeueParams{DeliveryID: "1", Now: now}); err != nil {
		t.Fatal(err)
	}
	if err := checkIndexes(s); err != nil {
		t.Fatal(err)
	}
	// While 2 is in flight, 1 waits.
	if got := claim(now.Add(time.Second)); len(got) != 0 {
		t.Fatalf("claim while 2 is in flight %v, want none", got)
	}
	// 2's lease has expired: the takeover charges it, and 1 is the head
	// again: only 1 is due.
	if got := claim(now.Add(2 * time.Minute)); !slices.Equal(got, []string{"1"}) {
		t.Fatalf("claim after requeue %v, want [1]", got)
	}
}
