package relaybus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"
)

// Bounds of the dispatcher's own store writes.
const (
	// writeRetryDelay is the wait before the second try of a finishing
	// write (complete, reschedule, bury, release), doubled after each
	// failure up to writeRetryDelayMax. The tries go on as long as the
	// lease is held (see write), which renewals extend: a write given up is
	// logged, the lease expires and the delivery is claimed again
	// (at-least-once), so nothing is lost.
	writeRetryDelay = 20 * time.Millisecond
	// writeRetryDelayMax bounds the wait between two tries, so that a
	// database back from a restart is found within about this long.
	writeRetryDelayMax = time.Second
	// claimGatherMax bounds how long a claim waits for busy slots to free
	// up (see claimLoop): short enough not to matter for slow handlers.
	claimGatherMax = time.Millisecond
)

// errLeaseLost is the cause of a handler context cancelled because its lease
// is no longer held.
var errLeaseLost = errors.New("relaybus: lease lost")

// dispatcher is one run of a Bus's dispatcher.
type dispatcher[TTx any] struct {
	b        *Bus[TTx]
	store    Store[TTx]
	cfg      Config
	log      *slog.Logger
	names    []string
	handlers map[string]*handler[TTx]
	// writeCtx carries the run context's values but is never cancelled: the
	// writes that finish deliveries go on during a shutdown. Each write is
	// bounded by the lease duration instead (after it, the write is moot).
	writeCtx context.Context

	// inflight counts claimed deliveries not yet handed off (running, or
	// waiting to be queued for completion); at most Concurrency, the claim
	// loop only claims what is free. slotFreed wakes the claim loop.
	inflightMu sync.Mutex
	inflight   int
	slotFreed  chan struct{}

	// held are the leases this run still holds, by delivery ID: renewed
	// until their final write is done, including while that write waits in
	// the completion queue or a batch, or is being retried.
	mu   sync.Mutex
	held map[string]*job

	// completions queues successes for the completer (nil when completion
	// batching is disabled). Its capacity bounds the queue: a full queue
	// holds the handler's slot, which holds back claims.
	completions chan *job
	jobs        sync.WaitGroup
}

// job is one claimed delivery.
type job struct {
	d      *Delivery
	cancel context.CancelCauseFunc
	// Guarded by dispatcher.mu.
	expiresAt time.Time
	lost      bool // the lease is gone; write nothing more
	// finishing: the final write is under way (or queued for the
	// completer). It reports a lost lease itself, so a renewal that finds
	// the lease gone leaves the job to it. The lease is still renewed:
	// a completion can wait in the queue longer than what is left of the
	// lease, and if the lease then expired the delivery would be claimed
	// again and handled twice although it succeeded.
	finishing bool
}

func newDispatcher[TTx any](b *Bus[TTx], names []string, run map[string]*handler[TTx]) *dispatcher[TTx] {
	d := &dispatcher[TTx]{
		b:         b,
		store:     b.store,
		cfg:       b.cfg,
		log:       b.cfg.Logger,
		names:     names,
		handlers:  run,
		slotFreed: make(chan struct{}, 1),
		held:      make(map[string]*job),
	}
	if d.cfg.CompletionBatchWindow != Disabled {
		d.completions = make(chan *job, d.cfg.CompletionBatchMax)
	}
	return d
}

// run claims and dispatches until ctx is done, then shuts down: no more
// claims, running handlers cancelled (their ctx is derived from ctx),
// successes still completed, aborted and unstarted deliveries released, and
// finally everything the owner holds relinquished.
func (d *dispatcher[TTx]) run(ctx context.Context) error {
	d.writeCtx = context.WithoutCancel(ctx)
	d.log.Info("relaybus: dispatcher started", "owner", d.cfg.Owner, "handlers", d.names,
		"concurrency", d.cfg.Concurrency, "batch_size", d.cfg.BatchSize)

	var bg sync.WaitGroup
	renewStop := make(chan struct{})
	bg.Go(func() { d.renewLoop(renewStop) })
	completerDone := make(chan struct{})
	if d.completions != nil {
		go func() { defer close(completerDone); d.completer() }()
	} else {
		close(completerDone)
	}

	d.claimLoop(ctx)

	// Shutdown. Handlers see ctx cancelled; wait until every job has handed
	// off its delivery, then let the completer send what is queued.
	d.jobs.Wait()
	if d.completions != nil {
		close(d.completions)
	}
	<-completerDone
	close(renewStop)
	bg.Wait()

	wctx, cancel := context.WithTimeout(d.writeCtx, d.cfg.LeaseDuration)
	defer cancel()
	n, err := d.store.OwnerRelinquish(wctx, &OwnerRelinquishParams{Owner: d.cfg.Owner, Now: d.cfg.Now()})
	if err != nil {
		// Not fatal: the leases expire and other workers take over.
		d.log.Error("relaybus: relinquish failed; leases will expire", "owner", d.cfg.Owner, "error", err)
	} else if n > 0 {
		d.log.Info("relaybus: relinquished leases", "owner", d.cfg.Owner, "released", n)
	}
	d.log.Info("relaybus: dispatcher stopped", "owner", d.cfg.Owner)
	return nil
}

