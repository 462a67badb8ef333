package batch

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// PerKey batches inputs per key, with at most one batch in flight per
// key (docs/adr/0001-per-key-batching.md). Build it with NewPerKey; it is safe for concurrent use.
type PerKey[K comparable, In, Out any] struct {
	cfg   Config[In]
	fn    func(ctx context.Context, key K, items []In) ([]Out, error)
	start time.Time // now() is measured from here on the monotonic clock

	// mu guards everything below it. Admission (the open check and the
	// enqueue) is one critical section, and so is taking a batch together
	// with recording it in the worker's slot: the two atomic steps the
	// ADR first had from STM, and formal/perkey.pml checks are needed.
	mu          sync.Mutex
	lanes       lanes[K, *call[In, Out]]
	closed      bool
	slots       [][]entry[*call[In, Out]] // per worker: the batch it runs
	roomWaiters int
	room        chan struct{} // closed and replaced when room frees up
	idleExit    chan struct{} // closed once closed && nothing queued
	idleExited  bool

	wake      chan struct{} // one token per lane that became ready
	clockPoke chan struct{} // the earliest deadline changed
	closing   chan struct{} // closed by Close

	ctx    context.Context // passed to fn; cancelled when Close gives up
	cancel context.CancelFunc
	wg     sync.WaitGroup
	exited chan struct{} // closed when every goroutine has returned
}

type call[In, Out any] struct {
	in        In
	res       chan result[Out] // buffered 1: delivery never blocks; nil for Enqueue
	delivered atomic.Bool      // the worker and a giving-up Close may race
}

type result[Out any] struct {
	out Out
	err error
}

// deliver gives the caller its one result; later deliveries are dropped,
// and so is every result of an enqueued item (no one waits for it).
func (c *call[In, Out]) deliver(out Out, err error) {
	if c.res != nil && c.delivered.CompareAndSwap(false, true) {
		c.res <- result[Out]{out, err}
	}
}

// Stats is a snapshot of a batcher's state.
type Stats struct {
	Lanes        int   // keys with waiting items or a batch in flight
	Queued       int   // items waiting, not yet in a batch
	QueuedWeight int64 // their weight
	InFlight     int   // batches running
}

// NewPerKey starts a per-key batcher: fn is called with one key's items
// in submission order, never concurrently for the same key, by up to
// cfg.MaxInFlight workers shared by all keys. fn must return one result
// per item, in order, or an error for the whole batch; it must not keep
// the items slice after it returns. Call Close to stop it.
func NewPerKey[K comparable, In, Out any](cfg PerKeyConfig[In], fn func(ctx context.Context, key K, items []In) ([]Out, error)) (*PerKey[K, In, Out], error) {
	return newPerKey(cfg, 1, fn)
}

func newPerKey[K comparable, In, Out any](cfg Config[In], maxBusy int, fn func(ctx context.Context, key K, items []In) ([]Out, error)) (*PerKey[K, In, Out], error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if fn == nil {
		return nil, errors.New("batch: nil batch function")
	}
	ctx, cancel := context.WithCancel(context.Background())
	b := &PerKey[K, In, Out]{
		cfg:   cfg,
		fn:    fn,
		start: time.Now(),
		lanes: newLanes[K, *call[In, Out]](lanesConfig{
			maxSize:   cfg.MaxSize,
			maxWeight: cfg.MaxWeight,
			linger:    int64(cfg.Linger),
			maxBusy:   maxBusy,
		}),
		slots:     make([][]entry[*call[In, Out]], cfg.MaxInFlight),
		idleExit:  make(chan struct{}),
		wake:      make(chan struct{}, cfg.MaxInFlight),
		clockPoke: make(chan struct{}, 1),
		closing:   make(chan struct{}),
		ctx:       ctx,
		cancel:    cancel,
		exited:    make(chan struct{}),
	}
	b.wg.Add(cfg.MaxInFlight)
	for i := range cfg.MaxInFlight {
		go b.work(i)
	}
	if cfg.Linger > 0 { // with no linger every item is due at once
		b.wg.Add(1)
		go b.clock()
	}
	go func() {
		b.wg.Wait()
		cancel()
		close(b.exited)
	}()
	return b, nil
}

// now is the time for lanes, read under mu so that it never decreases
// from one transition to the next.
func (b *PerKey[K, In, Out]) now() int64 { return int64(time.Since(b.start)) }

