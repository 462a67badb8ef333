package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/berkcansavur/relaybus/bench/protocol"
	"github.com/berkcansavur/relaybus/bench/record"
)

// callTimeout bounds one publish call; a stopped worker lets its current
// call finish rather than cancel it mid-commit, which would turn a clean
// stop into an uncertain commit.
const callTimeout = time.Minute

// maxLatencySamples bounds the publish latencies a process keeps; past
// it, reservoir sampling keeps a uniform sample.
const maxLatencySamples = 1_000_000

// failedCallBackoff is the pause after a failed publish call: the
// database may be restarting.
const failedCallBackoff = 100 * time.Millisecond

type outcome int

const (
	outcomeCommitted outcome = iota
	outcomeFailed            // nothing was published
	outcomeUncertain         // the commit was sent; whether it applied is unknown
)

// publish plays preload and publisher, as the relaybus worker does:
// Publishers goroutines take Batch consecutive event indexes at a time
// (StartIndex + i*Stride), at RatePerSec across the process when set,
// until Events are published or the worker is stopped. Each call inserts
// one job per (event, handler) with InsertManyTx in one transaction, and
// its events are recorded after the commit returned, with the call's
// start (from which the harness measures publish latency) and the
// commit's return.
func publish(ctx context.Context, w *worker, pool *pgxpool.Pool) error {
	wl, pc := &w.cfg.Workload, &w.cfg.Publisher
	// An insert-only client: no queues, no workers, so nothing but
	// inserts (and River's insert notifications) runs here.
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Logger: w.riverLogger()})
	if err != nil {
		return fmt.Errorf("river: client: %w", err)
	}
	rw, err := record.Create(w.cfg.RecordPath)
	if err != nil {
		return err
	}

	normal := strings.Repeat("x", wl.PayloadBytes-1)
	poison := string(protocol.PayloadPoison) + normal
	normal = string(protocol.PayloadNormal) + normal
	var opts *river.InsertOpts
	if wl.MaxAttempts > 0 {
		opts = &river.InsertOpts{MaxAttempts: wl.MaxAttempts}
	}

	stride := max(pc.Stride, 1)
	var (
		next                            atomic.Int64 // events reserved so far
		published, calls, errs, unknown atomic.Int64
		latMu                           sync.Mutex
		lat                             []float64
		latSeen                         int64
		firstStart, lastEnd             atomic.Int64
		fatal                           error
		fatalOnce                       sync.Once
	)
	start := time.Now()
	stopCtx, stop := context.WithCancel(ctx)
	defer stop()
	setFatal := func(err error) {
		fatalOnce.Do(func() { fatal = err; stop() })
	}
	counters := func() *protocol.Counters {
		c := &protocol.Counters{
			Published: published.Load(), PublishCalls: calls.Load(),
			PublishErrors: errs.Load(), Uncertain: unknown.Load(),
		}
		recordCounters(rw, c)
		return c
	}

	w.ready()
	tickStop := make(chan struct{})
	go w.tick(tickStop, func() { w.out.emit(&protocol.Message{Type: protocol.TypeCounters, Counters: counters()}) })

	var wg sync.WaitGroup
	for g := 0; g < pc.Publishers; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rnd := rand.New(rand.NewPCG(uint64(g), uint64(start.UnixNano())))
			for stopCtx.Err() == nil {
				n := int64(pc.Batch)
				first := next.Add(n) - n
				if pc.Events > 0 {
					if first >= int64(pc.Events) {
						return
					}
					n = min(n, int64(pc.Events)-first)
				}
				if pc.RatePerSec > 0 {
					due := start.Add(time.Duration(float64(first) / pc.RatePerSec * float64(time.Second)))
					if d := time.Until(due); d > 0 {
						select {
						case <-stopCtx.Done():
							return
						case <-time.After(d):
						}
					}
				}
				events := make([]record.Published, n)
				jobs := make([]river.InsertManyParams, 0, int(n)*len(wl.Handlers))
				for i := range events {
					idx := pc.StartIndex + (first+int64(i))*stride
					payload := normal
					if protocol.IsPoison(idx, wl.PoisonEvery) {
						payload = poison
					}
					events[i] = record.Published{
						EventID:   protocol.EventID(wl.IDPrefix, idx),
						EventType: wl.EventType,
						Key:       protocol.Key(wl.Keys, wl.KeyCount, idx),
					}
					for _, h := range wl.Handlers {
						jobs = append(jobs, river.InsertManyParams{
							Args:       deliveryArgs{EventID: events[i].EventID, Handler: h, Key: events[i].Key, Payload: payload},
							InsertOpts: opts,
						})
					}
				}
				callCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), callTimeout)
				t0 := time.Now()
				firstStart.CompareAndSwap(0, t0.UnixNano())
				out, pubErr := insertOnce(callCtx, pool, client, jobs)
				cancel()
				end := time.Now()
				if out == outcomeFailed {
					errs.Add(1)
					w.log.Warn("publish failed", "events", len(events), "error", pubErr)
					select {
					case <-stopCtx.Done():
					case <-time.After(failedCallBackoff):
					}
					continue
				}
				lastEnd.Store(end.UnixNano())
				for i := range events {
					events[i].CallStartNs = t0.UnixNano()
					events[i].CommitNs = end.UnixNano()
					events[i].Uncertain = out == outcomeUncertain
					if err := rw.AddPublished(events[i]); err != nil {
						setFatal(err)
						return
					}
				}
				if err := rw.Flush(); err != nil {
					setFatal(fmt.Errorf("river: writing records: %w", err))
					return
				}
				if out == outcomeUncertain {
					unknown.Add(int64(len(events)))
					w.log.Warn("publish commit outcome unknown", "events", len(events), "error", pubErr)
					continue
				}
				published.Add(int64(len(events)))
				calls.Add(1)
				ms := float64(end.Sub(t0)) / float64(time.Millisecond)
				latMu.Lock()
				latSeen++
				if len(lat) < maxLatencySamples {
					lat = append(lat, ms)
				} else if j := rnd.Int64N(latSeen); j < maxLatencySamples {
					lat[j] = ms
				}
				latMu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(tickStop)
	closeErr := rw.Close()
	if fatal != nil {
		return fatal
	}
	if closeErr != nil {
		return fmt.Errorf("river: closing records: %w", closeErr)
	}
	if w.cfg.Role == protocol.RolePreload && published.Load()+unknown.Load() < int64(pc.Events) && ctx.Err() == nil {
		return fmt.Errorf("river: preload published %d of %d events", published.Load(), pc.Events)
	}
	sum := summarize(lat)
	sum.Calls = calls.Load()
	if fs, le := firstStart.Load(), lastEnd.Load(); fs > 0 && le > fs {
		sum.ElapsedNs = le - fs
	}
	w.out.emit(&protocol.Message{Type: protocol.TypeDone, Counters: counters(), Publish: sum})
	return nil
}

