package main

// A dispatcher process's state: what a claim reads, what its handlers
// leave for the next round trip, and the counters the harness reads.

import (
	"cmp"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/berkcansavur/relaybus/bench/protocol"
	"github.com/berkcansavur/relaybus/bench/record"
	"github.com/berkcansavur/relaybus/bench/worker/workerkit"
)

// delivery is one claimed row.
type delivery struct {
	ctid                  pgtype.TID
	id                    int64
	eventID, handler, key string
	sequence              int64
	attempts, maxAttempts int
	lane                  int16
	due                   bool
	payload               []byte
	token                 string // set by handle: the claim's lane token
}

// failure is a failed attempt to record.
type failure struct {
	id      int64
	delayUs int64
	dead    bool
	err     string
}

// completion is a success to complete, and its completion record.
type completion struct {
	ctid             pgtype.TID
	eventID, handler string
	attempt          int
	token            string
}

// outcome is what a claim's handling left to write.
type outcome struct {
	done     []completion
	failures []failure
	buried   int
	released int // claimed, not run (behind a failure of their key, or not due)
}

// dispatchCounters are the dispatcher's cumulative counters.
type dispatchCounters struct {
	handled, failed, completed, claims, claimed, rescheduled, buried, released atomic.Int64
}

// dispatcher is the dispatcher role: its claim streams, each on its own
// connection, share the record file and the counters.
type dispatcher struct {
	w        *worker
	connCfg  *pgx.ConnConfig
	rec      *record.Writer
	counters dispatchCounters

	keyed           bool
	lockSQL         string
	claimSQL        string
	batch, maxLanes int
	workers         int // handler goroutines per stream
	poll            time.Duration
	cost, extra     time.Duration
	failFirst       int
	schedule        workerkit.RetrySchedule
	fatalOnce       sync.Once
	fatalErr        error
	fatalCh         chan struct{}
	streams         int
}

// dispatcherFor is the dispatcher of w's config, with its effective
// settings (defaults applied).
func dispatcherFor(w *worker, connCfg *pgx.ConnConfig) (*dispatcher, error) {
	wl, dc := &w.Cfg.Workload, &w.Cfg.Dispatcher
	sched, err := checks.RetrySchedule(wl)
	if err != nil {
		return nil, err
	}
	d := &dispatcher{
		w: w, connCfg: connCfg,
		keyed:     wl.Keys == "hot" || wl.Keys == "many",
		batch:     cmp.Or(dc.Batch, defaultBatch),
		maxLanes:  cmp.Or(w.opts.maxLanes, defaultMaxLanes),
		poll:      time.Duration(cmp.Or(dc.PollMs, defaultPollMs)) * time.Millisecond,
		cost:      time.Duration(wl.HandlerCostUs) * time.Microsecond,
		extra:     time.Duration(dc.ExtraCostPerDeliveryUs) * time.Microsecond,
		failFirst: wl.FailFirst,
		schedule:  sched,
		fatalCh:   make(chan struct{}),
	}
	d.streams = cmp.Or(w.opts.streams, defaultStreams)
	if p := w.Cfg.Store.PoolSize; p > 0 {
		d.streams = min(d.streams, p)
	}
	d.workers = max(1, cmp.Or(dc.Concurrency, defaultConcurrency)/d.streams)
	if d.cost == 0 && d.extra == 0 {
		// A no-op handler spread over goroutines only spends CPU the
		// server needs: each stream runs its claims' inline.
		d.workers = 1
	}
	if d.keyed {
		d.lockSQL, d.claimSQL = fmt.Sprintf(lockSQLFormat, keyedWork), claimKeyedSQL
	} else {
		d.lockSQL, d.claimSQL = fmt.Sprintf(lockSQLFormat, unkeyedWork), claimUnkeyedSQL
	}
	return d, nil
}

func (d *dispatcher) fatal(err error) {
	d.fatalOnce.Do(func() { d.fatalErr = err; close(d.fatalCh) })
}

// failed is the fatal error, once there is one.
func (d *dispatcher) failed() error {
	select {
	case <-d.fatalCh:
		return d.fatalErr
	default:
		return nil
	}
}

func (d *dispatcher) snapshot() *protocol.Counters {
	c := &d.counters
	out := &protocol.Counters{
		Handled: c.handled.Load(), HandlerFailed: c.failed.Load(), Completed: c.completed.Load(),
		Claims: c.claims.Load(), Claimed: c.claimed.Load(), Rescheduled: c.rescheduled.Load(),
		Buried: c.buried.Load(), Released: c.released.Load(),
	}
	workerkit.RecordCounters(d.rec, out)
	return out
}