// claimLoop claims up to min(BatchSize, free slots) deliveries at a time and
// starts a goroutine per delivery. A full batch is followed by another claim
// at once; a short one by PollInterval of rest.
func (d *dispatcher[TTx]) claimLoop(ctx context.Context) {
	claimErrors := 0
	// A claim for one or two slots costs a store round trip like a full
	// one: when most of a batch's slots are busy, wait up to claimGatherMax
	// for more to free up, so a busy dispatcher claims in batches rather
	// than one delivery per finished handler.
	want := min(d.cfg.BatchSize, d.cfg.Concurrency)
	var gatherUntil time.Time
	for ctx.Err() == nil {
		d.inflightMu.Lock()
		free := d.cfg.Concurrency - d.inflight
		d.inflightMu.Unlock()
		if free <= 0 {
			select {
			case <-d.slotFreed:
			case <-ctx.Done():
			}
			continue
		}
		if free < (want+1)/2 {
			if gatherUntil.IsZero() {
				gatherUntil = time.Now().Add(claimGatherMax)
			}
			if wait := time.Until(gatherUntil); wait > 0 {
				t := time.NewTimer(wait)
				select {
				case <-d.slotFreed:
				case <-t.C:
				case <-ctx.Done():
				}
				t.Stop()
				continue
			}
		}
		gatherUntil = time.Time{}
		limit := min(d.cfg.BatchSize, free)
		now := d.cfg.Now()
		ds, err := d.store.DeliveryClaim(ctx, &DeliveryClaimParams{
			Owner: d.cfg.Owner, Handlers: d.names, Limit: limit, LeaseDuration: d.cfg.LeaseDuration, Now: now,
		})
		if err != nil {
			// A store may fail part way and return what it did claim
			// (relaybus/mongo claims row by row): run those rather than
			// let their leases expire and cost an attempt. After the
			// shutdown has begun they are released at once.
			d.b.stats.claimed.Add(int64(len(ds)))
			for _, del := range ds {
				d.start(ctx, del, now)
			}
			if ctx.Err() != nil {
				// A claim cut short by the shutdown may still have leased
				// rows; the final OwnerRelinquish gives them back.
				return
			}
			claimErrors++
			wait := claimErrorDelay(claimErrors, d.cfg.PollInterval)
			d.log.Error("relaybus: claim failed", "error", err, "errors_in_a_row", claimErrors, "retry_in", wait)
			sleep(ctx, wait)
			continue
		}
		claimErrors = 0
		d.b.stats.claims.Add(1)
		d.b.stats.claimed.Add(int64(len(ds)))
		for _, del := range ds {
			d.start(ctx, del, now)
		}
		if len(ds) < limit {
			sleep(ctx, d.cfg.PollInterval)
		}
	}
}

// start takes a claimed delivery into the run and starts its job.
func (d *dispatcher[TTx]) start(ctx context.Context, del *Delivery, claimedAt time.Time) {
	var h *handler[TTx]
	if del != nil {
		h = d.handlers[del.Handler]
	}
	if h == nil || del.ID == "" || del.LeaseToken == "" {
		// A store bug; never run something we did not ask for.
		d.log.Error("relaybus: claim returned a delivery this bus does not run", "delivery", del)
		if del != nil && del.ID != "" && del.LeaseToken != "" {
			d.release(&job{d: del})
		}
		return
	}
	j := &job{d: del, expiresAt: del.LeaseExpiresAt}
	if j.expiresAt.IsZero() {
		j.expiresAt = claimedAt.Add(d.cfg.LeaseDuration)
	}
	d.mu.Lock()
	d.held[del.ID] = j
	d.mu.Unlock()
	d.inflightMu.Lock()
	d.inflight++
	d.inflightMu.Unlock()
	d.jobs.Add(1)
	go func() {
		defer d.jobs.Done()
		defer d.freeSlot()
		d.runJob(ctx, j, h)
	}()
}

