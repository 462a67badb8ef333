package relaybus

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/berkcansavur/relaybus/relaybus/driver"
)

// Working due deliveries on the calling goroutine (Work): what a test,
// or a script that drains a backlog once, needs instead of a dispatcher
// that runs until it is stopped. relaybus/relaybustest builds on it.

// WorkParams bound a Work call. A nil *WorkParams takes every default.
type WorkParams struct {
	// Handlers limits the call to these of the bus's handlers (each one
	// registered with Handle, HandleTx, HandleBatch or HandleBatchTx); empty: every
	// handler the bus runs. A batch handler gets one delivery per call
	// here: Work runs deliveries one at a time.
	Handlers []string
	// Limit bounds the deliveries run by the call: 0 means
	// DefaultWorkLimit, else [1, MaxWorkLimit].
	Limit int
}

// WorkResult is what a Work call ran.
type WorkResult struct {
	// Worked has one entry per delivery run (or given back unrun), in
	// the order they ran.
	Worked []*Worked
	// LimitReached: the call stopped after Limit deliveries; more may be
	// due.
	LimitReached bool
}

// Worked is one delivery a Work call claimed, and how its attempt ended.
type Worked struct {
	// Delivery is the delivery as it was claimed (Attempts is the
	// attempt that ran). It must not be modified.
	Delivery *Delivery
	// Outcome is what the store recorded for the attempt (see Finish).
	Outcome FinishOutcome
	// HandlerErr is the attempt's error when the handler, or a middleware
	// of its, failed: the error it returned, or its panic; nil when it
	// returned nil or did not run.
	HandlerErr error
	// WriteErr is the final write's error (Outcome FinishWriteFailed).
	WriteErr error
}

// Work claims the deliveries of the bus's handlers that are due and runs
// them one at a time, on the calling goroutine, as the dispatcher runs
// them (middleware, timeouts, panics, Permanent errors, retry backoff,
// transactional handlers, Config.BeforeComplete and Config.AfterFinish),
// until a claim finds nothing due or params.Limit deliveries have run.
// Each outcome is written to the store before the next delivery is
// claimed, so a keyed event's next delivery runs in the same call, and a
// handler's failure is rescheduled by Config.Now plus its backoff: it
// runs again in a later call once that clock has passed it. Completions
// are not batched. Leases are renewed while a handler runs, and handed
// back before Work returns.
//
// It is meant for tests (relaybus/relaybustest) and one-off scripts, not
// as a dispatcher: it returns when nothing is due, and it does not wait
// for what other processes publish. A bus runs Work or its dispatcher,
// never both at once: Work returns ErrAlreadyRunning while the dispatcher
// (or another Work call) runs, and ErrClosed once the dispatcher has shut
// down; while Work runs, Start, Run, Handle, HandleTx and Declare refuse
// as they do while the dispatcher runs. Publish and PublishTx work
// throughout, so a handler may publish. Work may be called any number of
// times, and Start after it.
//
// The result lists what ran even when Work returns an error: a claim that
// failed (part way: what it did claim is run first), or ctx done (the
// deliveries claimed but not yet run are given back, spending no
// attempt).
func (b *Bus[TTx]) Work(ctx context.Context, params *WorkParams) (*WorkResult, error) {
	var p WorkParams
	if params != nil {
		p = *params
	}
	switch {
	case p.Limit == 0:
		p.Limit = DefaultWorkLimit
	case p.Limit < 0 || p.Limit > MaxWorkLimit:
		return nil, invalidf("work: Limit %d out of range [1, %d]", p.Limit, MaxWorkLimit)
	}
	w, err := b.beginWork(p.Handlers)
	if err != nil {
		return nil, err
	}
	defer b.endWork()
	return w.run(ctx, p.Limit)
}