// insertOnce inserts jobs in one transaction. An error before the commit
// means nothing was published; an error from the commit itself means the
// outcome is unknown (the connection may have died after the server
// committed), and the validator accepts either.
func insertOnce(ctx context.Context, pool *pgxpool.Pool, client *river.Client[pgx.Tx], jobs []river.InsertManyParams) (outcome, error) {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return outcomeFailed, fmt.Errorf("river: begin: %w", err)
	}
	if _, err := client.InsertManyTx(ctx, tx, jobs); err != nil {
		rbErr := tx.Rollback(context.WithoutCancel(ctx))
		return outcomeFailed, errors.Join(fmt.Errorf("river: insert: %w", err), rbErr)
	}
	if err := tx.Commit(ctx); err != nil {
		return outcomeUncertain, fmt.Errorf("river: commit: %w", err)
	}
	return outcomeCommitted, nil
}

// recordCounters copies the record writer's statistics into c.
func recordCounters(rw *record.Writer, c *protocol.Counters) {
	bytes, writes, spent := rw.Stats()
	c.RecordBytes, c.RecordWrites, c.RecordNs = bytes, writes, spent.Nanoseconds()
}

// summarize is the relaybus worker's: nearest-rank quantiles of the
// publish call latencies.
func summarize(ms []float64) *protocol.PublishSummary {
	s := &protocol.PublishSummary{}
	if len(ms) == 0 {
		return s
	}
	sorted := slices.Clone(ms)
	slices.Sort(sorted)
	q := func(p float64) float64 {
		i := int(p*float64(len(sorted))+0.5) - 1 // nearest rank
		return sorted[min(max(i, 0), len(sorted)-1)]
	}
	s.P50Ms, s.P95Ms, s.P99Ms, s.MaxMs = q(0.50), q(0.95), q(0.99), sorted[len(sorted)-1]
	return s
}
