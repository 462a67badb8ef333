package relaybus

import (
	"context"
	"fmt"

	"github.com/google/uuid"

	"github.com/berkcansavur/relaybus/relaybus/driver"
)

// PublishTx publishes events in tx: each event with one delivery per handler
// registered or declared for its type. Missing IDs are generated (UUIDv7) and
// written back into the events, as is CreatedAt when zero, but only once every
// event is valid: an invalid event (or a type with no handler, which would
// otherwise be silently dropped) is an ErrInvalid error and nothing is
// written. Publishing no events does nothing. Once the bus's dispatcher
// has shut down (Run returned, or Stop), PublishTx and Publish return
// ErrClosed: stop the dispatcher after the code that publishes. A bus
// that never runs its dispatcher (a publisher-only process) publishes
// for as long as it lives.
//
// PublishTx is never grouped with other calls: it writes in the caller's
// transaction, which commits when the caller says so. The PostgreSQL
// store sends a call of any number of events, keyed or not, new or
// republished, in one round trip.
func (b *Bus[TTx]) PublishTx(ctx context.Context, tx TTx, events ...*Event) error {
	params, err := b.publishParams(events)
	if err != nil || params == nil {
		return err
	}
	if _, err := b.store.EventPublishTx(ctx, tx, params); err != nil {
		return fmt.Errorf("relaybus: publish: %w", err)
	}
	return nil
}

// Publish is PublishTx in a transaction of the bus's own: committed on
// success, rolled back on error. It returns once its events committed.
//
// Group commit: concurrent Publish calls of one bus are written together,
// in one transaction of the store's (see Config.PublishGroupWait, and
// docs/publishing.md). Up to two writes (groups or lone calls) are in
// flight at once: a call that finds fewer is sent at once, alone; calls
// that arrive while two are being written join the next group, sent when
// one of them finishes. What a group changes for a call, and what it does
// not:
//
//   - Each call returns when its own events committed, with its own
//     error. Every call is validated before it joins a group, so the
//     database is not asked to refuse one call's events for the others;
//     should it refuse the group's data anyway (an ErrInvalid error from
//     the store: say a character the database's encoding cannot hold),
//     each call of the group is written again alone, and only the call
//     at fault fails. Any other error of the group's transaction (a lost
//     connection, a server shutting down) is every call's.
//   - Events of one key published by calls of one group get sequences in
//     the order the calls joined it; calls in different groups are
//     ordered as any two concurrent calls are, by commit. A call that
//     starts after another returned always follows it.
//   - A call that republishes an event ID another call of the forming
//     group publishes is not put in that group but in the next, so no
//     transaction holds an ID twice; the two groups are then written as
//     two concurrent calls of one event ID are: the event is stored once,
//     and the transaction that comes second sees it as existing.
//   - A call whose ctx ends before its group is sent leaves the group
//     and returns ctx's error: nothing of it is written. A call whose ctx
//     ends after its group was sent returns ctx's error at once, and its
//     events may still commit with the group (as a commit whose answer a
//     caller stops waiting for may); republishing the same events (their
//     IDs were written back) is safe either way. The group's transaction
//     is cancelled only when every call in it has stopped waiting.
func (b *Bus[TTx]) Publish(ctx context.Context, events ...*Event) error {
	params, err := b.publishParams(events)
	if err != nil || params == nil {
		return err
	}
	if b.groups == nil {
		return b.publishAlone(ctx, params)
	}
	return b.groups.publish(ctx, params)
}

// publishAlone writes params in one transaction of the store's.
func (b *Bus[TTx]) publishAlone(ctx context.Context, params *driver.EventPublishParams) error {
	if p, ok := b.store.(driver.EventPublisher); ok {
		if _, err := p.EventPublish(ctx, params); err != nil {
			return fmt.Errorf("relaybus: publish: %w", err)
		}
		return nil
	}
	tx, err := b.store.TxBegin(ctx)
	if err != nil {
		return fmt.Errorf("relaybus: publish: begin: %w", err)
	}
	if _, err := b.store.EventPublishTx(ctx, tx, params); err != nil {
		if rbErr := b.store.TxRollback(context.WithoutCancel(ctx), tx); rbErr != nil {
			b.cfg.Logger.Warn("relaybus: publish: rollback failed", "error", rbErr)
		}
		return fmt.Errorf("relaybus: publish: %w", err)
	}
	if err := b.store.TxCommit(ctx, tx); err != nil {
		return fmt.Errorf("relaybus: publish: commit: %w", err)
	}
	return nil
}

// publishParams validates events and builds the store call. The store
// gets copies of the events with their IDs and CreatedAt filled in,
// validated once, here, and marked so (see validatePublish).
// The caller's events get their ID and CreatedAt only when all of them are
// valid, so a caller that retries after a store error republishes the same
// IDs (idempotently).
func (b *Bus[TTx]) publishParams(events []*Event) (*driver.EventPublishParams, error) {
	if len(events) == 0 {
		return nil, nil
	}
	if len(events) > MaxEventsPerPublish {
		// Before a copy is made of each: the bound is on that work too.
		return nil, invalidf("publish: %d events, over the limit of %d", len(events), MaxEventsPerPublish)
	}
	now := b.cfg.Now()
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.state == stateStopped {
		return nil, fmt.Errorf("relaybus: publish: the bus has shut down: %w", ErrClosed)
	}
	params := &driver.EventPublishParams{Events: make([]*driver.EventPublish, len(events)), Now: now}
	for i, e := range events {
		if e == nil {
			return nil, invalidf("publish: event %d is nil", i)
		}
		c := *e
		if c.ID == "" {
			id, err := uuid.NewV7()
			if err != nil {
				return nil, fmt.Errorf("relaybus: publish: generate event id: %w", err)
			}
			c.ID = id.String()
		}
		if c.CreatedAt.IsZero() {
			c.CreatedAt = now
		}
		params.Events[i] = &driver.EventPublish{Event: &c, Deliveries: b.byType[c.Type]}
	}
	if err := validatePublish(params, b.cfg.MaxPayloadBytes); err != nil {
		return nil, err
	}
	for _, ep := range params.Events {
		if len(ep.Deliveries) == 0 {
			// It would be silently dropped.
			return nil, invalidf("publish: event %q: type %q has no handler (register one with Handle, HandleTx or Declare)", ep.Event.ID, ep.Event.Type)
		}
	}
	for i, e := range events {
		e.ID, e.CreatedAt = params.Events[i].Event.ID, params.Events[i].Event.CreatedAt
	}
	return params, nil
}
