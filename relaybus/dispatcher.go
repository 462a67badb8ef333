package relaybus

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/berkcansavur/relaybus/relaybus/batch"
	"github.com/berkcansavur/relaybus/relaybus/driver"
)

// errLeaseLost is the cause of a handler context cancelled because its lease
// is no longer held.
var errLeaseLost = errors.New("relaybus: lease lost")

// dispatcher is one run of a Bus's dispatcher.
type dispatcher[TTx any] struct {
	store    driver.Store[TTx]
	cfg      Config
	log      *slog.Logger
	handlers map[string]*handler[TTx]
	// claim is every claim's params but Limit, Now and Busy: the owner and
	// the handler names, validated once when the dispatcher is made and
	// marked so; each claim's copy keeps the mark (it holds the same
	// names).
	claim driver.DeliveryClaimParams
	retry retryPolicy
	stats dispatcherCounters
	// writeCtx carries the run context's values but is never cancelled: the
	// writes that finish deliveries go on during a shutdown. Each write is
	// bounded by its lease instead (after it, the write is moot).
	writeCtx context.Context

	// inflight counts claimed deliveries (or batches) not yet handed off
	// (running, or waiting for room in the completion queue); at most
	// Concurrency without batch handlers, the claim loop only claims what
	// is free. freed wakes the claim loop when
	// a slot is freed or a lease let go.
	inflightMu sync.Mutex
	inflight   int
	// perSlot is how many deliveries one slot may take: the longest run
	// of a key a batch handler takes (BatchOptions.MaxSize times
	// MaxCalls), 1 without any. A claim
	// asks for up to free slots times perSlot; a claim that then gives
	// more single deliveries or batches than slots are free waits for a
	// worker in launch (their leases are held and renewed meanwhile).
	perSlot int
	// keyRuns: the store claims a key's run (driver.ClaimsKeyRuns), so a
	// keyed batch held back to fill (BatchOptions.MaxWait) can grow.
	keyRuns bool
	// unkeyedFill: per batch handler, when its last unkeyed batch given
	// back to fill is due (fillTime), so that the batches given back
	// meanwhile come due with it, as one. Claim loop only.
	unkeyedFill map[string]time.Time
	freed       chan struct{}
	// keyFreed wakes an idle claim loop when a keyed delivery has finished
	// (completed or buried): its key's next delivery may be due now; with
	// claims that carry completions, as soon as a keyed success waits for
	// one (dispatcher_carry.go).
	keyFreed chan struct{}

	// pauses are the paused handlers as last read (dispatcher_pause.go);
	// used by the claim loop only.
	pauses pauses

	// held are the leases this run still holds, by delivery ID: renewed
	// until their final write is done.
	mu   sync.Mutex
	held map[string]*job

	// completer groups successes into DeliveryCompleteMany calls (nil when
	// completion batching is Disabled). Its items are groups of jobs
	// written in one call, never split: one success, or the prefix of a
	// keyed batch (see completeGroup). (nil when
	// completion batching is Disabled). Its queue holds at most
	// CompletionBatchMax: a full queue holds the handler's slot, which
	// holds back claims.
	completer *batch.Batcher[[]*job, struct{}]
	// carry holds successes for the next claim to complete in its
	// transaction (dispatcher_carry.go); nil when claims carry none.
	carry *carrier
	// work hands claimed jobs to the workers (Concurrency of them, as
	// many as slots: a send never waits); closed when the claim loop has
	// stopped. workers ends when they have all returned.
	work    chan work[TTx]
	workers sync.WaitGroup
}

// job is one claimed delivery.
type job struct {
	d      *Delivery
	cancel context.CancelCauseFunc
	// Guarded by dispatcher.mu.
	expiresAt time.Time // of the lease, by Config.Now; renewal moves it
	lost      bool      // the lease is gone; write nothing more
	finishing bool      // the final write is under way: still renewed; it reports a lost lease itself
	// deadline is when the lease of a finishing job expires, on the real
	// clock: its final write is retried until then (set by beginFinish,
	// moved by each renewal).
	deadline time.Time
	// approved: Config.BeforeComplete has seen the job's success (set
	// before its completion is first sent; a completion written again is
	// not shown to it twice).
	approved bool
	// carried: the job's completion committed with a claim, which saw the
	// key it freed (no keyFreed wake-up for it).
	carried bool
}