func (d *dispatcher[TTx]) freeSlot() {
	d.inflightMu.Lock()
	d.inflight--
	d.inflightMu.Unlock()
	select {
	case d.slotFreed <- struct{}{}:
	default:
	}
}

// runJob runs the handler of one delivery and decides what happens to it.
func (d *dispatcher[TTx]) runJob(ctx context.Context, j *job, h *handler[TTx]) {
	if ctx.Err() != nil {
		// Claimed but not started before the shutdown: give it back.
		d.release(j)
		return
	}
	hctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	d.mu.Lock()
	j.cancel = cancel
	lost := j.lost
	d.mu.Unlock()
	if lost {
		return
	}
	runCtx := hctx
	if h.timeout > 0 {
		var cancelTimeout context.CancelFunc
		runCtx, cancelTimeout = context.WithTimeout(hctx, h.timeout)
		defer cancelTimeout()
	}
	if h.txFn != nil {
		d.runTx(ctx, runCtx, j, h)
		return
	}
	err := d.call(runCtx, j, func(c context.Context) error { return h.fn(c, j.d) })
	d.finish(ctx, runCtx, j, h, err)
}

// call runs fn, turning a panic into an error (counted and logged with its
// stack) and a context error after a timeout into a clear one.
func (d *dispatcher[TTx]) call(runCtx context.Context, j *job, fn func(context.Context) error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			d.b.stats.panics.Add(1)
			err = fmt.Errorf("relaybus: handler panicked: %v", p)
			d.logJob(slog.LevelError, "relaybus: handler panicked", j, err, "stack", string(debug.Stack()))
		}
	}()
	err = fn(runCtx)
	if err != nil && errors.Is(context.Cause(runCtx), context.DeadlineExceeded) && errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("relaybus: handler timed out: %w", err)
	}
	return err
}

// finish decides the fate of a delivery whose plain handler returned err.
func (d *dispatcher[TTx]) finish(ctx, runCtx context.Context, j *job, h *handler[TTx], err error) {
	if !d.beginFinish(j) {
		return
	}
	if err == nil {
		d.b.stats.succeeded.Add(1)
		if d.completions != nil {
			d.completions <- j
			return
		}
		d.completeOne(j)
		return
	}
	d.fail(ctx, runCtx, j, h, err)
}

// beginFinish marks j as finishing, unless its lease was lost (then nothing
// more is written for it).
func (d *dispatcher[TTx]) beginFinish(j *job) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if j.lost {
		return false
	}
	j.finishing = true
	return true
}

// fail handles a failed attempt: released if the shutdown aborted it, else
// buried (Permanent, or budget spent) or rescheduled with backoff.
func (d *dispatcher[TTx]) fail(ctx, runCtx context.Context, j *job, h *handler[TTx], err error) {
	if ctx.Err() != nil && runCtx.Err() != nil && !IsPermanent(err) {
		// Aborted by the shutdown: no attempt spent.
		d.release(j)
		return
	}
	d.b.stats.failed.Add(1)
	budget := j.d.MaxAttempts
	if budget <= 0 {
		budget = h.maxAttempts
	}
	text := TruncateError(err.Error())
	now := d.cfg.Now()
	if IsPermanent(err) || j.d.Attempts >= budget {
		var ok bool
		werr := d.write([]*job{j}, func(c context.Context) (e error) {
			ok, e = d.store.DeliveryBury(c, &DeliveryBuryParams{Lease: j.d.Lease(), Error: text, Now: now})
			return e
		})
		d.done(j, "bury", ok, werr, &d.b.stats.buried)
		if werr == nil && ok {
			d.logJob(slog.LevelWarn, "relaybus: delivery buried (dead letter)", j, err, "permanent", IsPermanent(err))
		}
		return
	}
	delay := d.b.backoff(j.d.Attempts)
	var ok bool
	werr := d.write([]*job{j}, func(c context.Context) (e error) {
		ok, e = d.store.DeliveryReschedule(c, &DeliveryRescheduleParams{Lease: j.d.Lease(), Error: text, AvailableAt: now.Add(delay), Now: now})
		return e
	})
	d.done(j, "reschedule", ok, werr, &d.b.stats.rescheduled)
	if werr == nil && ok {
		d.logJob(slog.LevelWarn, "relaybus: delivery failed; rescheduled", j, err, "retry_in", delay)
	}
}

