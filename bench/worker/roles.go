package worker

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/berkcansavur/relaybus/bench/protocol"
	"github.com/berkcansavur/relaybus/bench/record"
	"github.com/berkcansavur/relaybus/bench/stats"
	"github.com/berkcansavur/relaybus/relaybus"
)

type pgxTx = pgx.Tx

// callTimeout bounds one store call of a publisher; a stopped worker
// lets its current call finish rather than cancel it mid-commit, which
// would turn a clean stop into an uncertain commit.
const callTimeout = time.Minute

// maxLatencySamples bounds the publish latencies a process keeps; past
// it, reservoir sampling keeps a uniform sample.
const maxLatencySamples = 1_000_000

func runRole[TTx any](ctx context.Context, w *worker, st relaybus.Store[TTx]) error {
	switch w.cfg.Role {
	case protocol.RoleSetup:
		w.ready()
		if err := st.Setup(ctx); err != nil {
			return err
		}
		w.out.emit(&protocol.Message{Type: protocol.TypeDone, Counters: &protocol.Counters{}})
		return nil
	case protocol.RoleInspect:
		w.ready()
		in, err := inspect(ctx, st)
		if err != nil {
			return err
		}
		w.out.emit(&protocol.Message{Type: protocol.TypeDone, Counters: &protocol.Counters{}, Inspect: in})
		return nil
	case protocol.RolePreload, protocol.RolePublisher:
		return publish(ctx, w, st)
	case protocol.RoleDispatcher:
		return dispatch(ctx, w, st)
	}
	return fmt.Errorf("worker: unknown role %q", w.cfg.Role)
}

func inspect[TTx any](ctx context.Context, st relaybus.Store[TTx]) (*protocol.Inspect, error) {
	now := time.Now()
	stats, err := st.Statistics(ctx, &relaybus.StatisticsParams{Now: now})
	if err != nil {
		return nil, err
	}
	in := &protocol.Inspect{
		Pending: stats.Pending, Processing: stats.Processing,
		Completed: stats.Completed, Dead: stats.Dead,
	}
	after := ""
	for {
		page, err := st.DeliveryList(ctx, &relaybus.DeliveryListParams{
			Status: relaybus.StatusDead, Limit: relaybus.MaxListLimit, After: after,
		})
		if err != nil {
			return nil, err
		}
		for _, d := range page.Deliveries {
			if len(in.DeadLetters) == protocol.MaxDeadLetters {
				in.DeadLettersTruncated = true
				return in, nil
			}
			in.DeadLetters = append(in.DeadLetters, protocol.DeadLetter{
				EventID: d.EventID, Handler: d.Handler, Attempts: d.Attempts, Error: d.LastError,
			})
		}
		if page.Next == "" {
			return in, nil
		}
		after = page.Next
	}
}

// recorder serialises record writes from many goroutines; each Flush is
// one write(2).
type recorder struct {
	mu sync.Mutex
	w  *record.Writer
}

func (r *recorder) flush() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.w.Flush()
}

func (r *recorder) counters(c *protocol.Counters) {
	r.mu.Lock()
	bytes, writes, spent := r.w.Stats()
	r.mu.Unlock()
	c.RecordBytes, c.RecordWrites, c.RecordNs = bytes, writes, spent.Nanoseconds()
}

func (w *worker) workloadHandlerOptions() *relaybus.HandlerOptions {
	return &relaybus.HandlerOptions{MaxAttempts: w.cfg.Workload.MaxAttempts}
}