// newDispatcher returns the dispatcher of a bus on store with cfg (its
// defaults applied), running the handlers in run, whose names are names.
// It validates the owner and the names here, once: not at every claim.
func newDispatcher[TTx any](store driver.Store[TTx], cfg Config, names []string, run map[string]*handler[TTx]) (*dispatcher[TTx], error) {
	claim := driver.DeliveryClaimParams{Owner: cfg.Owner, Handlers: names, LeaseDuration: cfg.LeaseDuration}
	if err := validateClaimNames(&claim); err != nil {
		return nil, err
	}
	perSlot := 1
	for _, name := range names {
		if h := run[name]; h != nil && h.isBatch() {
			claim.KeyRuns = append(claim.KeyRuns, driver.KeyRun{Handler: name, Max: h.batchRun})
			perSlot = max(perSlot, h.batchRun)
		}
	}
	d := &dispatcher[TTx]{
		store:       store,
		cfg:         cfg,
		log:         cfg.Logger,
		retry:       retryPolicyOf(cfg),
		claim:       claim,
		handlers:    run,
		freed:       make(chan struct{}, 1),
		keyFreed:    make(chan struct{}, 1),
		held:        make(map[string]*job),
		work:        make(chan work[TTx], cfg.Concurrency),
		perSlot:     perSlot,
		keyRuns:     driver.ClaimsKeyRuns(store),
		unkeyedFill: map[string]time.Time{},
	}
	return d, nil
}

// run claims and dispatches until ctx is done, then shuts down: no more
// claims, running handlers cancelled (their ctx is derived from ctx),
// successes still completed, aborted and unstarted deliveries released, and
// finally everything the owner holds relinquished.
func (d *dispatcher[TTx]) run(ctx context.Context) error {
	d.writeCtx = context.WithoutCancel(ctx)
	d.log.Info("relaybus: dispatcher started", "owner", d.cfg.Owner, "handlers", d.claim.Handlers,
		"concurrency", d.cfg.Concurrency, "batch_size", d.cfg.BatchSize)

	var err error
	d.completer, err = d.newCompleter()
	if err != nil {
		return err
	}
	d.carry = d.newCarrier()
	var bg sync.WaitGroup
	renewStop := make(chan struct{})
	bg.Go(func() { d.renewLoop(renewStop) })
	for range d.cfg.Concurrency {
		d.workers.Go(func() { d.worker(ctx) })
	}

	d.claimLoop(ctx)

	d.mu.Lock()
	inFlight := len(d.held)
	d.mu.Unlock()
	d.log.Info("relaybus: dispatcher stopping", "owner", d.cfg.Owner, "cause", context.Cause(ctx), "in_flight", inFlight,
		"shutdown_timeout", d.cfg.ShutdownTimeout)
	d.shutdown(renewStop, &bg)
	d.log.Info("relaybus: dispatcher stopped", "owner", d.cfg.Owner)
	return nil
}

func (d *dispatcher[TTx]) logJob(level slog.Level, msg string, j *job, err error, extra ...any) {
	// The logs carry Run's context (its values, not its cancellation), so
	// a slog handler that reads values from it (a trace, a request id)
	// sees them.
	ctx := d.writeCtx
	if ctx == nil {
		ctx = context.Background()
	}
	if !d.log.Enabled(ctx, level) {
		return
	}
	args := []any{"delivery_id", j.d.ID, "event_id", j.d.EventID, "handler", j.d.Handler, "attempt", j.d.Attempts}
	if j.d.Key != "" {
		args = append(args, "key", j.d.Key, "sequence", j.d.Sequence)
	}
	if err != nil {
		args = append(args, "error", err)
	}
	d.log.Log(ctx, level, msg, append(args, extra...)...)
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