// release gives a delivery back without spending an attempt.
func (d *dispatcher[TTx]) release(j *job) {
	now := d.cfg.Now()
	var ok bool
	werr := d.write([]*job{j}, func(c context.Context) (e error) {
		ok, e = d.store.DeliveryRelease(c, &DeliveryReleaseParams{Lease: j.d.Lease(), Now: now})
		return e
	})
	d.done(j, "release", ok, werr, &d.b.stats.released)
}

// completeOne completes one delivery alone (completion batching disabled).
func (d *dispatcher[TTx]) completeOne(j *job) {
	if !d.beforeComplete([]*job{j}) {
		return
	}
	now := d.cfg.Now()
	var ok bool
	werr := d.write([]*job{j}, func(c context.Context) (e error) {
		ok, e = d.store.DeliveryComplete(c, &DeliveryCompleteParams{Lease: j.d.Lease(), Now: now})
		return e
	})
	d.done(j, "complete", ok, werr, &d.b.stats.completed)
}

// beforeComplete calls Config.BeforeComplete; on its error the deliveries are
// released (they were handled but not recorded, so they must run again).
func (d *dispatcher[TTx]) beforeComplete(js []*job) bool {
	if d.cfg.BeforeComplete == nil {
		return true
	}
	ds := make([]*Delivery, len(js))
	for i, j := range js {
		ds[i] = j.d
	}
	err := func() (err error) {
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("relaybus: BeforeComplete panicked: %v", p)
			}
		}()
		return d.cfg.BeforeComplete(d.writeCtx, ds)
	}()
	if err == nil {
		return true
	}
	d.log.Error("relaybus: BeforeComplete failed; releasing the batch", "deliveries", len(js), "error", err)
	for _, j := range js {
		d.release(j)
	}
	return false
}

// completer groups successes into DeliveryCompleteMany calls: a batch is sent
// when CompletionBatchWindow has passed since its first delivery or when it
// has CompletionBatchMax deliveries. While a batch is being sent the next
// one fills up in the channel, so batches grow with the store's latency.
func (d *dispatcher[TTx]) completer() {
	var batch []*job
	var timer *time.Timer
	var timerC <-chan time.Time
	flush := func() {
		if timer != nil {
			timer.Stop()
			timerC = nil
		}
		if len(batch) > 0 {
			d.completeMany(batch)
			batch = nil
		}
	}
	for {
		select {
		case j, ok := <-d.completions:
			if !ok {
				flush()
				return
			}
			batch = append(batch, j)
			if len(batch) >= d.cfg.CompletionBatchMax {
				flush()
			} else if len(batch) == 1 {
				if timer == nil {
					timer = time.NewTimer(d.cfg.CompletionBatchWindow)
				} else {
					timer.Reset(d.cfg.CompletionBatchWindow)
				}
				timerC = timer.C
			}
		case <-timerC:
			timerC = nil
			flush()
		}
	}
}

func (d *dispatcher[TTx]) completeMany(js []*job) {
	if !d.beforeComplete(js) {
		return
	}
	leases := make([]Lease, len(js))
	for i, j := range js {
		leases[i] = j.d.Lease()
	}
	now := d.cfg.Now()
	var oks []bool
	werr := d.write(js, func(c context.Context) (e error) {
		oks, e = d.store.DeliveryCompleteMany(c, &DeliveryCompleteManyParams{Leases: leases, Now: now})
		return e
	})
	if werr == nil && len(oks) != len(js) {
		werr = fmt.Errorf("relaybus: store returned %d results for %d completions", len(oks), len(js))
	}
	for i, j := range js {
		d.done(j, "complete", werr == nil && oks[i], werr, &d.b.stats.completed)
	}
}

