package runner

import (
	"cmp"
	"slices"
	"time"

	"github.com/berkcansavur/relaybus/bench/result"
	"github.com/berkcansavur/relaybus/bench/scenarios"
	"github.com/berkcansavur/relaybus/bench/stats"
	"github.com/berkcansavur/relaybus/bench/validate"
)

// maxLatencies bounds the raw latencies kept per sample for plots.
const maxLatencies = 2000

// span is a measured window [start, end) in wall-clock nanoseconds.
type span struct{ start, end int64 }

func (s span) contains(ns int64) bool { return ns >= s.start && ns < s.end }

func (s span) seconds() float64 { return float64(s.end-s.start) / float64(time.Second) }

// pair is one (event, handler): one delivery.
type pair struct{ event, handler string }

// windowResult is what the records say about one window.
type windowResult struct {
	metrics   map[string]float64
	series    []float64 // throughput per seriesStep bucket, as a rate per second (plots)
	latencies []float64 // subsampled commit-to-handler latencies, ms
	// units: the deliveries of the window (in publish-only cells, the
	// events), the divisor of the per-delivery server metrics: those
	// handled in it in a drain, those published in it (events times
	// handlers) in a cell that publishes at a fixed rate while it
	// dispatches. There the offered work is the same for both sides,
	// while what a side completes inside the window is not: a dispatcher
	// that polls once a second completes its backlog in bursts, more in
	// one window than was published in it and less in the next, and its
	// WAL and statements per handled delivery would look lower (or
	// higher) by as much, though it wrote the same.
	units float64
	// ranOut: a preloaded cell handled its whole preload before the
	// window ended, so the window measured an idle store in part.
	ranOut bool
	// noCallStarts: publish latency is not measured, because publisher
	// records of the window carry no call start (an old worker).
	noCallStarts bool
}

// seriesStep is the resolution of a window's throughput series
// (Sample.Series, Sample.SeriesStepMs): a 4 s window gives 16 points.
const seriesStep = 250 * time.Millisecond

