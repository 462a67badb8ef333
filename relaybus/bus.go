package relaybus

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/berkcansavur/relaybus/relaybus/driver"
)

// Bus publishes events and dispatches their deliveries to handlers. It is
// safe for concurrent use. Register handlers first (Handle, HandleTx,
// Declare), then publish and run the dispatcher (Run, or Start and Stop).
// The dispatcher runs once: after it stops, Start and Run return ErrClosed.
type Bus[TTx any] struct {
	store driver.Store[TTx]
	cfg   Config
	// groups gathers concurrent Publish calls into group commits
	// (publish_group.go); nil when Config.PublishGroupWait is Disabled.
	groups *publishGroups

	mu       sync.RWMutex
	state    busState
	handlers map[string]*handler[TTx]
	byType   map[string][]driver.DeliverySpec
	// cancel stops the running dispatcher; done is closed when it has shut
	// down, and runErr is its result then.
	cancel context.CancelFunc
	done   chan struct{}
	runErr error
	// disp is the dispatcher once Start has run (it runs once).
	disp *dispatcher[TTx]
}

type busState int

const (
	stateNew busState = iota
	stateRunning
	stateStopped
)

// New returns a Bus on store. Zero Config fields take their defaults; a field
// out of range is an ErrInvalid error.
func New[TTx any](store driver.Store[TTx], cfg Config) (*Bus[TTx], error) {
	if store == nil {
		return nil, invalidf("store is nil")
	}
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	b := &Bus[TTx]{
		store:    store,
		cfg:      c,
		handlers: make(map[string]*handler[TTx]),
		byType:   make(map[string][]driver.DeliverySpec),
	}
	if c.PublishGroupWait != Disabled {
		b.groups = newPublishGroups(c.PublishGroupWait, c.Now, c.MaxPayloadBytes, b.publishAlone)
	}
	return b, nil
}

// Owner is the lease owner name this bus claims under.
func (b *Bus[TTx]) Owner() string { return b.cfg.Owner }

// Setup creates or upgrades the store's schema (idempotent).
func (b *Bus[TTx]) Setup(ctx context.Context) error { return b.store.Setup(ctx) }

// Requeue makes a dead delivery pending again with a fresh attempt budget.
// ErrNotFound if it does not exist, ErrNotDead if it is not dead.
func (b *Bus[TTx]) Requeue(ctx context.Context, deliveryID string) error {
	return b.store.DeliveryRequeue(ctx, &driver.DeliveryRequeueParams{DeliveryID: deliveryID, Now: b.cfg.Now()})
}

// ListDeliveries lists deliveries in ID order; nil params list the first
// page of all.
func (b *Bus[TTx]) ListDeliveries(ctx context.Context, params *DeliveryListParams) (*DeliveryListResult, error) {
	var p driver.DeliveryListParams
	if params != nil {
		// The conversion holds while the two types have the same fields:
		// a field added to one only fails to compile here.
		p = driver.DeliveryListParams(*params)
	}
	res, err := b.store.DeliveryList(ctx, &p)
	if err != nil || res == nil {
		return nil, err
	}
	return &DeliveryListResult{Deliveries: res.Deliveries, Next: res.Next}, nil
}

// Statistics counts deliveries per status and handler. Completed counts
// only what the store still holds of completed deliveries: a lane-lease
// store deletes a delivery when it completes, so Completed is 0 unless the
// store keeps a completion history (the PostgreSQL and MongoDB stores'
// CompletionHistory option, the memory store's RetainCompleted) or holds
// rows a 0.1.0 store completed. The counts are read from the deliveries
// themselves, so on a large backlog the call costs a scan of them, unless
// the store keeps counters (the PostgreSQL store's
// EnableStatisticsCounters).
func (b *Bus[TTx]) Statistics(ctx context.Context) (*Statistics, error) {
	return b.store.Statistics(ctx, &driver.StatisticsParams{Now: b.cfg.Now()})
}