// beginWork marks the bus as running for a Work call and returns the
// call's worker, whose dispatcher runs the handlers names (every handler
// the bus runs when empty).
func (b *Bus[TTx]) beginWork(names []string) (*worker[TTx], error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case stateRunning:
		return nil, fmt.Errorf("relaybus: work: %w", ErrAlreadyRunning)
	case stateStopped:
		return nil, fmt.Errorf("relaybus: work: the dispatcher has shut down: %w", ErrClosed)
	}
	if len(names) == 0 {
		for name, h := range b.handlers {
			if h.runs() {
				names = append(names, name)
			}
		}
		if len(names) == 0 {
			return nil, invalidf("work: no handler to run (Declare only registers handlers for publishing)")
		}
		slices.Sort(names)
	}
	w := &worker[TTx]{}
	run := make(map[string]*handler[TTx], len(names))
	for _, name := range names {
		h := b.handlers[name]
		if h == nil || !h.runs() {
			return nil, invalidf("work: handler %q is not one this bus runs (registered with Handle, HandleTx, HandleBatch or HandleBatchTx)", name)
		}
		if _, dup := run[name]; dup {
			return nil, invalidf("work: handler %q is named twice", name)
		}
		// The attempt's error is caught outermost, inside the
		// dispatcher's own recovery of panics, so what the dispatcher
		// sees is unchanged.
		c := *h
		c.middleware = append([]Middleware{w.catch}, h.middleware...)
		if h.batchFn != nil {
			c.batchFn = w.catchBatch(h.batchFn)
		}
		if h.batchTxFn != nil {
			fn := h.batchTxFn
			c.batchTxFn = func(ctx context.Context, tx TTx, key string, ds []*Delivery) []error {
				return w.catchBatch(func(ctx context.Context, key string, ds []*Delivery) []error { return fn(ctx, tx, key, ds) })(ctx, key, ds)
			}
		}
		run[name] = &c
	}
	cfg := b.cfg
	cfg.CompletionBatchWindow = Disabled // each completion is written before the next claim
	userAfter := cfg.AfterFinish
	cfg.AfterFinish = func(ctx context.Context, f Finish) {
		w.finished(f)
		if userAfter != nil {
			userAfter(ctx, f)
		}
	}
	d, err := newDispatcher(b.store, cfg, slices.Clone(names), run)
	if err != nil {
		return nil, err
	}
	w.d = d
	b.state = stateRunning
	return w, nil
}

// endWork ends a Work call: the bus can run Work, or its dispatcher,
// again.
func (b *Bus[TTx]) endWork() {
	b.mu.Lock()
	b.state = stateNew
	b.mu.Unlock()
}

// worker is one Work call: a dispatcher whose claims it makes, and whose
// jobs it runs, itself, one at a time.
type worker[TTx any] struct {
	d *dispatcher[TTx]
	// current is the entry of the delivery running. Set and read only
	// by the calling goroutine: the catch middleware and AfterFinish run
	// on it (the completer is off, and the renewal makes no final
	// writes).
	current *Worked
}

// run claims and runs due deliveries until none is due, limit have run,
// a claim fails or ctx is done; then it stops the renewal and hands the
// lanes back.
func (w *worker[TTx]) run(ctx context.Context, limit int) (*WorkResult, error) {
	d := w.d
	d.writeCtx = context.WithoutCancel(ctx)
	var bg sync.WaitGroup
	renewStop := make(chan struct{})
	bg.Go(func() { d.renewLoop(renewStop) })
	res := &WorkResult{}
	err := w.claimAndRun(ctx, limit, res)
	close(renewStop)
	bg.Wait()
	wctx, cancel := context.WithTimeout(d.writeCtx, d.cfg.LeaseDuration)
	defer cancel()
	// Nothing is in flight: this hands back the lanes the claims took, so
	// that a dispatcher of another owner need not wait for their leases.
	if _, rerr := d.store.OwnerRelinquish(wctx, &driver.OwnerRelinquishParams{Owner: d.cfg.Owner, Now: d.cfg.Now()}); rerr != nil && err == nil {
		err = fmt.Errorf("relaybus: work: relinquish: %w", rerr)
	}
	return res, err
}

