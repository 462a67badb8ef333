package runner

import (
	"slices"
	"time"

	"github.com/berkcansavur/relaybus/bench/protocol"
	"github.com/berkcansavur/relaybus/bench/record"
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

// windowResult is what the records say about one window.
type windowResult struct {
	metrics   map[string]float64
	series    []float64 // per-second throughput (plots)
	latencies []float64 // subsampled commit-to-handler latencies, ms
	// units: the deliveries (or, in publish-only cells, the events) of
	// the window, the divisor of the per-delivery server metrics.
	units float64
	// ranOutEarly: the preload ran out in the last tenth of the window
	// or earlier.
	ranOutEarly bool
}

// windowMetrics computes the metrics that come from the records:
// throughput counts the ok handles (or commits) stamped inside the
// window.
func windowMetrics(files []validate.File, win span, c *scenarios.Cell, pubDone []*protocol.Message, backlogMax float64) windowResult {
	res := windowResult{metrics: map[string]float64{}}
	secs := win.seconds()
	// Whole seconds; the last bucket also takes the window's fraction of
	// a second past them (the window is never exactly its length).
	buckets := max(1, int(secs))
	bucket := func(ns int64) int { return min(buckets-1, int((ns-win.start)/int64(time.Second))) }

	commit := map[string]int64{}
	events := 0.0
	eventSeries := make([]float64, buckets)
	for _, p := range published(files) {
		commit[p.EventID] = p.CommitNs
		if !p.Uncertain && win.contains(p.CommitNs) {
			events++
			eventSeries[bucket(p.CommitNs)]++
		}
	}
	deliveries := 0.0
	lastOK := int64(0)
	deliverySeries := make([]float64, buckets)
	type pair struct{ event, handler string }
	first := map[pair]int64{}
	for _, h := range handledRecords(files) {
		if !h.OK {
			continue
		}
		if win.contains(h.HandleNs) {
			deliveries++
			lastOK = max(lastOK, h.HandleNs)
			deliverySeries[bucket(h.HandleNs)]++
		}
		k := pair{h.EventID, h.Handler}
		if f, ok := first[k]; !ok || h.HandleNs < f {
			first[k] = h.HandleNs
		}
	}
	m := res.metrics
	if c.DispatcherProcs > 0 {
		m[result.MetricDeliveriesPerS] = deliveries / secs
		res.series, res.units = deliverySeries, deliveries
	}
	if c.PublisherProcs > 0 {
		m[result.MetricEventsPerS] = events / secs
		if c.DispatcherProcs == 0 {
			res.series, res.units = eventSeries, events
		}
		var calls, p50, p99 float64
		for _, d := range pubDone {
			if d != nil && d.Publish != nil && d.Publish.Calls > 0 {
				n := float64(d.Publish.Calls)
				calls += n
				p50 += n * d.Publish.P50Ms
				p99 += n * d.Publish.P99Ms
			}
		}
		if calls > 0 {
			// Call-weighted mean of each process's percentiles: exact for
			// one process, an approximation across several.
			m[result.MetricPublishP50Ms] = p50 / calls
			m[result.MetricPublishP99Ms] = p99 / calls
		}
	}
	if c.PublisherProcs > 0 && c.DispatcherProcs > 0 {
		var lat []float64
		for k, h := range first {
			if cn, ok := commit[k.event]; ok && win.contains(cn) {
				lat = append(lat, float64(h-cn)/1e6)
			}
		}
		slices.Sort(lat)
		if len(lat) > 0 {
			m[result.MetricE2EP50Ms] = stats.Quantile(lat, 0.50)
			m[result.MetricE2EP95Ms] = stats.Quantile(lat, 0.95)
			m[result.MetricE2EP99Ms] = stats.Quantile(lat, 0.99)
			res.latencies = subsample(lat, maxLatencies)
		}
		m[result.MetricBacklogMax] = backlogMax
		m[result.MetricAchievedPerS] = deliveries / secs / float64(len(c.Workload.Handlers))
	}
	if c.Preload > 0 && c.PublisherProcs == 0 && lastOK < win.end-(win.end-win.start)/10 {
		res.ranOutEarly = true
	}
	return res
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

// published lists the publish records of every file.
func published(files []validate.File) []record.Published {
	var out []record.Published
	for _, f := range files {
		out = append(out, f.Published...)
	}
	return out
}

// handledRecords lists the handle records of every file.
func handledRecords(files []validate.File) []record.Handled {
	var out []record.Handled
	for _, f := range files {
		out = append(out, f.Handled...)
	}
	return out
}