// Submit adds item to key's lane and waits for its result. It returns
// ErrClosed after Close, ErrFull when the queue is full and WhenFull is
// Reject, ErrWeight for an item that could never fit, and ctx.Err() if
// ctx ends first; in that last case the item is withdrawn if its batch
// has not started, and otherwise its result is discarded.
func (b *PerKey[K, In, Out]) Submit(ctx context.Context, key K, item In) (Out, error) {
	var zero Out
	c := &call[In, Out]{in: item, res: make(chan result[Out], 1)}
	seq, err := b.admit(ctx, key, c)
	if err != nil {
		return zero, err
	}
	select {
	case r := <-c.res:
		return r.out, r.err
	case <-ctx.Done():
	}
	b.mu.Lock()
	_, withdrawn := b.lanes.cancel(key, seq)
	if withdrawn {
		b.dequeued()
	}
	b.mu.Unlock()
	if !withdrawn {
		// Already in a batch (its result will be dropped) or already
		// answered: prefer an answer that is there.
		select {
		case r := <-c.res:
			return r.out, r.err
		default:
		}
	}
	return zero, ctx.Err()
}

// Enqueue adds item to key's lane like Submit, but returns once the item
// is admitted instead of waiting for its result, which is dropped: the
// batch function must act on its items itself. It is for a caller that
// hands work off (relaybus's dispatcher hands off completions) and must
// not keep a goroutine and a result channel per item to do so. It returns
// Submit's errors for an item that is not admitted; ctx bounds only the
// wait for room. Close runs an enqueued item's batch like any other.
func (b *PerKey[K, In, Out]) Enqueue(ctx context.Context, key K, item In) error {
	_, err := b.admit(ctx, key, &call[In, Out]{in: item})
	return err
}

// admit weighs c's item, waits for room (or refuses, per WhenFull) and
// adds it to key's lane, returning its sequence number in the lane.
func (b *PerKey[K, In, Out]) admit(ctx context.Context, key K, c *call[In, Out]) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	var w int64
	if b.cfg.Weigh != nil {
		w = b.cfg.Weigh(c.in)
		if m := b.cfg.maxItemWeight(); w < 0 || w > m {
			return 0, fmt.Errorf("batch: item weight %d out of range [0, %d]: %w", w, m, ErrWeight)
		}
	}

	b.mu.Lock()
	for {
		if b.closed {
			b.mu.Unlock()
			return 0, ErrClosed
		}
		if b.hasRoom(w) {
			break
		}
		if b.cfg.WhenFull == Reject {
			b.mu.Unlock()
			return 0, ErrFull
		}
		if b.room == nil {
			b.room = make(chan struct{})
		}
		room := b.room
		b.roomWaiters++
		b.mu.Unlock()
		select {
		case <-room:
		case <-ctx.Done():
		case <-b.closing:
		}
		b.mu.Lock()
		b.roomWaiters--
		if err := ctx.Err(); err != nil {
			b.mu.Unlock()
			return 0, err
		}
	}
	_, hadDeadline := b.lanes.nextDeadline()
	seq, ready := b.lanes.admit(key, c, w, b.now())
	_, hasDeadline := b.lanes.nextDeadline()
	b.mu.Unlock()
	if ready {
		signal(b.wake)
	}
	if !hadDeadline && hasDeadline {
		signal(b.clockPoke)
	}
	return seq, nil
}

func (b *PerKey[K, In, Out]) hasRoom(w int64) bool {
	return b.lanes.queued < b.cfg.MaxQueued &&
		(b.cfg.MaxQueuedWeight == 0 || b.lanes.queuedWeight+w <= b.cfg.MaxQueuedWeight)
}

// dequeued runs under mu after items left the queue: it lets blocked
// submitters retry, and idle workers exit once a closed batcher is empty.
func (b *PerKey[K, In, Out]) dequeued() {
	if b.roomWaiters > 0 && b.room != nil {
		close(b.room)
		b.room = nil
	}
	if b.closed && b.lanes.queued == 0 && !b.idleExited {
		b.idleExited = true
		close(b.idleExit)
	}
}

// signal sends n wake-ups without blocking. A full channel already holds
// enough tokens to wake every idle receiver, so dropping is safe.
func signal(ch chan struct{}) { signalN(ch, 1) }

func signalN(ch chan struct{}, n int) {
	for range n {
		select {
		case ch <- struct{}{}:
		default:
			return
		}
	}
}