// runTx runs a transactional handler: the handler's writes and the
// delivery's completion commit together or not at all.
func (d *dispatcher[TTx]) runTx(ctx, runCtx context.Context, j *job, h *handler[TTx]) {
	tx, err := d.store.TxBegin(runCtx)
	if err != nil {
		if d.beginFinish(j) {
			d.fail(ctx, runCtx, j, h, fmt.Errorf("relaybus: begin transaction: %w", err))
		}
		return
	}
	rollback := func() {
		c, cancel := context.WithTimeout(d.writeCtx, d.cfg.LeaseDuration)
		defer cancel()
		if rbErr := d.store.TxRollback(c, tx); rbErr != nil {
			d.logJob(slog.LevelWarn, "relaybus: rollback failed", j, rbErr)
		}
	}
	herr := d.call(runCtx, j, func(c context.Context) error { return h.txFn(c, tx, j.d) })
	if !d.beginFinish(j) {
		rollback()
		return
	}
	if herr != nil {
		rollback()
		d.fail(ctx, runCtx, j, h, herr)
		return
	}
	d.b.stats.succeeded.Add(1)
	if !d.beforeCompleteTx(j, rollback) {
		return
	}
	c, cancel := context.WithTimeout(d.writeCtx, d.cfg.LeaseDuration)
	defer cancel()
	ok, err := d.store.DeliveryCompleteTx(c, tx, &DeliveryCompleteParams{Lease: j.d.Lease(), Now: d.cfg.Now()})
	if err != nil || !ok {
		rollback()
		if err != nil {
			d.fail(ctx, runCtx, j, h, fmt.Errorf("relaybus: complete in transaction: %w", err))
			return
		}
		d.done(j, "complete", false, nil, nil)
		return
	}
	if err := d.store.TxCommit(c, tx); err != nil {
		// The outcome is unknown. A reschedule is fenced: if the commit went
		// through, the delivery is completed and the reschedule does nothing.
		d.fail(ctx, runCtx, j, h, fmt.Errorf("relaybus: commit: %w", err))
		return
	}
	d.done(j, "complete", true, nil, &d.b.stats.completed)
}

// beforeCompleteTx is beforeComplete for a transactional handler, which must
// roll back before its delivery is released.
func (d *dispatcher[TTx]) beforeCompleteTx(j *job, rollback func()) bool {
	if d.cfg.BeforeComplete == nil {
		return true
	}
	err := func() (err error) {
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("relaybus: BeforeComplete panicked: %v", p)
			}
		}()
		return d.cfg.BeforeComplete(d.writeCtx, []*Delivery{j.d})
	}()
	if err == nil {
		return true
	}
	d.logJob(slog.LevelError, "relaybus: BeforeComplete failed; releasing", j, err)
	rollback()
	d.release(j)
	return false
}

// write runs a finishing store write for the leases of js. It tries at
// once, and retries a failure with backoff (writeRetryDelay doubled up to
// writeRetryDelayMax) for as long as the leases last (their latest expiry,
// by Config.Now): a completion that gave up sooner, within a database
// restart, would let work that is done run again. The expiry is read again
// before every wait and every try, since renewals go on extending it while
// the write is retried. No wait runs past it and no try starts after it:
// another worker may have taken the delivery over, and the write is moot
// (it is fenced, so a late one would only be refused). The first try is
// made even then, since nobody may have taken it over yet. Each try is
// bounded by the lease duration, as every try was in 0.1.0. A write that
// fails while renewals succeed is retried for as long as they do: the
// database answers, so the failure is taken for a passing one, and giving
// up would run a handled delivery again.
func (d *dispatcher[TTx]) write(js []*job, fn func(context.Context) error) error {
	delay := writeRetryDelay
	for {
		c, cancel := context.WithTimeout(d.writeCtx, d.cfg.LeaseDuration)
		err := fn(c)
		cancel()
		if err == nil || errors.Is(err, ErrInvalid) {
			return err
		}
		// Wait no longer than what is left of the lease: a renewal during
		// the wait extends it, and the try after the wait is made only
		// if one did. (Giving up when the lease would expire during the
		// wait would give up while renewals work once the backoff grows
		// to the renewal's margin, writeRetryDelayMax being a second.)
		left := d.leaseEnd(js...).Sub(d.cfg.Now())
		if left <= 0 {
			return err
		}
		time.Sleep(min(delay, left))
		if !d.cfg.Now().Before(d.leaseEnd(js...)) {
			return err
		}
		delay = min(2*delay, writeRetryDelayMax)
	}
}

// leaseEnd is the latest lease expiry of js: a write for all of them
// matters until then.
func (d *dispatcher[TTx]) leaseEnd(js ...*job) time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	var end time.Time
	for _, j := range js {
		if j.expiresAt.After(end) {
			end = j.expiresAt
		}
	}
	return end
}