func publish[TTx any](ctx context.Context, w *worker, st relaybus.Store[TTx]) error {
	wl, pc := &w.cfg.Workload, &w.cfg.Publisher
	bus, err := relaybus.New(st, relaybus.Config{Logger: w.log, MaxPayloadBytes: relaybus.DefaultMaxPayloadBytes})
	if err != nil {
		return err
	}
	for _, h := range wl.Handlers {
		if err := bus.Declare(wl.EventType, h, w.workloadHandlerOptions()); err != nil {
			return err
		}
	}
	rw, err := record.Create(w.cfg.RecordPath)
	if err != nil {
		return err
	}
	rec := &recorder{w: rw}

	normal := make([]byte, wl.PayloadBytes)
	for i := range normal {
		normal[i] = 'x'
	}
	poison := slices.Clone(normal)
	normal[0], poison[0] = protocol.PayloadNormal, protocol.PayloadPoison

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
		rec.counters(c)
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
				events := make([]*relaybus.Event, n)
				for i := range events {
					idx := pc.StartIndex + (first+int64(i))*stride
					payload := normal
					if protocol.IsPoison(idx, wl.PoisonEvery) {
						payload = poison
					}
					events[i] = &relaybus.Event{
						ID:      protocol.EventID(wl.IDPrefix, idx),
						Type:    wl.EventType,
						Key:     protocol.Key(wl.Keys, wl.KeyCount, idx),
						Payload: payload,
					}
				}
				callCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), callTimeout)
				t0 := time.Now()
				firstStart.CompareAndSwap(0, t0.UnixNano())
				outcome, pubErr := publishOnce(callCtx, bus, st, events)
				cancel()
				end := time.Now()
				if outcome == outcomeFailed {
					errs.Add(1)
					w.log.Warn("publish failed", "events", len(events), "error", pubErr)
					select { // back off a little: the store may be restarting
					case <-stopCtx.Done():
					case <-time.After(100 * time.Millisecond):
					}
					continue
				}
				lastEnd.Store(end.UnixNano())
				commitNs := end.UnixNano()
				rec.mu.Lock()
				for _, e := range events {
					if err := rec.w.AddPublished(record.Published{
						EventID: e.ID, EventType: e.Type, Key: e.Key, CommitNs: commitNs,
						Uncertain: outcome == outcomeUncertain,
					}); err != nil {
						rec.mu.Unlock()
						setFatal(err)
						return
					}
				}
				err := rec.w.Flush()
				rec.mu.Unlock()
				if err != nil {
					setFatal(fmt.Errorf("worker: writing records: %w", err))
					return
				}
				if outcome == outcomeUncertain {
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
		return fmt.Errorf("worker: closing records: %w", closeErr)
	}
	if w.cfg.Role == protocol.RolePreload && published.Load()+unknown.Load() < int64(pc.Events) && ctx.Err() == nil {
		return fmt.Errorf("worker: preload published %d of %d events", published.Load(), pc.Events)
	}
	sum := summarize(lat)
	sum.Calls = calls.Load()
	if fs, le := firstStart.Load(), lastEnd.Load(); fs > 0 && le > fs {
		sum.ElapsedNs = le - fs
	}
	w.out.emit(&protocol.Message{Type: protocol.TypeDone, Counters: counters(), Publish: sum})
	return nil
}

type outcome int

const (
	outcomeCommitted outcome = iota
	outcomeFailed            // nothing was published
	outcomeUncertain         // the commit was sent; whether it applied is unknown
)

// publishOnce publishes events in one transaction of the store's. An
// error before the commit means nothing was published; an error from the
// commit itself means the outcome is unknown (the connection may have
// died after the server committed), and the validator accepts either.
func publishOnce[TTx any](ctx context.Context, bus *relaybus.Bus[TTx], st relaybus.Store[TTx], events []*relaybus.Event) (outcome, error) {
	tx, err := st.TxBegin(ctx)
	if err != nil {
		return outcomeFailed, err
	}
	if err := bus.PublishTx(ctx, tx, events...); err != nil {
		rbErr := st.TxRollback(ctx, tx)
		return outcomeFailed, errors.Join(err, rbErr)
	}
	if err := st.TxCommit(ctx, tx); err != nil {
		return outcomeUncertain, err
	}
	return outcomeCommitted, nil
}

func summarize(ms []float64) *protocol.PublishSummary {
	s := &protocol.PublishSummary{}
	if len(ms) == 0 {
		return s
	}
	sorted := slices.Clone(ms)
	slices.Sort(sorted)
	s.P50Ms, s.P95Ms, s.P99Ms = stats.Quantile(sorted, 0.50), stats.Quantile(sorted, 0.95), stats.Quantile(sorted, 0.99)
	s.MaxMs = sorted[len(sorted)-1]
	return s
}

