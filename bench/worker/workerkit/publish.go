package workerkit

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/berkcansavur/relaybus/bench/protocol"
	"github.com/berkcansavur/relaybus/bench/record"
	"github.com/berkcansavur/relaybus/bench/stats"
)

const (
	// CallTimeout bounds one publish call; a stopped worker lets its
	// current call finish rather than cancel it mid-commit, which would
	// turn a clean stop into an uncertain commit.
	CallTimeout = time.Minute
	// MaxLatencySamples bounds the publish latencies a process keeps;
	// past it, reservoir sampling keeps a uniform sample.
	MaxLatencySamples = 1_000_000
	// FailedCallBackoff is the pause after a failed publish call: the
	// store may be restarting.
	FailedCallBackoff = 100 * time.Millisecond
)

// Outcome is what a publish call did.
type Outcome int

const (
	Committed Outcome = iota
	Failed            // nothing was published
	Uncertain         // the commit was sent; whether it applied is unknown
)

// Event is one event of a publish call, as the workload defines it.
type Event struct {
	ID, Type, Key string
	Poison        bool // the handler is to fail it every attempt
}

// PublishCall publishes events in one transaction and says whether they
// were committed. It runs on many goroutines at once.
type PublishCall func(ctx context.Context, events []Event) (Outcome, error)

// Payloads returns the workload's two payloads of n bytes (n >= 1), told
// apart by their first byte.
func Payloads(n int) (normal, poison []byte) {
	normal = make([]byte, n)
	for i := range normal {
		normal[i] = 'x'
	}
	poison = slices.Clone(normal)
	normal[0], poison[0] = protocol.PayloadNormal, protocol.PayloadPoison
	return normal, poison
}

// Publish plays preload and publisher: Publishers goroutines take Batch
// consecutive event indexes at a time (StartIndex + i*Stride), at
// RatePerSec across the process when set, until Events are published or
// ctx is done, and hand each batch to call. A call's events are recorded
// after it returned, with its start (from which the harness measures
// publish latency) and its end; a failed call records nothing and is
// counted. It writes ready, counters lines and the done line with the
// publish summary.
func (s *Session) Publish(ctx context.Context, call PublishCall) error {
	wl, pc := &s.Cfg.Workload, &s.Cfg.Publisher
	rw, err := record.Create(s.Cfg.RecordPath)
	if err != nil {
		return err
	}

	stride := max(pc.Stride, 1)
	var (
		next                            atomic.Int64 // events reserved so far
		published, calls, errs, unknown atomic.Int64
		recMu                           sync.Mutex // keeps one call's records in one write
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
		RecordCounters(rw, c)
		return c
	}

	s.Ready()
	tickStop := make(chan struct{})
	go s.Tick(tickStop, func() { s.Out.Emit(&protocol.Message{Type: protocol.TypeCounters, Counters: counters()}) })

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
				events := make([]Event, n)
				for i := range events {
					idx := pc.StartIndex + (first+int64(i))*stride
					events[i] = Event{
						ID:     protocol.EventID(wl.IDPrefix, idx),
						Type:   wl.EventType,
						Key:    protocol.Key(wl.Keys, wl.KeyCount, idx),
						Poison: protocol.IsPoison(idx, wl.PoisonEvery),
					}
				}
				callCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), CallTimeout)
				t0 := time.Now()
				firstStart.CompareAndSwap(0, t0.UnixNano())
				outcome, pubErr := call(callCtx, events)
				cancel()
				end := time.Now()
				if outcome == Failed {
					errs.Add(1)
					s.Log.Warn("publish failed", "events", len(events), "error", pubErr)
					select {
					case <-stopCtx.Done():
					case <-time.After(FailedCallBackoff):
					}
					continue
				}
				lastEnd.Store(end.UnixNano())
				commitNs, callStartNs := end.UnixNano(), t0.UnixNano()
				recMu.Lock()
				for _, e := range events {
					if err := rw.AddPublished(record.Published{
						EventID: e.ID, EventType: e.Type, Key: e.Key, CommitNs: commitNs, CallStartNs: callStartNs,
						Uncertain: outcome == Uncertain,
					}); err != nil {
						recMu.Unlock()
						setFatal(err)
						return
					}
				}
				err := rw.Flush()
				recMu.Unlock()
				if err != nil {
					setFatal(fmt.Errorf("%s: writing records: %w", s.Pkg, err))
					return
				}
				if outcome == Uncertain {
					unknown.Add(int64(len(events)))
					s.Log.Warn("publish commit outcome unknown", "events", len(events), "error", pubErr)
					continue
				}
				published.Add(int64(len(events)))
				calls.Add(1)
				ms := float64(end.Sub(t0)) / float64(time.Millisecond)
				latMu.Lock()
				latSeen++
				if len(lat) < MaxLatencySamples {
					lat = append(lat, ms)
				} else if j := rnd.Int64N(latSeen); j < MaxLatencySamples {
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
		return fmt.Errorf("%s: closing records: %w", s.Pkg, closeErr)
	}
	if s.Cfg.Role == protocol.RolePreload && published.Load()+unknown.Load() < int64(pc.Events) && ctx.Err() == nil {
		return fmt.Errorf("%s: preload published %d of %d events", s.Pkg, published.Load(), pc.Events)
	}
	sum := Summarize(lat)
	sum.Calls = calls.Load()
	if fs, le := firstStart.Load(), lastEnd.Load(); fs > 0 && le > fs {
		sum.ElapsedNs = le - fs
	}
	s.Out.Emit(&protocol.Message{Type: protocol.TypeDone, Counters: counters(), Publish: sum})
	return nil
}

// Summarize returns the quantiles of the publish call latencies (ms),
// by stats.Quantile, so that every worker reports them alike.
func Summarize(ms []float64) *protocol.PublishSummary {
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

// RecordCounters copies the record writer's statistics into c.
func RecordCounters(rw *record.Writer, c *protocol.Counters) {
	bytes, writes, spent := rw.Stats()
	c.RecordBytes, c.RecordWrites, c.RecordNs = bytes, writes, spent.Nanoseconds()
}
