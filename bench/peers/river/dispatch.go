package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/berkcansavur/relaybus/bench/protocol"
	"github.com/berkcansavur/relaybus/bench/record"
	"github.com/berkcansavur/relaybus/bench/worker/workerkit"
)

// Dispatcher bounds.
const (
	// defaultConcurrency is MaxWorkers when the harness sets no
	// concurrency: River has no default, relaybus's is 10.
	defaultConcurrency = 10
	// softStopTimeout bounds the graceful stop (River's Stop: finish the
	// running jobs, flush the completer); past it the worker escalates to
	// StopAndCancel, bounded by hardStopTimeout. Together they stay under
	// the 30s the harness waits after SIGTERM before its SIGKILL
	// (bench.DefaultStopTimeout).
	softStopTimeout = 15 * time.Second
	hardStopTimeout = 10 * time.Second
	// subscribeChanSize buffers River's completion events for the
	// counters; River drops events that overflow it, so it is sized far
	// above one completer batch.
	subscribeChanSize = 1 << 16
)

// riverQueue is the one queue this peer uses.
const riverQueue = river.QueueDefault

// dispatchCounters are the dispatcher's cumulative counters.
type dispatchCounters struct {
	handled, failed                atomic.Int64 // Work calls that succeeded / failed
	completed, rescheduled, buried atomic.Int64 // from River's completion events
}

// deliveryWorker handles every job: the workload's handler.
type deliveryWorker struct {
	river.WorkerDefaults[deliveryArgs]
	rec       *record.Writer
	cost      time.Duration // workload handler cost
	extra     time.Duration // planted extra cost of this side
	failFirst int
	counters  *dispatchCounters
	// fatal is called once when a record cannot be written: the worker
	// must stop, since it can no longer promise that a completed job's
	// record reached the kernel.
	fatal func(error)
}

// Work runs the workload's handler for one job and records the call. The
// record reaches the kernel (Flush: one write(2) of every record added so
// far, by any goroutine) before Work returns, and River completes a job
// only after its Work returned, so a SIGKILL cannot lose the record of a
// completed job.
func (w *deliveryWorker) Work(ctx context.Context, job *river.Job[deliveryArgs]) error {
	start := time.Now()
	if w.cost > 0 {
		spin(w.cost)
	}
	if w.extra > 0 {
		spin(w.extra)
	}
	a := job.Args
	poison := len(a.Payload) > 0 && a.Payload[0] == protocol.PayloadPoison
	fail := poison || job.Attempt <= w.failFirst
	err := w.rec.AddHandled(record.Handled{
		EventID: a.EventID, Handler: a.Handler, Key: a.Key,
		Attempt: job.Attempt, HandleNs: start.UnixNano(), OK: !fail,
	})
	if err == nil {
		err = w.rec.Flush()
	}
	if err != nil {
		err = fmt.Errorf("river: recording job %d: %w", job.ID, err)
		w.fatal(err)
		// The attempt fails, so River does not complete a job whose
		// record may not have reached the kernel.
		return err
	}
	if fail {
		w.counters.failed.Add(1)
		return fmt.Errorf("planted failure (poison=%v, attempt %d)", poison, job.Attempt)
	}
	w.counters.handled.Add(1)
	return nil
}

// spin busy-waits for d: a handler cost that uses CPU like real work
// does, and that a sleep's timer granularity would not reproduce.
func spin(d time.Duration) {
	for end := time.Now().Add(d); time.Now().Before(end); {
	}
}

// clientConfig maps the harness's dispatcher settings onto River's
// client (see the package doc for the mapping and what is ignored).
func clientConfig(c *protocol.Config, extra dispatcherOptions, workers *river.Workers) (*river.Config, error) {
	d := &c.Dispatcher
	policy, err := retryPolicyFor(&c.Workload)
	if err != nil {
		return nil, err
	}
	cfg := &river.Config{
		Queues:      map[string]river.QueueConfig{riverQueue: {MaxWorkers: cmpOr(extra.maxWorkers, cmpOr(d.Concurrency, defaultConcurrency))}},
		Workers:     workers,
		RetryPolicy: policy,
		// Keep every finished job (see the package doc): inspect stays
		// exact and River's job cleaner never runs inside a window.
		CompletedJobRetentionPeriod: -1,
		DiscardedJobRetentionPeriod: -1,
		CancelledJobRetentionPeriod: -1,
		// No index rebuilds at midnight UTC in the middle of a window.
		ReindexerIndexNames: []string{},
		PollOnly:            extra.pollOnly,
	}
	// The poll interval: the fetch_poll_interval_ms option, else poll_ms,
	// else River's default.
	cfg.FetchPollInterval = cmpOr(extra.fetchPollInterval, time.Duration(d.PollMs)*time.Millisecond)
	if cfg.FetchPollInterval > 0 {
		// River requires FetchCooldown <= FetchPollInterval.
		cfg.FetchCooldown = min(river.FetchCooldownDefault, cfg.FetchPollInterval)
	}
	if extra.fetchCooldown > 0 {
		cfg.FetchCooldown = extra.fetchCooldown
		poll := cmpOr(cfg.FetchPollInterval, river.FetchPollIntervalDefault)
		if poll < cfg.FetchCooldown {
			return nil, fmt.Errorf("river: dispatcher option %s (%v) is longer than the poll interval (%v)", optFetchCooldownMs, cfg.FetchCooldown, poll)
		}
	}
	if d.LeaseMs > 0 {
		// River has no lease. The leader's rescuer (every 30s) retries,
		// or discards after the last attempt, a job that has been running
		// for both RescueStuckJobsAfter and its JobTimeout; it never
		// rescues a job whose timeout is infinite (-1). So both are the
		// lease: a job of a killed dispatcher is rescued after lease_ms
		// plus up to one rescuer interval, and a live handler running
		// longer than lease_ms has its context cancelled and may be
		// rescued and run again (there is no renewal).
		lease := time.Duration(d.LeaseMs) * time.Millisecond
		cfg.JobTimeout = lease
		cfg.RescueStuckJobsAfter = lease
	}
	return cfg, nil
}

