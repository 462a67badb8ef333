package relaybustest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"sync"

	"github.com/berkcansavur/relaybus/relaybus"
	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

// MaxRecordedEvents bounds the events a Recorder holds: a test that
// publishes more is a loop, or wants Reset between its phases.
const MaxRecordedEvents = 100_000

// Published is one event as it was published: a copy of the event (its
// ID and CreatedAt filled in) and the handlers it was published to.
type Published struct {
	Event relaybus.Event
	// Handlers are the handlers the event got a delivery for, in the
	// order they were registered (Recorder) or in delivery ID order
	// (Stored).
	Handlers []string
}

// Recorder is a driver.Store that records every publish made through
// it, then hands every call to the store it wraps, unchanged. Give it to
// relaybus.New in place of the store. It is safe for concurrent use.
//
// It sees a publish (PublishTx, Publish, or a transactional handler's
// PublishTx) when the store accepts it, before the transaction commits:
// PublishedTx is what a transaction published so far, whatever becomes
// of it. A commit made on the transaction itself (pgx's tx.Commit) is not
// a store call, so the Recorder cannot tell what committed; Stored reads
// that from the store.
type Recorder[TTx any] struct {
	inner driver.Store[TTx]

	mu     sync.Mutex
	all    []*Published
	byTx   map[any][]*Published
	events int
}

var (
	_ driver.Store[int]     = (*Recorder[int])(nil)
	_ driver.EventPublisher = (*Recorder[int])(nil)
)

// NewRecorder returns a Recorder of store.
func NewRecorder[TTx any](store driver.Store[TTx]) *Recorder[TTx] {
	return &Recorder[TTx]{inner: store, byTx: make(map[any][]*Published)}
}

// Unwrap returns the store the Recorder wraps.
func (r *Recorder[TTx]) Unwrap() driver.Store[TTx] { return r.inner }

// ClaimsKeyRuns reports whether the wrapped store honours
// driver.DeliveryClaimParams.KeyRuns (driver.KeyRunClaimer).
func (r *Recorder[TTx]) ClaimsKeyRuns() bool { return driver.ClaimsKeyRuns(r.inner) }

// PublishedTx returns copies of the events published in tx, in the
// order they were published: nil when there were none.
func (r *Recorder[TTx]) PublishedTx(tx TTx) []*Published {
	key, ok := txKey(tx)
	if !ok {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return clonePublished(r.byTx[key])
}

// Published returns copies of every event published through the
// Recorder, in the order they were published, in whatever transaction
// and whatever became of it.
func (r *Recorder[TTx]) Published() []*Published {
	r.mu.Lock()
	defer r.mu.Unlock()
	return clonePublished(r.all)
}

// Reset forgets everything recorded.
func (r *Recorder[TTx]) Reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.all, r.byTx, r.events = nil, make(map[any][]*Published), 0
}

// txKey is tx as a map key: a transaction is one value (a pointer, for
// every relaybus store), so its identity is its value. A value of a type
// that cannot be compared cannot be told apart.
func txKey[TTx any](tx TTx) (any, bool) {
	key := any(tx)
	if v := reflect.ValueOf(key); v.IsValid() && !v.Comparable() {
		return nil, false
	}
	return key, true
}