// Retention says how long finished deliveries are kept. 0 keeps that kind
// forever.
//
// Events follow Completed, never Dead: a store that deletes a delivery
// when it completes keeps its event as the record that the handler ran,
// and that record is what makes Event.ID an idempotency key (a republish
// of the ID gets no delivery for a handler the event already had). So an
// event is purged only when it is older than Completed and has no
// delivery left; with Completed 0 no event is ever purged, whatever Dead
// says. Once an event is purged, publishing its ID again is a new event
// and runs every handler.
type Retention struct{ Completed, Dead time.Duration }

// PurgeExpired deletes completed and dead deliveries older than their
// retention, then the events older than the completed retention that
// have no delivery left (none when completed ones are kept forever; see
// Retention).
func (b *Bus[TTx]) PurgeExpired(ctx context.Context, r Retention) (*PurgeResult, error) {
	if r.Completed < 0 || r.Dead < 0 {
		return nil, invalidf("purge: negative retention (Completed %v, Dead %v)", r.Completed, r.Dead)
	}
	now := b.cfg.Now()
	p := &driver.PurgeParams{Now: now}
	if r.Completed > 0 {
		p.CompletedBefore = now.Add(-r.Completed)
	}
	if r.Dead > 0 {
		p.DeadBefore = now.Add(-r.Dead)
	}
	if p.CompletedBefore.IsZero() && p.DeadBefore.IsZero() {
		return &PurgeResult{}, nil
	}
	res, err := b.store.Purge(ctx, p)
	if err != nil || res == nil {
		return nil, err
	}
	return &PurgeResult{Deliveries: res.Deliveries, Events: res.Events}, nil
}

// Run dispatches until ctx is done, then shuts down gracefully and returns
// nil, or the first fatal error. The shutdown logs its cause (ctx's) and
// what is in flight, stops claiming, cancels the running handlers'
// contexts and waits for them at most Config.ShutdownTimeout (default
// DefaultShutdownTimeout); handlers that ignore their context past it are
// logged and left running, with their leases left to expire (see
// Config.ShutdownTimeout). Then it writes the completions queued,
// releases the leases still held and returns. Stop bounds the wait by its
// own context as well.
func (b *Bus[TTx]) Run(ctx context.Context) error {
	if err := b.Start(ctx); err != nil {
		return err
	}
	<-b.done
	return b.runErr
}

// Start runs the dispatcher in the background until ctx is done or Stop is
// called.
func (b *Bus[TTx]) Start(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case stateRunning:
		return ErrAlreadyRunning
	case stateStopped:
		return ErrClosed
	}
	var names []string
	run := make(map[string]*handler[TTx])
	for name, h := range b.handlers {
		if h.runs() {
			names = append(names, name)
			run[name] = h
		}
	}
	if len(names) == 0 {
		return invalidf("start: no handler to run (Declare only registers handlers for publishing)")
	}
	d, err := newDispatcher(b.store, b.cfg, names, run)
	if err != nil {
		return err
	}
	runCtx, cancel := context.WithCancel(ctx)
	b.disp = d
	b.state = stateRunning
	b.cancel = cancel
	b.done = make(chan struct{})
	go func() {
		err := d.run(runCtx)
		cancel()
		b.mu.Lock()
		b.runErr = err
		b.state = stateStopped
		b.mu.Unlock()
		close(b.done)
	}()
	return nil
}

// Stop shuts the dispatcher down gracefully and waits for it until ctx is
// done (then it returns ctx's error; the shutdown goes on in the
// background). Stop on a bus that never started returns nil.
func (b *Bus[TTx]) Stop(ctx context.Context) error {
	b.mu.RLock()
	cancel, done := b.cancel, b.done
	b.mu.RUnlock()
	if done == nil {
		return nil
	}
	cancel()
	select {
	case <-done:
		return b.runErr
	case <-ctx.Done():
		return fmt.Errorf("relaybus: stop: %w", ctx.Err())
	}
}
