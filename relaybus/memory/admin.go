package memory

// Operations: requeue, listing, statistics, purge.

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"sort"
	"strconv"

	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/internal/decimal"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

// DeliveryRequeue implements driver.Store. LastError is kept: it says
// why the delivery died.
func (s *Store) DeliveryRequeue(ctx context.Context, params *driver.DeliveryRequeueParams) error {
	if err := params.Validate(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	now := params.Now.Round(0)
	s.mu.Lock()
	defer s.mu.Unlock()
	var d *delivery
	if id, ok := parseID(params.DeliveryID); ok {
		d = s.deliveries[id]
	}
	if d == nil {
		return fmt.Errorf("relaybus/memory: requeue delivery %q: %w", params.DeliveryID, relaytype.ErrNotFound)
	}
	if d.status != relaytype.StatusDead {
		return fmt.Errorf("relaybus/memory: requeue delivery %q (status %s): %w", params.DeliveryID, s.statusOf(d), relaytype.ErrNotDead)
	}
	d.attempts = 0
	d.claims++
	d.suspect = false
	d.availableAt = now
	d.updatedAt = now
	s.setStatus(d, relaytype.StatusPending)
	return nil
}

// DeliveryList implements driver.Store. The cursor is the last ID of
// the previous page; IDs are ordered as numbers, not as text. A pending
// delivery in flight is listed as processing.
func (s *Store) DeliveryList(ctx context.Context, params *driver.DeliveryListParams) (*driver.DeliveryListResult, error) {
	limit, err := params.Validate()
	if err != nil {
		return nil, err
	}
	after, err := decimal.ListCursor("relaybus/memory", params.After)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var match []*delivery
	for _, d := range s.deliveries {
		if d.id <= after ||
			(params.Status != "" && s.statusOf(d) != params.Status) ||
			(params.Handler != "" && d.handler != params.Handler) ||
			(params.Key != "" && d.ev.ev.Key != params.Key) ||
			(params.EventID != "" && d.ev.ev.ID != params.EventID) {
			continue
		}
		match = append(match, d)
	}
	sort.Slice(match, func(i, j int) bool { return match[i].id < match[j].id })
	res := &driver.DeliveryListResult{}
	if len(match) > limit {
		match = match[:limit]
		res.Next = strconv.FormatInt(match[limit-1].id, 10)
	}
	res.Deliveries = make([]*relaytype.Delivery, len(match))
	for i, d := range match {
		res.Deliveries[i] = s.snapshot(d)
	}
	return res, nil
}

// Statistics implements driver.Store.
func (s *Store) Statistics(ctx context.Context, params *driver.StatisticsParams) (*relaytype.Statistics, error) {
	if err := params.Validate(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	now := params.Now.Round(0)
	s.mu.Lock()
	defer s.mu.Unlock()
	st := &relaytype.Statistics{Handlers: make(map[string]relaytype.Counts)}
	for _, d := range s.deliveries {
		hc := st.Handlers[d.handler]
		switch s.statusOf(d) {
		case relaytype.StatusPending:
			st.Pending++
			hc.Pending++
			if age := now.Sub(d.availableAt); age > hc.OldestDueAge {
				hc.OldestDueAge = age
				st.OldestDueAge = max(st.OldestDueAge, age)
			}
		case relaytype.StatusProcessing:
			st.Processing++
			hc.Processing++
		case relaytype.StatusCompleted:
			st.Completed++
			hc.Completed++
		case relaytype.StatusDead:
			st.Dead++
			hc.Dead++
		}
		st.Handlers[d.handler] = hc
	}
	return st, nil
}

// Purge implements driver.Store. Deliveries go in ID order, so a
// bounded purge removes the oldest first. An event with no delivery left
// is deleted once it was published before the later of the two cutoffs:
// until then it remembers its handlers, so a redelivered event does not
// run them again.
func (s *Store) Purge(ctx context.Context, params *driver.PurgeParams) (*driver.PurgeResult, error) {
	if err := params.Validate(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var doomed []*delivery
	for _, d := range s.deliveries {
		switch {
		case d.status == relaytype.StatusCompleted && !params.CompletedBefore.IsZero() && d.completedAt.Before(params.CompletedBefore),
			d.status == relaytype.StatusDead && !params.DeadBefore.IsZero() && d.updatedAt.Before(params.DeadBefore):
			doomed = append(doomed, d)
		}
	}
	sort.Slice(doomed, func(i, j int) bool { return doomed[i].id < doomed[j].id })
	if params.Limit > 0 && len(doomed) > params.Limit {
		doomed = doomed[:params.Limit]
	}
	res := &driver.PurgeResult{}
	for _, d := range doomed {
		s.remove(d)
		res.Deliveries++
	}
	// Events follow the completed retention, never the dead one (an event
	// is the trace that its completed handlers ran): none goes while
	// completed ones are kept forever.
	cutoff := params.CompletedBefore
	for id, e := range s.events {
		if !cutoff.IsZero() && e.deliveries == 0 && e.insertedAt.Before(cutoff) {
			delete(s.events, id)
			res.Events++
		}
	}
	return res, nil
}

// statusOf is d's status as listed: a pending delivery in flight is
// processing.
func (s *Store) statusOf(d *delivery) relaytype.Status {
	if d.status == relaytype.StatusPending && d.inFlight {
		return relaytype.StatusProcessing
	}
	return d.status
}

// snapshot copies d out, so callers never alias the store's state. A
// delivery in flight gets its lease and counts its running attempt.
func (s *Store) snapshot(d *delivery) *relaytype.Delivery {
	e := &d.ev.ev
	out := &relaytype.Delivery{
		ID:             strconv.FormatInt(d.id, 10),
		EventID:        e.ID,
		EventType:      e.Type,
		Key:            e.Key,
		Sequence:       d.ev.seq,
		Payload:        bytes.Clone(e.Payload),
		Headers:        maps.Clone(e.Headers),
		EventCreatedAt: e.CreatedAt,
		Handler:        d.handler,
		Status:         s.statusOf(d),
		Attempts:       d.attempts,
		MaxAttempts:    d.maxAttempts,
		AvailableAt:    d.availableAt,
		LastError:      d.lastError,
		Suspect:        d.suspect,
		CreatedAt:      d.createdAt,
		UpdatedAt:      d.updatedAt,
		CompletedAt:    d.completedAt,
	}
	if d.inFlight {
		l := &s.lanes[d.lane]
		out.Attempts++
		out.LeaseOwner = l.owner
		out.LeaseExpiresAt = l.expiresAt
		out.LeaseToken = driver.LaneToken{Lane: d.lane, Epoch: l.epoch, Claims: d.claims}.String()
		out.FencingToken = l.epoch
	}
	return out
}