func (b *PerKey[K, In, Out]) work(i int) {
	defer b.wg.Done()
	var buf []entry[*call[In, Out]]
	var ins []In
	b.mu.Lock()
	for {
		key, batch, ok := b.lanes.take(b.now(), buf[:0])
		if ok {
			// Recorded in the same critical section as the take, so a
			// Close that gives up can always find and release its callers.
			b.slots[i] = batch
			b.dequeued()
			// A lane can be ready without a wake-up of its own: New's one
			// lane rejoins the line at take, and admissions to a lane
			// already in line send none. Pass the baton on.
			more := b.lanes.ready.len() > b.lanes.readyStale
			b.mu.Unlock()
			if more {
				signal(b.wake)
			}
			ins = b.run(key, batch, ins)
			b.mu.Lock()
			b.slots[i] = nil
			clear(batch) // under mu: a giving-up Close may be reading it
			buf = batch
			b.lanes.complete(key, b.now())
			continue
		}
		if b.closed && b.lanes.queued == 0 {
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()
		select {
		case <-b.wake:
		case <-b.idleExit:
		}
		b.mu.Lock()
	}
}

// run calls fn on one batch and gives every caller its own result.
func (b *PerKey[K, In, Out]) run(key K, batch []entry[*call[In, Out]], ins []In) []In {
	ins = ins[:0]
	for _, e := range batch {
		ins = append(ins, e.val.in)
	}
	outs, err := b.call(key, ins)
	if err == nil && len(outs) != len(batch) {
		err = fmt.Errorf("batch: batch function returned %d results for %d items: %w", len(outs), len(batch), ErrResultCount)
	}
	var zero Out
	for i, e := range batch {
		if err != nil {
			e.val.deliver(zero, err)
		} else {
			e.val.deliver(outs[i], nil)
		}
	}
	// Only now: fn may have returned ins itself as its results.
	clear(ins)
	return ins[:0]
}

func (b *PerKey[K, In, Out]) call(key K, ins []In) (outs []Out, err error) {
	defer func() {
		if r := recover(); r != nil {
			outs, err = nil, &PanicError{Value: r, Stack: debug.Stack()}
		}
	}()
	return b.fn(b.ctx, key, ins)
}

// clock makes lanes due as their linger deadlines pass. It sleeps until
// the earliest deadline, or until an admission sets a first one.
func (b *PerKey[K, In, Out]) clock() {
	defer b.wg.Done()
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		b.mu.Lock()
		now := b.now()
		n := b.lanes.expire(now)
		next, ok := b.lanes.nextDeadline()
		b.mu.Unlock()
		signalN(b.wake, n)
		var tick <-chan time.Time
		if ok {
			t.Reset(time.Duration(next - now))
			tick = t.C
		}
		select {
		case <-tick:
		case <-b.clockPoke:
		case <-b.closing: // flush made everything due: no deadlines left
			return
		}
	}
}

// Close stops admission (Submit then returns ErrClosed) and waits until
// every admitted item's batch has run, without waiting out Linger. If
// ctx ends first, every caller still waiting, queued or in a running
// batch, gets ErrClosed, the context passed to the batch function is
// cancelled, and Close returns an error wrapping ctx.Err(); workers exit
// as their batch functions return. Close may be called more than once.
func (b *PerKey[K, In, Out]) Close(ctx context.Context) error {
	b.mu.Lock()
	if !b.closed {
		b.closed = true
		close(b.closing)
		n := b.lanes.flush(b.now())
		b.dequeued()
		b.mu.Unlock()
		signalN(b.wake, n)
	} else {
		b.mu.Unlock()
	}
	select {
	case <-b.exited:
		return nil
	case <-ctx.Done():
	}

	b.mu.Lock()
	release := b.lanes.drain(nil)
	for _, s := range b.slots {
		for _, e := range s {
			release = append(release, e.val)
		}
	}
	b.dequeued()
	b.mu.Unlock()
	b.cancel()
	var zero Out
	for _, c := range release {
		c.deliver(zero, ErrClosed)
	}
	return fmt.Errorf("batch: close gave up: %w", ctx.Err())
}

// Stats returns a snapshot of the batcher's state.
func (b *PerKey[K, In, Out]) Stats() Stats {
	b.mu.Lock()
	defer b.mu.Unlock()
	return Stats{
		Lanes:        len(b.lanes.m),
		Queued:       b.lanes.queued,
		QueuedWeight: b.lanes.queuedWeight,
		InFlight:     b.lanes.inFlight,
	}
}