// record records the events of params, published in the transaction of
// key (nil: in one of the store's own, EventPublish).
func (r *Recorder[TTx]) record(key any, params *driver.EventPublishParams) {
	ps := make([]*Published, len(params.Events))
	for i, ep := range params.Events {
		ps[i] = publishedOf(ep)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.all = append(r.all, ps...)
	r.events += len(ps)
	if key != nil {
		r.byTx[key] = append(r.byTx[key], ps...)
	}
}

// room refuses a publish that would take the Recorder past
// MaxRecordedEvents, before the store sees it.
func (r *Recorder[TTx]) room(params *driver.EventPublishParams) error {
	if params == nil {
		return nil // the store's Validate says what is wrong
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.events+len(params.Events) > MaxRecordedEvents {
		return fmt.Errorf("relaybustest: the recorder holds %d events, and %d more would pass MaxRecordedEvents (%d): call Reset between a test's phases: %w",
			r.events, len(params.Events), MaxRecordedEvents, relaytype.ErrInvalid)
	}
	return nil
}

func publishedOf(ep *driver.EventPublish) *Published {
	p := &Published{Event: *ep.Event}
	p.Event.Payload = bytes.Clone(p.Event.Payload)
	p.Event.Headers = maps.Clone(p.Event.Headers)
	for _, d := range ep.Deliveries {
		p.Handlers = append(p.Handlers, d.Handler)
	}
	return p
}

func clonePublished(ps []*Published) []*Published {
	if len(ps) == 0 {
		return nil
	}
	out := make([]*Published, len(ps))
	for i, p := range ps {
		c := *p
		c.Event.Payload = bytes.Clone(p.Event.Payload)
		c.Event.Headers = maps.Clone(p.Event.Headers)
		c.Handlers = append([]string(nil), p.Handlers...)
		out[i] = &c
	}
	return out
}

// EventPublishTx records the events once the store has accepted them.
func (r *Recorder[TTx]) EventPublishTx(ctx context.Context, tx TTx, params *driver.EventPublishParams) (*driver.EventPublishResult, error) {
	key, ok := txKey(tx)
	if !ok {
		return nil, fmt.Errorf("relaybustest: a transaction of type %T cannot be told apart from another (it is not comparable): %w", any(tx), relaytype.ErrInvalid)
	}
	if err := r.room(params); err != nil {
		return nil, err
	}
	res, err := r.inner.EventPublishTx(ctx, tx, params)
	if err == nil {
		r.record(key, params)
	}
	return res, err
}

// EventPublish is Bus.Publish's path: the wrapped store's EventPublish
// when it has one, else a transaction of its own (TxBegin,
// EventPublishTx, TxCommit, as Bus.Publish does without the capability).
// The events are recorded once they committed.
func (r *Recorder[TTx]) EventPublish(ctx context.Context, params *driver.EventPublishParams) (*driver.EventPublishResult, error) {
	if err := r.room(params); err != nil {
		return nil, err
	}
	var res *driver.EventPublishResult
	var err error
	if p, ok := r.inner.(driver.EventPublisher); ok {
		res, err = p.EventPublish(ctx, params)
	} else {
		res, err = r.publishInTx(ctx, params)
	}
	if err == nil {
		r.record(nil, params)
	}
	return res, err
}

func (r *Recorder[TTx]) publishInTx(ctx context.Context, params *driver.EventPublishParams) (*driver.EventPublishResult, error) {
	tx, err := r.inner.TxBegin(ctx)
	if err != nil {
		return nil, fmt.Errorf("begin: %w", err)
	}
	res, err := r.inner.EventPublishTx(ctx, tx, params)
	if err != nil {
		if rbErr := r.inner.TxRollback(context.WithoutCancel(ctx), tx); rbErr != nil {
			return nil, fmt.Errorf("%w (and the rollback: %w)", err, rbErr)
		}
		return nil, err
	}
	if err := r.inner.TxCommit(ctx, tx); err != nil {
		return nil, fmt.Errorf("commit: %w", err)
	}
	return res, nil
}

// The other methods hand the call to the wrapped store.

func (r *Recorder[TTx]) Setup(ctx context.Context) error { return r.inner.Setup(ctx) }

func (r *Recorder[TTx]) TxBegin(ctx context.Context) (TTx, error) { return r.inner.TxBegin(ctx) }

func (r *Recorder[TTx]) TxCommit(ctx context.Context, tx TTx) error { return r.inner.TxCommit(ctx, tx) }

func (r *Recorder[TTx]) TxRollback(ctx context.Context, tx TTx) error {
	return r.inner.TxRollback(ctx, tx)
}

func (r *Recorder[TTx]) DeliveryClaim(ctx context.Context, params *driver.DeliveryClaimParams) ([]*relaytype.Delivery, error) {
	return r.inner.DeliveryClaim(ctx, params)
}

// ClaimsCompletions reports whether the wrapped store completes and
// claims in one transaction (driver.CompletingClaimer).
func (r *Recorder[TTx]) ClaimsCompletions() bool { return driver.ClaimsCompletions(r.inner) }

// DeliveryCompleteClaim passes the call to the wrapped store; an error
// wrapping errors.ErrUnsupported when it has no such call (a Bus never
// makes it then: ClaimsCompletions reports false).
func (r *Recorder[TTx]) DeliveryCompleteClaim(ctx context.Context, params *driver.DeliveryCompleteClaimParams) (*driver.DeliveryCompleteClaimResult, error) {
	c, ok := r.inner.(driver.CompletingClaimer)
	if !ok {
		return nil, fmt.Errorf("relaybustest: the wrapped store does not complete and claim in one call: %w", errors.ErrUnsupported)
	}
	return c.DeliveryCompleteClaim(ctx, params)
}

func (r *Recorder[TTx]) LeaseExtend(ctx context.Context, params *driver.LeaseExtendParams) ([]bool, error) {
	return r.inner.LeaseExtend(ctx, params)
}

func (r *Recorder[TTx]) DeliveryComplete(ctx context.Context, params *driver.DeliveryCompleteParams) (bool, error) {
	return r.inner.DeliveryComplete(ctx, params)
}

func (r *Recorder[TTx]) DeliveryCompleteMany(ctx context.Context, params *driver.DeliveryCompleteManyParams) ([]bool, error) {
	return r.inner.DeliveryCompleteMany(ctx, params)
}

func (r *Recorder[TTx]) DeliveryCompleteTx(ctx context.Context, tx TTx, params *driver.DeliveryCompleteParams) (bool, error) {
	return r.inner.DeliveryCompleteTx(ctx, tx, params)
}

func (r *Recorder[TTx]) DeliveryReschedule(ctx context.Context, params *driver.DeliveryRescheduleParams) (bool, error) {
	return r.inner.DeliveryReschedule(ctx, params)
}

func (r *Recorder[TTx]) DeliveryBury(ctx context.Context, params *driver.DeliveryBuryParams) (bool, error) {
	return r.inner.DeliveryBury(ctx, params)
}

func (r *Recorder[TTx]) DeliveryRelease(ctx context.Context, params *driver.DeliveryReleaseParams) (bool, error) {
	return r.inner.DeliveryRelease(ctx, params)
}

func (r *Recorder[TTx]) OwnerRelinquish(ctx context.Context, params *driver.OwnerRelinquishParams) (int, error) {
	return r.inner.OwnerRelinquish(ctx, params)
}

func (r *Recorder[TTx]) DeliveryRequeue(ctx context.Context, params *driver.DeliveryRequeueParams) error {
	return r.inner.DeliveryRequeue(ctx, params)
}

func (r *Recorder[TTx]) DeliveryList(ctx context.Context, params *driver.DeliveryListParams) (*driver.DeliveryListResult, error) {
	return r.inner.DeliveryList(ctx, params)
}

func (r *Recorder[TTx]) Statistics(ctx context.Context, params *driver.StatisticsParams) (*relaytype.Statistics, error) {
	return r.inner.Statistics(ctx, params)
}

func (r *Recorder[TTx]) Purge(ctx context.Context, params *driver.PurgeParams) (*driver.PurgeResult, error) {
	return r.inner.Purge(ctx, params)
}

// HandlerPause implements driver.Store: passed through.
func (r *Recorder[TTx]) HandlerPause(ctx context.Context, params *driver.HandlerPauseParams) error {
	return r.inner.HandlerPause(ctx, params)
}

// HandlerResume implements driver.Store: passed through.
func (r *Recorder[TTx]) HandlerResume(ctx context.Context, params *driver.HandlerResumeParams) (bool, error) {
	return r.inner.HandlerResume(ctx, params)
}

// HandlersPaused implements driver.Store: passed through.
func (r *Recorder[TTx]) HandlersPaused(ctx context.Context, params *driver.HandlersPausedParams) ([]relaytype.PausedHandler, error) {
	return r.inner.HandlersPaused(ctx, params)
}
