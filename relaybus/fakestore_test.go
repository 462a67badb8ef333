package relaybus

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

// fakeStore is a small in-memory Store for the dispatcher's unit tests: the
// semantics the dispatcher relies on (due time, keyed order, lease fencing,
// takeover counting an attempt, transactions applied at commit) and nothing
// more. The real in-memory store (relaybus/memory) runs the conformance
// suite; this one exists so the dispatcher can be tested in isolation.
type fakeStore struct {
	mu         sync.Mutex
	nextID     int
	nextToken  int
	events     map[string]*Event
	keySeq     map[string]int64
	deliveries map[string]*Delivery
	order      []string // delivery IDs in insert order
	// committed records the writes of transactional handlers that committed.
	committed []string
	// suspectEvents marks the deliveries of these events suspect, as a
	// lane-lease store marks what was in flight at a takeover. A claim
	// returns a suspect alone when it is the oldest candidate, nothing at
	// all then to a busy caller, and leaves it out otherwise
	// (docs/lane-protocol.md), unless mixSuspects: then
	// suspects come with the rest, as a store that breaks the rule would.
	suspectEvents map[string]bool
	mixSuspects   bool
	// paused are the paused handlers; pausedReads counts HandlersPaused
	// calls, and pausedErr, when set, is what they return.
	paused      map[string]PausedHandler
	pausedReads int
	pausedErr   error
	// pausedHook, when set, runs at the start of HandlersPaused, outside
	// the lock, with the call's context: a test's way to act at that
	// point of a claim loop's iteration.
	pausedHook func(ctx context.Context)
}

type fakeTx struct {
	ops    []func() // applied in order at commit, under the store lock
	writes []string
	done   bool
}

// Write records a handler's write, visible after commit.
func (tx *fakeTx) Write(s string) { tx.writes = append(tx.writes, s) }

func newFakeStore() *fakeStore {
	return &fakeStore{events: map[string]*Event{}, keySeq: map[string]int64{}, deliveries: map[string]*Delivery{}, suspectEvents: map[string]bool{}}
}

var _ Store[*fakeTx] = newFakeStore()

func (s *fakeStore) Setup(context.Context) error { return nil }

func (s *fakeStore) TxBegin(ctx context.Context) (*fakeTx, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return &fakeTx{}, nil
}

func (s *fakeStore) TxCommit(_ context.Context, tx *fakeTx) error {
	if tx.done {
		return errors.New("fake: tx done")
	}
	tx.done = true
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, op := range tx.ops {
		op()
	}
	s.committed = append(s.committed, tx.writes...)
	return nil
}

func (s *fakeStore) TxRollback(_ context.Context, tx *fakeTx) error {
	tx.done = true
	return nil
}

func (s *fakeStore) EventPublishTx(_ context.Context, tx *fakeTx, p *driver.EventPublishParams) (*driver.EventPublishResult, error) {
	if err := p.Validate(0); err != nil {
		return nil, err
	}
	res := &driver.EventPublishResult{Inserted: make([]bool, len(p.Events)), Sequences: make([]int64, len(p.Events))}
	for _, ep := range p.Events {
		e := *ep.Event
		specs := slices.Clone(ep.Deliveries)
		now := p.Now
		res.Deliveries += len(specs)
		tx.ops = append(tx.ops, func() {
			if _, ok := s.events[e.ID]; ok {
				return // the fake ignores the "add missing handlers" case
			}
			if e.Key != "" {
				s.keySeq[e.Key]++
			}
			seq := s.keySeq[e.Key]
			if e.Key == "" {
				seq = 0
			}
			s.events[e.ID] = &e
			for _, sp := range specs {
				s.nextID++
				id := fmt.Sprintf("d%06d", s.nextID)
				s.deliveries[id] = &Delivery{
					ID: id, EventID: e.ID, EventType: e.Type, Key: e.Key, Sequence: seq, Payload: e.Payload,
					Headers: e.Headers, EventCreatedAt: e.CreatedAt, Handler: sp.Handler, Status: StatusPending,
					MaxAttempts: sp.MaxAttempts, AvailableAt: driver.AvailableAt(&e, now), CreatedAt: now, UpdatedAt: now,
				}
				s.order = append(s.order, id)
			}
		})
	}
	return res, nil
}

