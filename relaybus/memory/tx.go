package memory

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

// Tx is a transaction of a memory Store. Its writes are buffered and
// applied by TxCommit all at once; it must not be used after TxCommit or
// TxRollback (ErrTxDone). Like a database transaction it belongs to one
// goroutine at a time.
type Tx struct {
	store *Store
	// The fields below are guarded by store.mu.
	done bool
	// publishes are the EventPublishTx calls, in call order.
	publishes []*publishCall
	// handlers are the handlers each event id gets deliveries for in this
	// transaction, so a repeated publish inside it adds none twice.
	handlers map[string]map[string]struct{}
	// completes are the DeliveryCompleteTx calls, in call order.
	completes []completeCall
}

type publishCall struct {
	events []publishedEvent
	now    time.Time
	result *driver.EventPublishResult
}

type publishedEvent struct {
	ev    relaytype.Event // owned copy; CreatedAt set
	specs []driver.DeliverySpec
}

type completeCall struct {
	lease lease
	now   time.Time
}

// TxBegin implements driver.Store.
func (s *Store) TxBegin(ctx context.Context) (*Tx, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return &Tx{store: s, handlers: make(map[string]map[string]struct{})}, nil
}

// TxRollback implements driver.Store: it drops the buffered writes.
func (s *Store) TxRollback(ctx context.Context, tx *Tx) error {
	if err := s.checkTx(tx); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if tx.done {
		return ErrTxDone
	}
	s.end(tx)
	return nil
}

// end ends tx and lets go of the lanes its completions locked. s.mu is
// held.
func (s *Store) end(tx *Tx) {
	tx.done = true
	for _, c := range tx.completes {
		s.lanes[c.lease.Token.Lane].txLocks--
	}
}

// TxCommit implements driver.Store. It applies the buffered writes
// atomically: publishes in call order (sequences are assigned here), then
// completions, each fenced again. If any completion's lease was lost it
// applies nothing, ends tx and returns an error wrapping ErrLeaseLost. A
// cancelled ctx returns its error and leaves tx open for TxRollback.
//
// It rewrites each EventPublishResult with what was written: Sequences of
// new keyed events, and Inserted and Deliveries where another transaction
// committed the same event first.
func (s *Store) TxCommit(ctx context.Context, tx *Tx) error {
	if err := s.checkTx(tx); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if tx.done {
		return ErrTxDone
	}
	s.end(tx)
	for _, c := range tx.completes {
		if s.current(c.lease) == nil {
			return fmt.Errorf("relaybus/memory: commit: delivery %d: %w", c.lease.ID, ErrLeaseLost)
		}
	}
	added := 0
	for _, call := range tx.publishes {
		call.result.Deliveries = 0
		for i := range call.events {
			inserted, seq, n := s.insert(&call.events[i], call.now)
			call.result.Inserted[i] = inserted
			call.result.Sequences[i] = seq
			call.result.Deliveries += n
		}
		added += call.result.Deliveries
	}
	for _, c := range tx.completes {
		s.complete(s.current(c.lease), c.now)
	}
	if added > 0 {
		s.wake.announce()
	}
	return nil
}

// insert writes one event, or the deliveries it lacks when it exists.
func (s *Store) insert(pe *publishedEvent, now time.Time) (inserted bool, seq int64, deliveries int) {
	e := s.events[pe.ev.ID]
	if e == nil {
		inserted = true
		e = &event{ev: pe.ev, handlers: make(map[string]struct{}), insertedAt: now}
		if key := pe.ev.Key; key != "" {
			s.keySeq[key]++
			e.seq = s.keySeq[key]
		}
		s.events[pe.ev.ID] = e
	}
	for _, spec := range pe.specs {
		if _, ok := e.handlers[spec.Handler]; ok {
			continue
		}
		e.handlers[spec.Handler] = struct{}{}
		s.lastID++
		d := &delivery{
			id:          s.lastID,
			ev:          e,
			handler:     spec.Handler,
			maxAttempts: spec.MaxAttempts,
			availableAt: driver.AvailableAt(&pe.ev, now), // this publish's Event.DeliverAt
			createdAt:   now,
			updatedAt:   now,
			heapIndex:   -1,
		}
		d.lane = driver.LaneOf(e.ev.Key, e.ev.ID) // the stored event's key
		s.deliveries[d.id] = d
		s.setStatus(d, relaytype.StatusPending)
		e.deliveries++
		deliveries++
	}
	return inserted, e.seq, deliveries
}