func (w *worker[TTx]) claimAndRun(ctx context.Context, limit int, res *WorkResult) error {
	d := w.d
	for {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("relaybus: work: %w", err)
		}
		left := limit - len(res.Worked)
		if left <= 0 {
			res.LimitReached = true
			return nil
		}
		p, some, err := d.claimParams(ctx) // keeps the mark of the names validated once
		if err != nil {
			return fmt.Errorf("relaybus: work: %w", err)
		}
		if !some {
			return nil // every handler asked for is paused
		}
		now := d.cfg.Now()
		// Nothing is in flight between claims, so a suspect may come; it
		// comes alone and runs alone.
		p.Limit, p.Now, p.Busy = min(d.cfg.BatchSize, left), now, false
		// Deliveries run one at a time here, in claim order (by due
		// time, not sequence): a batch handler gets a batch of one, and
		// a claim must return a key's head only.
		p.KeyRuns = nil
		cctx, cancel := context.WithTimeout(d.writeCtx, d.cfg.LeaseDuration)
		ds, err := d.store.DeliveryClaim(cctx, &p)
		cancel()
		// A store may fail part way and return what it did claim: run it.
		for _, del := range ds {
			w.runOne(ctx, del, now, len(ds) > 1, res)
		}
		if err != nil {
			return fmt.Errorf("relaybus: work: claim: %w", err)
		}
		if len(ds) == 0 {
			return nil
		}
	}
}

// runOne runs one claimed delivery and records how it ended. A suspect
// claimed beside other work is given back unrun, as the dispatcher does
// (startClaimed): it must run with nothing else held.
func (w *worker[TTx]) runOne(ctx context.Context, del *Delivery, claimedAt time.Time, withOthers bool, res *WorkResult) {
	d := w.d
	j, h := d.accept(del, claimedAt)
	if j == nil {
		return // not one of ours: released
	}
	entry := &Worked{Delivery: del}
	w.current = entry
	defer func() { w.current = nil }()
	res.Worked = append(res.Worked, entry)
	d.hold(j)
	if del.Suspect && withOthers {
		d.beginFinish(j)
		d.release(j)
	} else {
		d.runJob(ctx, j, h)
	}
	if entry.Outcome == "" {
		// The renewal found the lease lost while the handler ran:
		// nothing was written for it (and AfterFinish was not called).
		entry.Outcome = FinishLeaseLost
	}
}

// catch is the outermost middleware of every handler a Work call runs:
// it records the attempt's error, or its panic (which it passes on to the
// dispatcher's recovery).
func (w *worker[TTx]) catch(ctx context.Context, _ *Delivery, next func(context.Context) error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			if w.current != nil {
				w.current.HandlerErr = fmt.Errorf("relaybus: handler panicked: %v", p)
			}
			panic(p)
		}
	}()
	err = next(ctx)
	if w.current != nil {
		w.current.HandlerErr = err
	}
	return err
}

// catchBatch is catch for a batch handler, which a Work call runs one
// delivery at a time (a batch of one): it records the delivery's error, or
// the handler's panic.
func (w *worker[TTx]) catchBatch(fn BatchHandlerFunc) BatchHandlerFunc {
	return func(ctx context.Context, key string, ds []*Delivery) (errs []error) {
		defer func() {
			if p := recover(); p != nil {
				if w.current != nil {
					w.current.HandlerErr = fmt.Errorf("relaybus: handler panicked: %v", p)
				}
				panic(p)
			}
		}()
		errs = fn(ctx, key, ds)
		if w.current != nil && len(errs) == 1 {
			w.current.HandlerErr = errs[0]
		}
		return errs
	}
}

// finished records the outcome the dispatcher reports for the delivery
// running.
func (w *worker[TTx]) finished(f Finish) {
	if w.current != nil && f.Delivery != nil && f.Delivery.ID == w.current.Delivery.ID {
		w.current.Outcome, w.current.WriteErr = f.Outcome, f.Err
	}
}