func (s *fakeStore) DeliveryClaim(_ context.Context, p *driver.DeliveryClaimParams) ([]*Delivery, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*Delivery
	for _, id := range s.order {
		if len(out) == p.Limit {
			break
		}
		d := s.deliveries[id]
		if !slices.Contains(p.Handlers, d.Handler) {
			continue
		}
		takeover := d.Status == StatusProcessing && !d.LeaseExpiresAt.After(p.Now)
		due := d.Status == StatusPending && !d.AvailableAt.After(p.Now)
		if !takeover && !due {
			continue
		}
		if d.Key != "" && s.blockedLocked(d) {
			continue
		}
		if takeover && d.Attempts >= d.MaxAttempts {
			d.Status, d.LastError, d.LeaseToken, d.LeaseOwner = StatusDead, "lease expired", "", ""
			continue
		}
		suspect := s.suspectEvents[d.EventID]
		if suspect && !s.mixSuspects && p.Busy {
			if len(out) == 0 {
				break // the oldest is a suspect: a busy caller gets nothing
			}
			continue
		}
		if suspect && !s.mixSuspects && len(out) > 0 {
			continue
		}
		s.nextToken++
		d.Status = StatusProcessing
		d.Attempts++
		d.LeaseOwner = p.Owner
		d.LeaseToken = fmt.Sprintf("t%d", s.nextToken)
		d.LeaseExpiresAt = p.Now.Add(p.LeaseDuration)
		d.UpdatedAt = p.Now
		c := *d
		c.Suspect = suspect
		out = append(out, &c)
		if suspect && !s.mixSuspects {
			break
		}
	}
	return out, nil
}

// blockedLocked: a lower sequence of d's handler and key is unfinished.
func (s *fakeStore) blockedLocked(d *Delivery) bool {
	for _, o := range s.deliveries {
		if o.Handler == d.Handler && o.Key == d.Key && o.Sequence < d.Sequence &&
			(o.Status == StatusPending || o.Status == StatusProcessing) {
			return true
		}
	}
	return false
}

// heldLocked returns the delivery of l if l is its current lease.
func (s *fakeStore) heldLocked(l relaytype.Lease) *Delivery {
	d := s.deliveries[l.DeliveryID]
	if d == nil || d.Status != StatusProcessing || d.LeaseToken != l.Token {
		return nil
	}
	return d
}

func (s *fakeStore) LeaseExtend(_ context.Context, p *driver.LeaseExtendParams) ([]bool, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]bool, len(p.Leases))
	for i, l := range p.Leases {
		if d := s.heldLocked(l); d != nil {
			d.LeaseExpiresAt = p.ExpiresAt
			out[i] = true
		}
	}
	return out, nil
}

func (s *fakeStore) completeLocked(l relaytype.Lease, now time.Time) bool {
	d := s.heldLocked(l)
	if d == nil {
		return false
	}
	d.Status, d.CompletedAt, d.UpdatedAt, d.LeaseToken, d.LeaseOwner = StatusCompleted, now, now, "", ""
	delete(s.suspectEvents, d.EventID)
	return true
}

func (s *fakeStore) DeliveryComplete(_ context.Context, p *driver.DeliveryCompleteParams) (bool, error) {
	if err := p.Validate(); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.completeLocked(p.Lease, p.Now), nil
}

func (s *fakeStore) DeliveryCompleteMany(_ context.Context, p *driver.DeliveryCompleteManyParams) ([]bool, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]bool, len(p.Leases))
	for i, l := range p.Leases {
		out[i] = s.completeLocked(l, p.Now)
	}
	return out, nil
}

func (s *fakeStore) DeliveryCompleteTx(_ context.Context, tx *fakeTx, p *driver.DeliveryCompleteParams) (bool, error) {
	if err := p.Validate(); err != nil {
		return false, err
	}
	s.mu.Lock()
	held := s.heldLocked(p.Lease) != nil
	s.mu.Unlock()
	if !held {
		return false, nil
	}
	tx.ops = append(tx.ops, func() { s.completeLocked(p.Lease, p.Now) })
	return true, nil
}

func (s *fakeStore) DeliveryReschedule(_ context.Context, p *driver.DeliveryRescheduleParams) (bool, error) {
	if err := p.Validate(); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.heldLocked(p.Lease)
	if d == nil {
		return false, nil
	}
	d.Status, d.AvailableAt, d.LastError, d.LeaseToken, d.LeaseOwner = StatusPending, p.AvailableAt, p.Error, "", ""
	return true, nil
}

func (s *fakeStore) DeliveryBury(_ context.Context, p *driver.DeliveryBuryParams) (bool, error) {
	if err := p.Validate(); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.heldLocked(p.Lease)
	if d == nil {
		return false, nil
	}
	d.Status, d.LastError, d.LeaseToken, d.LeaseOwner = StatusDead, p.Error, "", ""
	return true, nil
}

