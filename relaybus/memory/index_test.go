package memory

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/berkcansavur/relaybus/relaybus"
)

// checkIndexes rebuilds the claim indexes' rules (index.go) from the
// deliveries and reports the first place the kept indexes disagree.
func checkIndexes(s *Store) error {
	queued := 0
	for hk, q := range s.keys {
		if len(q.items) == 0 {
			return fmt.Errorf("key %v: empty queue kept", hk)
		}
		for i, d := range q.items {
			if s.deliveries[d.id] != d || !isLive(d.status) || d.handler != hk.handler || d.ev.ev.Key != hk.key {
				return fmt.Errorf("key %v: queue holds delivery %d (status %s) that does not belong", hk, d.id, d.status)
			}
			if i > 0 && q.items[i-1].ev.seq >= d.ev.seq {
				return fmt.Errorf("key %v: queue out of sequence order at %d", hk, i)
			}
		}
		queued += len(q.items)
	}
	keyedLive, inHeaps := 0, 0
	for _, d := range s.deliveries {
		live := isLive(d.status)
		if live && d.ev.ev.Key != "" {
			keyedLive++
			if q := s.keys[handlerKey{d.handler, d.ev.ev.Key}]; q == nil || !slices.Contains(q.items, d) {
				return fmt.Errorf("delivery %d: live and keyed but not in its key queue", d.id)
			}
		}
		var want *dueHeap
		switch {
		case d.status == relaybus.StatusPending && s.isHead(d):
			want = s.handlers[d.handler].pending
		case d.status == relaybus.StatusProcessing:
			want = s.handlers[d.handler].leased
		}
		if d.heap != want {
			return fmt.Errorf("delivery %d (status %s, head %v): in the wrong heap", d.id, d.status, live && s.isHead(d))
		}
		if want != nil {
			inHeaps++
			if d.heapIndex < 0 || d.heapIndex >= len(want.items) || want.items[d.heapIndex] != d {
				return fmt.Errorf("delivery %d: heap index %d is stale", d.id, d.heapIndex)
			}
		}
	}
	if queued != keyedLive {
		return fmt.Errorf("key queues hold %d deliveries, want %d", queued, keyedLive)
	}
	total := 0
	for h, hi := range s.handlers {
		for _, dh := range []*dueHeap{hi.pending, hi.leased} {
			total += len(dh.items)
			for i := 1; i < len(dh.items); i++ {
				if dh.Less(i, (i-1)/2) {
					return fmt.Errorf("handler %s: heap order broken at %d", h, i)
				}
			}
		}
	}
	if total != inHeaps {
		return fmt.Errorf("heaps hold %d deliveries, want %d (a deleted delivery left behind?)", total, inHeaps)
	}
	return nil
}