// done records the outcome of the final write of j and forgets its lease.
func (d *dispatcher[TTx]) done(j *job, what string, ok bool, err error, counter interface{ Add(int64) int64 }) {
	d.mu.Lock()
	if d.held[j.d.ID] == j {
		delete(d.held, j.d.ID)
	}
	d.mu.Unlock()
	switch {
	case err != nil:
		d.logJob(slog.LevelError, "relaybus: "+what+" failed; the lease will expire and the delivery run again", j, err)
	case !ok:
		d.b.stats.leasesLost.Add(1)
		d.logJob(slog.LevelWarn, "relaybus: lease lost before "+what, j, nil)
	default:
		if counter != nil {
			counter.Add(1)
		}
	}
}

// renewLoop extends every held lease each LeaseRenewInterval with one
// LeaseExtend call (per MaxLeasesPerCall leases) until stop is closed. A
// lease the store reports lost, or that expired by our clock without being
// renewed, cancels its handler.
//
// Leases whose final write is queued or under way are renewed too (0.1.1
// left them alone, and a completion that waited in the queue or its batch
// longer than what was left of its lease lost it: the delivery was claimed
// again and handled twice). Renewal and completion update the same rows,
// but every store statement that locks several deliveries locks them in
// ascending id, so they cannot deadlock: at worst a renewal waits for a
// completion holding the same rows, and then finds them completed. A
// finishing job whose lease is gone is left to its final write, which
// reports the loss.
func (d *dispatcher[TTx]) renewLoop(stop <-chan struct{}) {
	t := time.NewTicker(d.cfg.LeaseRenewInterval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			d.renew()
		}
	}
}

func (d *dispatcher[TTx]) renew() {
	now := d.cfg.Now()
	var js []*job
	d.mu.Lock()
	for _, j := range d.held {
		if !j.expiresAt.After(now) {
			// Renewals failed for a whole lease: another worker may run
			// this delivery now, so stop ours. A finishing job's write
			// sees the expiry itself and tries no more (see write).
			if !j.finishing {
				d.loseLocked(j)
			}
			continue
		}
		js = append(js, j)
	}
	d.mu.Unlock()
	expiresAt := now.Add(d.cfg.LeaseDuration)
	for start := 0; start < len(js); start += MaxLeasesPerCall {
		chunk := js[start:min(start+MaxLeasesPerCall, len(js))]
		leases := make([]Lease, len(chunk))
		for i, j := range chunk {
			leases[i] = j.d.Lease()
		}
		c, cancel := context.WithTimeout(d.writeCtx, d.cfg.LeaseDuration)
		oks, err := d.store.LeaseExtend(c, &LeaseExtendParams{Owner: d.cfg.Owner, Leases: leases, ExpiresAt: expiresAt, Now: now})
		cancel()
		if err == nil && len(oks) != len(chunk) {
			err = fmt.Errorf("relaybus: store returned %d results for %d leases", len(oks), len(chunk))
		}
		if err != nil {
			d.log.Error("relaybus: lease renewal failed", "leases", len(chunk), "error", err)
			continue
		}
		d.mu.Lock()
		for i, j := range chunk {
			switch {
			case oks[i]:
				j.expiresAt = expiresAt
			case !j.finishing && d.held[j.d.ID] == j:
				// A finishing job's own write reports the loss (and a
				// finished one is simply gone).
				d.loseLocked(j)
			}
		}
		d.mu.Unlock()
	}
}

// loseLocked stops a job whose lease is gone. d.mu is held.
func (d *dispatcher[TTx]) loseLocked(j *job) {
	j.lost = true
	delete(d.held, j.d.ID)
	if j.cancel != nil {
		j.cancel(errLeaseLost)
	}
	d.b.stats.leasesLost.Add(1)
	d.logJob(slog.LevelWarn, "relaybus: lease lost; handler cancelled", j, nil)
}

func (d *dispatcher[TTx]) logJob(level slog.Level, msg string, j *job, err error, extra ...any) {
	if !d.log.Enabled(context.Background(), level) {
		return
	}
	args := []any{"delivery_id", j.d.ID, "event_id", j.d.EventID, "handler", j.d.Handler, "attempt", j.d.Attempts}
	if j.d.Key != "" {
		args = append(args, "key", j.d.Key, "sequence", j.d.Sequence)
	}
	if err != nil {
		args = append(args, "error", err)
	}
	d.log.Log(context.Background(), level, msg, append(args, extra...)...)
}

// sleep waits for d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