// windowMetrics computes the metrics that come from the records, all of
// them from what is stamped inside the window [win.start, win.end):
//
//   - throughput: the ok handles (or certain commits) inside it;
//   - publish latency: one sample per publish call whose commit returned
//     inside it, from the call's start to the commit's return, merged
//     across processes as samples (never by averaging percentiles);
//   - commit-to-handler latency: per (event, handler) of the events
//     committed inside it, to the first ok handle; a delivery not handled
//     when the window ends counts with its age at the end (a lower bound,
//     right-censored), so the drain's fast dispatchers never shorten it;
//   - backlog max: deliveries committed and not yet handled (or, for
//     poison, not yet given up), at its worst inside the window.
func windowMetrics(in *validate.Input, win span, c *scenarios.Cell) windowResult {
	res := windowResult{metrics: map[string]float64{}}
	secs := win.seconds()
	// Buckets of seriesStep; the last also takes the window's fraction of
	// a step past them (the window is never exactly its length), and
	// each is turned into a rate per second over its own length.
	stepS := seriesStep.Seconds()
	buckets := max(1, int(secs/stepS))
	bucket := func(ns int64) int { return min(buckets-1, int((ns-win.start)/int64(seriesStep))) }
	perSecond := func(series []float64) []float64 {
		for i := range series {
			d := stepS
			if i == buckets-1 {
				d = secs - float64(buckets-1)*stepS
			}
			if d > 0 {
				series[i] /= d
			}
		}
		return series
	}
	handlers := len(in.Handlers)
	poison := in.Expect.PoisonEventIDs

	// Events: the first certain record of each.
	type call struct {
		file          int
		start, commit int64
	}
	commit := map[string]int64{}
	calls := map[call]bool{}
	events := 0.0
	eventSeries := make([]float64, buckets)
	for fi, f := range in.Files {
		for _, p := range f.Published {
			if p.Uncertain {
				continue
			}
			if _, seen := commit[p.EventID]; seen {
				continue
			}
			commit[p.EventID] = p.CommitNs
			if !win.contains(p.CommitNs) {
				continue
			}
			events++
			eventSeries[bucket(p.CommitNs)]++
			if p.CallStartNs == 0 {
				res.noCallStarts = true
			} else {
				calls[call{fi, p.CallStartNs, p.CommitNs}] = true
			}
		}
	}
	// Deliveries: the ok handles inside the window, the first ok handle
	// of each pair, and the last handle of each poison pair (when it was
	// given up).
	first, lastPoison := map[pair]int64{}, map[pair]int64{}
	deliveries := 0.0
	deliverySeries := make([]float64, buckets)
	for _, f := range in.Files {
		for _, h := range f.Handled {
			k := pair{h.EventID, h.Handler}
			if poison[h.EventID] {
				lastPoison[k] = max(lastPoison[k], h.HandleNs)
				continue
			}
			if !h.OK {
				continue
			}
			if win.contains(h.HandleNs) {
				deliveries++
				deliverySeries[bucket(h.HandleNs)]++
			}
			if f, ok := first[k]; !ok || h.HandleNs < f {
				first[k] = h.HandleNs
			}
		}
	}

	m := res.metrics
	if c.DispatcherProcs > 0 {
		m[result.MetricDeliveriesPerS] = deliveries / secs
		res.series, res.units = perSecond(deliverySeries), deliveries
	}
	if c.PublisherProcs > 0 {
		m[result.MetricEventsPerS] = events / secs
		if c.DispatcherProcs == 0 {
			res.series, res.units = perSecond(eventSeries), events
		}
		if !res.noCallStarts && len(calls) > 0 {
			lat := make([]float64, 0, len(calls))
			for k := range calls {
				lat = append(lat, float64(k.commit-k.start)/1e6)
			}
			slices.Sort(lat)
			m[result.MetricPublishP50Ms] = stats.Quantile(lat, 0.50)
			m[result.MetricPublishP99Ms] = stats.Quantile(lat, 0.99)
		}
	}
	if c.PublisherProcs > 0 && c.DispatcherProcs > 0 {
		var lat []float64
		for id, cn := range commit {
			if !win.contains(cn) || poison[id] {
				continue
			}
			for _, h := range in.Handlers {
				end := win.end // not handled inside the window: censored
				if f, ok := first[pair{id, h}]; ok && f < win.end {
					end = f
				}
				lat = append(lat, float64(end-cn)/1e6)
			}
		}
		slices.Sort(lat)
		if len(lat) > 0 {
			m[result.MetricE2EP50Ms] = stats.Quantile(lat, 0.50)
			m[result.MetricE2EP95Ms] = stats.Quantile(lat, 0.95)
			m[result.MetricE2EP99Ms] = stats.Quantile(lat, 0.99)
			res.latencies = subsample(lat, maxLatencies)
		}
		m[result.MetricBacklogMax] = backlogMax(commit, first, lastPoison, handlers, win)
		m[result.MetricAchievedPerS] = deliveries / secs / float64(handlers)
		// The server metrics per delivery published (see units).
		res.units = events * float64(handlers)
	}
	if c.Preload > 0 && c.PublisherProcs == 0 {
		left := 0
		for id := range commit {
			for _, h := range in.Handlers {
				if f, ok := first[pair{id, h}]; !poison[id] && (!ok || f >= win.end) {
					left++
				}
			}
		}
		res.ranOut = left == 0
	}
	return res
}

// backlogMax is the largest number of deliveries committed and not yet
// done at any instant inside win: +handlers at each commit, -1 at each
// pair's first ok handle, or for a poison pair at its last handle.
func backlogMax(commit map[string]int64, first, lastPoison map[pair]int64, handlers int, win span) float64 {
	type step struct {
		ns    int64
		delta int
	}
	backlog := 0
	var steps []step
	add := func(ns int64, delta int) {
		switch {
		case ns < win.start:
			backlog += delta
		case ns < win.end:
			steps = append(steps, step{ns, delta})
		}
	}
	for _, cn := range commit {
		add(cn, handlers)
	}
	// Only deliveries of events known to be committed count (an
	// uncertain event's handles have no commit to start from).
	for k, ns := range first {
		if _, ok := commit[k.event]; ok {
			add(ns, -1)
		}
	}
	for k, ns := range lastPoison {
		if _, ok := commit[k.event]; ok {
			add(ns, -1)
		}
	}
	// At equal times the handles go first: a delivery handled the
	// instant another is committed does not make both count.
	slices.SortFunc(steps, func(a, b step) int {
		if a.ns != b.ns {
			return cmp.Compare(a.ns, b.ns)
		}
		return cmp.Compare(a.delta, b.delta)
	})
	most := max(backlog, 0)
	for _, s := range steps {
		backlog += s.delta
		most = max(most, backlog)
	}
	return float64(most)
}

// subsample keeps every k-th of sorted so that at most n remain.
func subsample(sorted []float64, n int) []float64 {
	step := max(1, len(sorted)/n)
	out := make([]float64, 0, min(len(sorted), n+1))
	for i := 0; i < len(sorted); i += step {
		out = append(out, sorted[i])
	}
	return out
}