// referenceClaim is the claim as the store did it before the indexes:
// scan every live delivery of the wanted handlers, take the head of each
// key (lowest live sequence, due or not), sort the due ones by
// (AvailableAt, ID) and walk them, burying takeovers whose budget is
// spent. It changes nothing; it returns the IDs a claim must return, in
// order, and the IDs it must bury.
func referenceClaim(s *Store, p *relaybus.DeliveryClaimParams) (claimed, buried []int64) {
	now := p.Now.Round(0)
	wanted := make(map[string]bool)
	for _, h := range p.Handlers {
		wanted[h] = true
	}
	head := make(map[handlerKey]int64)
	var due []*delivery
	for _, d := range s.deliveries {
		if !wanted[d.handler] || !isLive(d.status) {
			continue
		}
		if key := d.ev.ev.Key; key != "" {
			hk := handlerKey{d.handler, key}
			if cur, ok := head[hk]; !ok || d.ev.seq < cur {
				head[hk] = d.ev.seq
			}
		}
		if (d.status == relaybus.StatusPending && !d.availableAt.After(now)) ||
			(d.status == relaybus.StatusProcessing && !d.leaseExpiresAt.After(now)) {
			due = append(due, d)
		}
	}
	sort.Slice(due, func(i, j int) bool { return dueBefore(due[i], due[j]) })
	for _, d := range due {
		if len(claimed) == p.Limit {
			break
		}
		if key := d.ev.ev.Key; key != "" && head[handlerKey{d.handler, key}] != d.ev.seq {
			continue
		}
		if d.status == relaybus.StatusProcessing && d.attempts >= d.maxAttempts {
			buried = append(buried, d.id)
			continue
		}
		claimed = append(claimed, d.id)
	}
	return claimed, buried
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
	var leases []relaybus.Lease // every lease ever returned, current or not
	owners := []string{"o1", "o2"}
	tick := func() time.Duration { return time.Duration(rng.IntN(20)) * time.Second }
	someLease := func() (relaybus.Lease, bool) {
		if len(leases) == 0 {
			return relaybus.Lease{}, false
		}
		return leases[rng.IntN(len(leases))], true
	}
	someID := func() string { return fmt.Sprint(1 + rng.Int64N(max(s.lastID, 1))) }

	for op := range ops {
		now = now.Add(tick() - 5*time.Second) // mostly forward, sometimes back
		var err error
		switch rng.IntN(11) {
		case 0, 1, 2: // publish new events, or old ones with more handlers
			p := &relaybus.EventPublishParams{Now: now}
			for range 1 + rng.IntN(4) {
				var ev relaybus.Event
				if len(eventIDs) > 0 && rng.IntN(5) == 0 {
					ev = relaybus.Event{ID: eventIDs[rng.IntN(len(eventIDs))], Type: "t"}
				} else {
					ev = relaybus.Event{ID: fmt.Sprint("e", len(eventIDs)), Type: "t", Key: keys[rng.IntN(len(keys))]}
					eventIDs = append(eventIDs, ev.ID)
				}
				if slices.ContainsFunc(p.Events, func(ep *relaybus.EventPublish) bool { return ep.Event.ID == ev.ID }) {
					continue
				}
				ep := &relaybus.EventPublish{Event: &ev}
				for _, h := range handlers {
					if rng.IntN(2) == 0 {
						ep.Deliveries = append(ep.Deliveries, relaybus.DeliverySpec{Handler: h, MaxAttempts: 1 + rng.IntN(3)})
					}
				}
				p.Events = append(p.Events, ep)
			}
			tx, _ := s.TxBegin(ctx)
			if _, err = s.EventPublishTx(ctx, tx, p); err == nil {
				err = s.TxCommit(ctx, tx)
			}
		case 3, 4, 5: // claim
			p := &relaybus.DeliveryClaimParams{
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
			wantClaimed, wantBuried := referenceClaim(s, p)
			var ds []*relaybus.Delivery
			ds, err = s.DeliveryClaim(ctx, p)
			var gotClaimed []int64
			for _, d := range ds {
				id, _ := parseID(d.ID)
				gotClaimed = append(gotClaimed, id)
				leases = append(leases, d.Lease())
			}
			if !slices.Equal(gotClaimed, wantClaimed) {
				t.Fatalf("op %d: claim returned %v, the scan takes %v", op, gotClaimed, wantClaimed)
			}
			for _, id := range wantBuried {
				if d := s.deliveries[id]; d.status != relaybus.StatusDead || d.lastError != expiredFinalAttempt {
					t.Fatalf("op %d: delivery %d not buried by the claim (status %s)", op, id, d.status)
				}
			}
		case 6: // complete, one or several
			if l, ok := someLease(); ok {
				if rng.IntN(2) == 0 {
					_, err = s.DeliveryComplete(ctx, &relaybus.DeliveryCompleteParams{Lease: l, Now: now})
				} else {
					l2, _ := someLease()
					_, err = s.DeliveryCompleteMany(ctx, &relaybus.DeliveryCompleteManyParams{Leases: []relaybus.Lease{l, l2}, Now: now})
				}
			}
		case 7: // reschedule, possibly into the past
			if l, ok := someLease(); ok {
				_, err = s.DeliveryReschedule(ctx, &relaybus.DeliveryRescheduleParams{Lease: l, Error: "x", AvailableAt: now.Add(tick() - 5*time.Second), Now: now})
			}
		case 8: // bury, release or extend
			if l, ok := someLease(); ok {
				switch rng.IntN(3) {
				case 0:
					_, err = s.DeliveryBury(ctx, &relaybus.DeliveryBuryParams{Lease: l, Error: "x", Now: now})
				case 1:
					_, err = s.DeliveryRelease(ctx, &relaybus.DeliveryReleaseParams{Lease: l, Now: now})
				case 2:
					_, err = s.LeaseExtend(ctx, &relaybus.LeaseExtendParams{Owner: owners[rng.IntN(len(owners))], Leases: []relaybus.Lease{l}, ExpiresAt: now.Add(tick() + time.Second), Now: now})
				}
			}
		case 9: // requeue (often a delivery that is not dead), or relinquish
			if rng.IntN(3) == 0 {
				_, err = s.OwnerRelinquish(ctx, &relaybus.OwnerRelinquishParams{Owner: owners[rng.IntN(len(owners))], Now: now})
			} else if err = s.DeliveryRequeue(ctx, &relaybus.DeliveryRequeueParams{DeliveryID: someID(), Now: now}); err != nil {
				err = nil // not found or not dead: fine, nothing changed
			}
		case 10: // purge what finished
			_, err = s.Purge(ctx, &relaybus.PurgeParams{CompletedBefore: now, DeadBefore: now.Add(-30 * time.Second), Limit: rng.IntN(3), Now: now})
		}
		if err != nil {
			t.Fatalf("op %d: %v", op, err)
		}
		if err := checkIndexes(s); err != nil {
			t.Fatalf("op %d: %v", op, err)
		}
	}
}

// TestRequeueBehindProcessing pins the case that makes a processing
// delivery other than its key's head: a requeued dead delivery with a
// lower sequence. The processing one, even with its lease expired, must
// wait for it.
func TestRequeueBehindProcessing(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := New(nil)
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	tx, _ := s.TxBegin(ctx)
	_, err := s.EventPublishTx(ctx, tx, &relaybus.EventPublishParams{Now: now, Events: []*relaybus.EventPublish{
		{Event: &relaybus.Event{ID: "e1", Type: "t", Key: "k"}, Deliveries: []relaybus.DeliverySpec{{Handler: "h", MaxAttempts: 3}}},
		{Event: &relaybus.Event{ID: "e2", Type: "t", Key: "k"}, Deliveries: []relaybus.DeliverySpec{{Handler: "h", MaxAttempts: 3}}},
	}})
	if err != nil || s.TxCommit(ctx, tx) != nil {
		t.Fatal(err)
	}
	claim := func(at time.Time) []string {
		t.Helper()
		ds, err := s.DeliveryClaim(ctx, &relaybus.DeliveryClaimParams{Owner: "o", Handlers: []string{"h"}, Limit: 10, LeaseDuration: time.Minute, Now: at})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, d := range ds {
			ids = append(ids, d.ID)
			if ok, err := s.DeliveryBury(ctx, &relaybus.DeliveryBuryParams{Lease: d.Lease(), Error: "x", Now: at}); d.ID == "1" && (!ok || err != nil) {
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
	if err := s.DeliveryRequeue(ctx, &relaybus.DeliveryRequeueParams{DeliveryID: "1", Now: now}); err != nil {
		t.Fatal(err)
	}
	if err := checkIndexes(s); err != nil {
		t.Fatal(err)
	}
	// 2's lease has expired, but 1 is the head again: only 1 is due.
	if got := claim(now.Add(2 * time.Minute)); !slices.Equal(got, []string{"1"}) {
		t.Fatalf("claim after requeue %v, want [1]", got)
	}
}