func dispatch[TTx any](ctx context.Context, w *worker, st relaybus.Store[TTx]) error {
	wl, dc := &w.cfg.Workload, &w.cfg.Dispatcher
	rw, err := record.Create(w.cfg.RecordPath)
	if err != nil {
		return err
	}
	rec := &recorder{w: rw}
	var handled, failed atomic.Int64

	cfg := relaybus.Config{
		Concurrency:           dc.Concurrency,
		BatchSize:             dc.Batch,
		PollInterval:          time.Duration(dc.PollMs) * time.Millisecond,
		LeaseDuration:         time.Duration(dc.LeaseMs) * time.Millisecond,
		CompletionBatchWindow: time.Duration(dc.CompletionWindowUs) * time.Microsecond,
		CompletionBatchMax:    dc.CompletionBatchMax,
		RetryBaseDelay:        time.Duration(wl.RetryBaseDelayMs) * time.Millisecond,
		RetryMaxDelay:         time.Duration(wl.RetryMaxDelayMs) * time.Millisecond,
		Logger:                w.log,
		// The records of a completion batch reach the kernel before the
		// completion is sent, so a SIGKILL cannot lose the record of a
		// completed delivery.
		BeforeComplete: func(context.Context, []*relaybus.Delivery) error { return rec.flush() },
	}
	bus, err := relaybus.New(st, cfg)
	if err != nil {
		return err
	}
	cost := time.Duration(wl.HandlerCostUs) * time.Microsecond
	extra := time.Duration(dc.ExtraCostPerDeliveryUs) * time.Microsecond
	for _, h := range wl.Handlers {
		fn := func(ctx context.Context, d *relaybus.Delivery) error {
			start := time.Now()
			if cost > 0 {
				spin(cost)
			}
			if extra > 0 {
				spin(extra)
			}
			poison := len(d.Payload) > 0 && d.Payload[0] == protocol.PayloadPoison
			fail := poison || d.Attempts <= wl.FailFirst
			rec.mu.Lock()
			err := rec.w.AddHandled(record.Handled{
				EventID: d.EventID, Handler: d.Handler, Key: d.Key, Sequence: d.Sequence,
				Attempt: d.Attempts, HandleNs: start.UnixNano(), OK: !fail,
			})
			rec.mu.Unlock()
			if err != nil {
				return err
			}
			if fail {
				failed.Add(1)
				return fmt.Errorf("planted failure (poison=%v, attempt %d)", poison, d.Attempts)
			}
			handled.Add(1)
			return nil
		}
		if err := bus.Handle(wl.EventType, h, fn, w.workloadHandlerOptions()); err != nil {
			return err
		}
	}
	counters := func() *protocol.Counters {
		s := bus.DispatcherStats()
		c := &protocol.Counters{
			Handled: handled.Load(), HandlerFailed: failed.Load(),
			Completed: s.Completed, Claims: s.Claims, Claimed: s.Claimed,
			Rescheduled: s.Rescheduled, Buried: s.Buried, Released: s.Released, LeasesLost: s.LeasesLost,
		}
		rec.counters(c)
		return c
	}
	w.ready()
	tickStop := make(chan struct{})
	go w.tick(tickStop, func() { w.out.emit(&protocol.Message{Type: protocol.TypeCounters, Counters: counters()}) })
	runErr := bus.Run(ctx)
	close(tickStop)
	closeErr := rw.Close()
	if runErr != nil {
		return runErr
	}
	if closeErr != nil {
		return fmt.Errorf("worker: closing records: %w", closeErr)
	}
	w.out.emit(&protocol.Message{Type: protocol.TypeDone, Counters: counters()})
	return nil
}

// spin busy-waits for d: a handler cost that uses CPU like real work
// does, and that a sleep's timer granularity would not reproduce.
func spin(d time.Duration) {
	for end := time.Now().Add(d); time.Now().Before(end); {
	}
}