func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// dispatch plays the dispatcher: a River client working the one queue
// until ctx is done, then a graceful stop.
func dispatch(ctx context.Context, w *worker, pool *pgxpool.Pool) error {
	wl, dc := &w.Cfg.Workload, &w.Cfg.Dispatcher
	rw, err := record.Create(w.Cfg.RecordPath)
	if err != nil {
		return err
	}
	counters := &dispatchCounters{}
	var (
		fatal     error
		fatalOnce sync.Once
	)
	fatalCh := make(chan struct{})
	dw := &deliveryWorker{
		rec:       rw,
		cost:      time.Duration(wl.HandlerCostUs) * time.Microsecond,
		extra:     time.Duration(dc.ExtraCostPerDeliveryUs) * time.Microsecond,
		failFirst: wl.FailFirst,
		counters:  counters,
		fatal:     func(err error) { fatalOnce.Do(func() { fatal = err; close(fatalCh) }) },
	}
	workers := river.NewWorkers()
	if err := river.AddWorkerSafely(workers, dw); err != nil {
		return fmt.Errorf("river: worker: %w", err)
	}
	cfg, err := clientConfig(w.Cfg, w.extra, workers)
	if err != nil {
		return err
	}
	cfg.Logger = w.riverLogger()
	client, err := river.NewClient(riverpgxv5.New(pool), cfg)
	if err != nil {
		return fmt.Errorf("river: client: %w", err)
	}
	events, unsubscribe := client.SubscribeConfig(&river.SubscribeConfig{
		ChanSize: subscribeChanSize,
		Kinds:    []river.EventKind{river.EventKindJobCompleted, river.EventKindJobFailed, river.EventKindJobCancelled},
	})
	defer unsubscribe()
	countDone := make(chan struct{})
	go func() {
		defer close(countDone)
		countEvents(events, counters)
	}()

	snapshot := func() *protocol.Counters {
		c := &protocol.Counters{
			Handled: counters.handled.Load(), HandlerFailed: counters.failed.Load(),
			Completed: counters.completed.Load(), Rescheduled: counters.rescheduled.Load(), Buried: counters.buried.Load(),
		}
		workerkit.RecordCounters(rw, c)
		return c
	}
	// River's client runs on its own context: the worker's ctx ends the
	// role through Stop below, not by cancelling River's work.
	if err := client.Start(context.WithoutCancel(ctx)); err != nil {
		return fmt.Errorf("river: start: %w", err)
	}
	w.Log.Info("river client started",
		"max_workers", cfg.Queues[riverQueue].MaxWorkers,
		"fetch_poll_interval", cmpOr(cfg.FetchPollInterval, river.FetchPollIntervalDefault),
		"fetch_cooldown", cmpOr(cfg.FetchCooldown, river.FetchCooldownDefault),
		"rescue_stuck_jobs_after", cfg.RescueStuckJobsAfter, "poll_only", cfg.PollOnly)
	w.Ready()
	tickStop := make(chan struct{})
	go w.Tick(tickStop, func() { w.Out.Emit(&protocol.Message{Type: protocol.TypeCounters, Counters: snapshot()}) })

	select {
	case <-ctx.Done():
	case <-fatalCh:
	case <-client.Stopped():
		// River stopped by itself: an error it logged.
	}
	stopErr := stopClient(client, w)
	close(tickStop)
	// The completion events of the last jobs arrive while the client
	// stops; after Stopped nothing more is sent.
	unsubscribe()
	<-countDone
	closeErr := rw.Close()
	switch {
	case fatal != nil:
		return fatal
	case stopErr != nil:
		return stopErr
	case closeErr != nil:
		return fmt.Errorf("river: closing records: %w", closeErr)
	case ctx.Err() == nil:
		return errors.New("river: the client stopped by itself (see the log)")
	}
	w.Out.Emit(&protocol.Message{Type: protocol.TypeDone, Counters: snapshot()})
	return nil
}

// stopClient stops the client gracefully (running jobs finish, the
// completer flushes), escalating to StopAndCancel after softStopTimeout.
func stopClient(client interface {
	Stop(context.Context) error
	StopAndCancel(context.Context) error
}, w *worker) error {
	soft, cancel := context.WithTimeout(context.Background(), softStopTimeout)
	defer cancel()
	err := client.Stop(soft)
	if err == nil {
		return nil
	}
	w.Log.Warn("graceful stop did not finish; cancelling running jobs", "after", softStopTimeout, "error", err)
	hard, cancelHard := context.WithTimeout(context.Background(), hardStopTimeout)
	defer cancelHard()
	if err := client.StopAndCancel(hard); err != nil {
		return fmt.Errorf("river: stop: %w", err)
	}
	return nil
}

// countEvents turns River's completion events into the protocol's
// counters until the subscription is closed.
func countEvents(events <-chan *river.Event, c *dispatchCounters) {
	for ev := range events {
		switch ev.Kind {
		case river.EventKindJobCompleted:
			c.completed.Add(1)
		case river.EventKindJobFailed:
			if ev.Job != nil && ev.Job.State == rivertype.JobStateDiscarded {
				c.buried.Add(1)
			} else {
				c.rescheduled.Add(1)
			}
		case river.EventKindJobCancelled:
			c.buried.Add(1)
		}
	}
}