func (s *fakeStore) DeliveryRelease(_ context.Context, p *driver.DeliveryReleaseParams) (bool, error) {
	if err := p.Validate(); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.heldLocked(p.Lease)
	if d == nil {
		return false, nil
	}
	d.Status, d.Attempts, d.LeaseToken, d.LeaseOwner = StatusPending, d.Attempts-1, "", ""
	return true, nil
}

func (s *fakeStore) OwnerRelinquish(_ context.Context, p *driver.OwnerRelinquishParams) (int, error) {
	if err := p.Validate(); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, d := range s.deliveries {
		if d.Status == StatusProcessing && d.LeaseOwner == p.Owner {
			d.Status, d.Attempts, d.LeaseToken, d.LeaseOwner = StatusPending, d.Attempts-1, "", ""
			n++
		}
	}
	return n, nil
}

func (s *fakeStore) DeliveryRequeue(_ context.Context, p *driver.DeliveryRequeueParams) error {
	if err := p.Validate(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.deliveries[p.DeliveryID]
	if d == nil {
		return ErrNotFound
	}
	if d.Status != StatusDead {
		return ErrNotDead
	}
	d.Status, d.Attempts, d.AvailableAt = StatusPending, 0, p.Now
	return nil
}

func (s *fakeStore) DeliveryList(_ context.Context, p *driver.DeliveryListParams) (*driver.DeliveryListResult, error) {
	limit, err := p.Validate()
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	res := &driver.DeliveryListResult{}
	for _, id := range s.order {
		d := s.deliveries[id]
		if id <= p.After || (p.Status != "" && d.Status != p.Status) || (p.Handler != "" && d.Handler != p.Handler) ||
			(p.Key != "" && d.Key != p.Key) || (p.EventID != "" && d.EventID != p.EventID) {
			continue
		}
		if len(res.Deliveries) == limit {
			res.Next = res.Deliveries[limit-1].ID
			break
		}
		c := *d
		res.Deliveries = append(res.Deliveries, &c)
	}
	return res, nil
}

func (s *fakeStore) Statistics(_ context.Context, p *driver.StatisticsParams) (*Statistics, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st := &Statistics{Handlers: map[string]Counts{}}
	for _, d := range s.deliveries {
		c := st.Handlers[d.Handler]
		for _, cs := range []*Counts{&st.Counts, &c} {
			switch d.Status {
			case StatusPending:
				cs.Pending++
			case StatusProcessing:
				cs.Processing++
			case StatusCompleted:
				cs.Completed++
			case StatusDead:
				cs.Dead++
			}
		}
		st.Handlers[d.Handler] = c
	}
	return st, nil
}

func (s *fakeStore) Purge(_ context.Context, p *driver.PurgeParams) (*driver.PurgeResult, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	res := &driver.PurgeResult{}
	for id, d := range s.deliveries {
		if (d.Status == StatusCompleted && d.CompletedAt.Before(p.CompletedBefore)) ||
			(d.Status == StatusDead && d.UpdatedAt.Before(p.DeadBefore)) {
			delete(s.deliveries, id)
			s.order = slices.DeleteFunc(s.order, func(o string) bool { return o == id })
			res.Deliveries++
		}
	}
	return res, nil
}

// snapshot returns copies of all deliveries in insert order.
func (s *fakeStore) snapshot() []Delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Delivery, 0, len(s.order))
	for _, id := range s.order {
		out = append(out, *s.deliveries[id])
	}
	return out
}

// loseLease takes the lease of a processing delivery away, as a takeover
// by another worker would.
func (s *fakeStore) loseLease(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d := s.deliveries[id]; d != nil {
		d.LeaseToken, d.LeaseOwner = "stolen", "thief"
	}
}

func (s *fakeStore) HandlerPause(_ context.Context, p *driver.HandlerPauseParams) error {
	if err := p.Validate(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.paused == nil {
		s.paused = map[string]PausedHandler{}
	}
	if _, ok := s.paused[p.Handler]; !ok {
		s.paused[p.Handler] = PausedHandler{Handler: p.Handler, Reason: p.Reason, PausedAt: p.Now}
	}
	return nil
}

func (s *fakeStore) HandlerResume(_ context.Context, p *driver.HandlerResumeParams) (bool, error) {
	if err := p.Validate(); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.paused[p.Handler]
	delete(s.paused, p.Handler)
	return ok, nil
}

func (s *fakeStore) HandlersPaused(ctx context.Context, p *driver.HandlersPausedParams) ([]PausedHandler, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	hook := s.pausedHook
	s.mu.Unlock()
	if hook != nil {
		hook(ctx)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pausedReads++
	if s.pausedErr != nil {
		return nil, s.pausedErr
	}
	return slices.SortedFunc(maps.Values(s.paused), func(a, b PausedHandler) int { return strings.Compare(a.Handler, b.Handler) }), nil
}