// EventPublishTx implements driver.Store. Nothing is visible before
// TxCommit. The result is what the publish would write if tx committed
// now; keyed events that are new read Sequence 0 until TxCommit fills it
// in (see TxCommit).
func (s *Store) EventPublishTx(ctx context.Context, tx *Tx, params *driver.EventPublishParams) (*driver.EventPublishResult, error) {
	if err := s.checkTx(tx); err != nil {
		return nil, err
	}
	if s.optionsErr != nil {
		return nil, s.optionsErr
	}
	if err := params.Validate(s.maxPayloadBytes); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	now := params.Now.Round(0)
	call := &publishCall{
		events: make([]publishedEvent, len(params.Events)),
		now:    now,
		result: &driver.EventPublishResult{
			Inserted:  make([]bool, len(params.Events)),
			Sequences: make([]int64, len(params.Events)),
		},
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if tx.done {
		return nil, ErrTxDone
	}
	for i, ep := range params.Events {
		ev := *ep.Event
		ev.Payload = bytes.Clone(ev.Payload)
		ev.Headers = maps.Clone(ev.Headers)
		ev.CreatedAt = ev.CreatedAt.Round(0)
		if ev.CreatedAt.IsZero() {
			ev.CreatedAt = now
		}
		call.events[i] = publishedEvent{ev: ev, specs: append([]driver.DeliverySpec(nil), ep.Deliveries...)}

		stored := s.events[ev.ID]
		pending, inTx := tx.handlers[ev.ID]
		call.result.Inserted[i] = stored == nil && !inTx
		if stored != nil {
			call.result.Sequences[i] = stored.seq
		}
		if !inTx {
			pending = make(map[string]struct{})
			tx.handlers[ev.ID] = pending
		}
		for _, spec := range ep.Deliveries {
			if stored != nil {
				if _, ok := stored.handlers[spec.Handler]; ok {
					continue
				}
			}
			if _, ok := pending[spec.Handler]; ok {
				continue
			}
			pending[spec.Handler] = struct{}{}
			call.result.Deliveries++
		}
	}
	tx.publishes = append(tx.publishes, call)
	return call.result, nil
}

// DeliveryCompleteTx implements driver.Store. It reports whether the
// lease is current now, and holds the delivery's lane until tx ends (the
// PostgreSQL store's FOR KEY SHARE): a takeover skips the lane meanwhile,
// so a completion and a takeover never both win. TxCommit checks the
// lease again (see TxCommit). A lease already completed in tx reports
// false.
func (s *Store) DeliveryCompleteTx(ctx context.Context, tx *Tx, params *driver.DeliveryCompleteParams) (bool, error) {
	if err := s.checkTx(tx); err != nil {
		return false, err
	}
	if err := params.Validate(); err != nil {
		return false, err
	}
	pl, err := parseLease("complete", params.Lease)
	if err != nil {
		return false, err
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if tx.done {
		return false, ErrTxDone
	}
	if s.current(pl) == nil {
		return false, nil
	}
	for _, c := range tx.completes {
		if c.lease.ID == pl.ID {
			return false, nil
		}
	}
	s.lanes[pl.Token.Lane].txLocks++
	tx.completes = append(tx.completes, completeCall{lease: pl, now: params.Now.Round(0)})
	return true, nil
}

var errNilTx = errors.New("relaybus/memory: transaction is nil")

// checkTx rejects a nil transaction and one of another store.
func (s *Store) checkTx(tx *Tx) error {
	if tx == nil {
		return errNilTx
	}
	if tx.store != s {
		return errors.New("relaybus/memory: transaction belongs to another store")
	}
	return nil
}
