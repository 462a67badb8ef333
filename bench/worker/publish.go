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
	"github.com/jackc/pgx/v5/pgconn"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/berkcansavur/relaybus/bench/protocol"
	"github.com/berkcansavur/relaybus/bench/record"
	"github.com/berkcansavur/relaybus/bench/stats"
	"github.com/berkcansavur/relaybus/relaybus"
)

// callTimeout bounds one store call of a publisher; a stopped worker
// lets its current call finish rather than cancel it mid-commit, which
// would turn a clean stop into an uncertain commit.
const callTimeout = time.Minute

// maxLatencySamples bounds the publish latencies a process keeps; past
// it, reservoir sampling keeps a uniform sample.
const maxLatencySamples = 1_000_000

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
				commitNs, callStartNs := end.UnixNano(), t0.UnixNano()
				rec.mu.Lock()
				for _, e := range events {
					if err := rec.w.AddPublished(record.Published{
						EventID: e.ID, EventType: e.Type, Key: e.Key, CommitNs: commitNs, CallStartNs: callStartNs,
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
// error before the commit means nothing was published; so does a commit
// that the server answered with an error or reported rolled back. Only a
// commit whose answer never came (the connection died, the call timed
// out) has an unknown outcome, and the validator accepts either for it.
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
		return commitOutcome(err), err
	}
	return outcomeCommitted, nil
}

// commitOutcome classifies a failed commit: definitely not committed
// when the server answered (PostgreSQL: any server error, or the
// rollback pgx reports for a commit of a failed transaction; MongoDB: a
// server error without the UnknownTransactionCommitResult label), else
// unknown.
func commitOutcome(err error) outcome {
	var pgErr *pgconn.PgError
	var mongoErr mongo.ServerError
	switch {
	case errors.Is(err, pgx.ErrTxCommitRollback), errors.As(err, &pgErr):
		return outcomeFailed
	case errors.As(err, &mongoErr):
		if mongoErr.HasErrorLabel("UnknownTransactionCommitResult") || mongo.IsNetworkError(err) || mongo.IsTimeout(err) {
			return outcomeUncertain
		}
		return outcomeFailed
	}
	return outcomeUncertain
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
