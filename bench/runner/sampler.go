package runner

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/berkcansavur/relaybus/bench/result"
	"github.com/berkcansavur/relaybus/bench/stats"
	"github.com/berkcansavur/relaybus/bench/validate"
)

// tableSampler samples a window database's tables every step while the
// window runs: one sample at its start (start), then one per step, then
// one at its end (stop).
type tableSampler struct {
	read func(ctx context.Context) (result.TablePoint, error)
	t0   time.Time
	now  func() time.Time

	mu     sync.Mutex
	points []result.TablePoint
	err    error
	cancel context.CancelFunc
	done   chan struct{}
}

// startSampler takes the first sample at once (stamped against t0, the
// window's start, which the caller sets just after) and then one every
// step until stop.
func startSampler(ctx context.Context, read func(context.Context) (result.TablePoint, error), step time.Duration, t0 time.Time, now func() time.Time) *tableSampler {
	if now == nil {
		now = time.Now
	}
	s := &tableSampler{read: read, t0: t0, now: now, done: make(chan struct{})}
	s.sample(ctx)
	sctx, cancel := context.WithCancel(ctx)
	s.cancel = cancel
	go func() {
		defer close(s.done)
		tick := time.NewTicker(step)
		defer tick.Stop()
		for {
			select {
			case <-sctx.Done():
				return
			case <-tick.C:
				s.sample(sctx)
			}
		}
	}()
	return s
}

func (s *tableSampler) sample(ctx context.Context) {
	p, err := s.read(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		if s.err == nil && ctx.Err() == nil {
			s.err = err
		}
		return
	}
	p.AtMs = s.now().Sub(s.t0).Milliseconds()
	s.points = append(s.points, p)
}

// stop ends the sampling, takes the last sample, and returns every
// sample in time order and the first error of a read.
func (s *tableSampler) stop(ctx context.Context) ([]result.TablePoint, error) {
	s.cancel()
	<-s.done
	s.sample(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	slices.SortStableFunc(s.points, func(a, b result.TablePoint) int { return int(a.AtMs - b.AtMs) })
	return s.points, s.err
}

// bloatSteps cuts the window into steps of step (the last one takes
// the window's remainder) and gives each its deliveries per second (ok
// handles of non-poison deliveries stamped inside it) and, where the
// window has publishers and dispatchers, the commit-to-handler latency
// p50 and p99 of the events committed in it, each to its first ok
// handle, censored at the window's end as windowMetrics does.
func bloatSteps(in *validate.Input, win span, step time.Duration, latency bool) []result.Step {
	secs := win.seconds()
	n := max(1, int(secs/step.Seconds()))
	idx := func(ns int64) int { return min(n-1, int((ns-win.start)/int64(step))) }
	length := func(i int) float64 {
		if i == n-1 {
			return secs - float64(n-1)*step.Seconds()
		}
		return step.Seconds()
	}
	poison := in.Expect.PoisonEventIDs
	handled := make([]float64, n)
	first := map[pair]int64{}
	for _, f := range in.Files {
		for _, h := range f.Handled {
			if !h.OK || poison[h.EventID] {
				continue
			}
			if win.contains(h.HandleNs) {
				handled[idx(h.HandleNs)]++
			}
			k := pair{h.EventID, h.Handler}
			if t, ok := first[k]; !ok || h.HandleNs < t {
				first[k] = h.HandleNs
			}
		}
	}
	lat := make([][]float64, n)
	if latency {
		seen := map[string]bool{}
		for _, f := range in.Files {
			for _, p := range f.Published {
				if p.Uncertain || seen[p.EventID] || poison[p.EventID] {
					continue
				}
				seen[p.EventID] = true
				if !win.contains(p.CommitNs) {
					continue
				}
				for _, h := range in.Handlers {
					end := win.end
					if t, ok := first[pair{p.EventID, h}]; ok && t < win.end {
						end = t
					}
					i := idx(p.CommitNs)
					lat[i] = append(lat[i], float64(end-p.CommitNs)/1e6)
				}
			}
		}
	}
	out := make([]result.Step, n)
	for i := range out {
		out[i].EndMs = int64((float64(i)*step.Seconds() + length(i)) * 1000)
		if d := length(i); d > 0 {
			out[i].DeliveriesPerS = handled[i] / d
		}
		if len(lat[i]) > 0 {
			slices.Sort(lat[i])
			p50, p99 := stats.Quantile(lat[i], 0.50), stats.Quantile(lat[i], 0.99)
			out[i].E2EP50Ms, out[i].E2EP99Ms = &p50, &p99
		}
	}
	return out
}
