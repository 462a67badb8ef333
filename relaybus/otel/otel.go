package otel

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	otelglobal "go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/berkcansavur/relaybus/relaybus"
)

// ScopeName is the instrumentation scope of the meter and the tracer.
const ScopeName = "github.com/berkcansavur/relaybus/relaybus/otel"

// Options configure New. A nil *Options takes every default.
type Options struct {
	// MeterProvider makes the instruments. Default: the global one
	// (go.opentelemetry.io/otel.GetMeterProvider), read once by New.
	MeterProvider metric.MeterProvider
	// TracerProvider makes the publish and handler spans. Default: the
	// global one (GetTracerProvider), read once by New.
	TracerProvider trace.TracerProvider
	// Propagator writes the trace context into an event's Headers at
	// publish and reads it back from a delivery's. Default: the global one
	// (GetTextMapPropagator), read once by New. The global default
	// propagator of OpenTelemetry is a no-op until the program sets one:
	// set propagation.TraceContext{} (W3C traceparent and tracestate) here
	// or globally, or no header is written.
	Propagator propagation.TextMapPropagator
	// ChildOfPublish makes a handler span a child of the publish span it
	// extracts from the delivery's headers, in the publisher's trace,
	// instead of the root of a trace of its own linked to it (the
	// default; see "Traces" in the package doc for why).
	ChildOfPublish bool
	// SamplerAttributes gives a handler span's sampler, at the span's
	// start, the five messaging.* attributes that OpenTelemetry's
	// messaging conventions name as sampling-relevant
	// (messaging.system, messaging.operation.type and .name,
	// messaging.destination.name, the event type, and
	// messaging.consumer.group.name, the handler). Without it the sampler
	// sees the span's kind, its name ("process <event type>") and its
	// link or parent, and every attribute is set only on a span that
	// records. It costs each attempt, sampled or not, a copy of the five
	// on the heap ("Cost" in the package doc); set it for a sampler that
	// decides by handler.
	SamplerAttributes bool
	// Now is the clock the lag is measured with: set it to the bus's
	// Config.Now when that is not time.Now. Default time.Now. Durations
	// are always measured on the monotonic clock.
	Now func() time.Time
}

// Instruments are the meters and the tracer of one or more buses. Make
// them once with New; they are safe for concurrent use.
type Instruments struct {
	tracer         trace.Tracer
	prop           propagation.TextMapPropagator
	childOfPublish bool
	// samplerAttributes is Options.SamplerAttributes.
	samplerAttributes bool
	now               func() time.Time

	handlerCalls    metric.Int64ObservableCounter
	handlerFailures metric.Int64Counter
	handlerDuration metric.Float64Histogram
	handlerLag      metric.Float64Histogram
	handlerActive   metric.Int64ObservableUpDownCounter
	finished        metric.Int64ObservableCounter

	claimDuration   metric.Float64Histogram
	claimSize       metric.Int64Histogram
	leaseRenewals   metric.Int64Counter
	leasesLost      metric.Int64Counter
	publishDuration metric.Float64Histogram

	// meter registers the callbacks of ObserveDispatcher.
	meter    metric.Meter
	inFlight metric.Int64ObservableUpDownCounter

	storeDeadRows       metric.Int64Gauge
	storeVacuumAge      metric.Float64Gauge
	storeLaneHOTShare   metric.Float64Gauge
	storeXminAge        metric.Float64Gauge
	storeHealthWarnings metric.Int64Counter

	queueDeliveries metric.Int64Gauge
	queueOldestDue  metric.Float64Gauge
	// queueMu guards queueSeen, the handlers RecordStatistics recorded
	// last, so that a handler that left the statistics reads 0 instead of
	// its last value.
	queueMu   sync.Mutex
	queueSeen map[string]bool

	// sets caches the measurement options of each attribute combination
	// (attrKey -> *measOpts): handler names, event types, outcomes and
	// error types are few, and a set built per call would allocate on
	// the dispatch path.
	sets sync.Map
	// handlers caches what every call of one handler on one event type
	// shares (handlerKey -> *handlerTel): one lookup per handler call
	// finds its metric options and its span's name and fixed attributes.
	handlers sync.Map
	// none is the options of no attribute at all, and publishOK and
	// publishTxOK those of a publish call that succeeded: the store
	// decorator's usual recordings, resolved once.
	none, publishOK, publishTxOK *measOpts
	// clockIsDefault is set when Options.Now was not given: the lag is
	// then measured from the same clock read as the call's start.
	clockIsDefault bool
}

// measOpts is one attribute set as the option slices that Record and
// Add take, built once: a slice passed on with ... is not copied, so a
// recording with a cached measOpts allocates nothing on the caller's
// side.
type measOpts struct {
	rec []metric.RecordOption
	add []metric.AddOption
	obs []metric.ObserveOption
}

func newMeasOpts(kvs ...attribute.KeyValue) *measOpts {
	o := metric.WithAttributeSet(attribute.NewSet(kvs...))
	return &measOpts{rec: []metric.RecordOption{o}, add: []metric.AddOption{o}, obs: []metric.ObserveOption{o}}
}

// Instrument names: the table in the package doc lists each with its
// unit and attributes.
const (
	NameHandlerCalls    = "relaybus.handler.calls"
	NameHandlerFailures = "relaybus.handler.failures"
	NameHandlerDuration = "relaybus.handler.duration"
	NameHandlerLag      = "relaybus.handler.lag"
	NameHandlerActive   = "relaybus.handler.active"
	NameDeliveryFinish  = "relaybus.delivery.finished"
	NameClaimDuration   = "relaybus.claim.duration"
	NameClaimSize       = "relaybus.claim.size"
	NameLeaseRenewals   = "relaybus.lease.renewals"
	NameLeasesLost      = "relaybus.lease.lost"
	NamePublishDuration = "relaybus.publish.duration"

	NameDispatcherInFlight = "relaybus.dispatcher.in_flight"

	NameStoreDeadRows       = "relaybus.store.dead_rows"
	NameStoreVacuumAge      = "relaybus.store.vacuum.age"
	NameStoreLaneHOTShare   = "relaybus.store.lane.hot_share"
	NameStoreXminAge        = "relaybus.store.xmin.age"
	NameStoreHealthWarnings = "relaybus.store.health.warnings"

	NameQueueDeliveries = "relaybus.queue.deliveries"
	NameQueueOldestDue  = "relaybus.queue.oldest_due.age"
)

// Attribute keys. The messaging.* keys are OpenTelemetry's messaging
// semantic conventions; error.type is the general one.
const (
	AttrHandler       = attribute.Key("relaybus.handler")
	AttrEventType     = attribute.Key("relaybus.event.type")
	AttrOutcome       = attribute.Key("relaybus.outcome")
	AttrStoreMethod   = attribute.Key("relaybus.store.method")
	AttrOwner         = attribute.Key("relaybus.owner")
	AttrHealthCheck   = attribute.Key("relaybus.health.check")
	AttrStatus        = attribute.Key("relaybus.delivery.status")
	AttrEventKey      = attribute.Key("relaybus.event.key")
	AttrDeliveryID    = attribute.Key("relaybus.delivery.id")
	AttrAttempt       = attribute.Key("relaybus.delivery.attempt")
	AttrErrorType     = attribute.Key("error.type")
	attrSystem        = attribute.Key("messaging.system")
	attrOperationType = attribute.Key("messaging.operation.type")
	attrOperationName = attribute.Key("messaging.operation.name")
	attrDestination   = attribute.Key("messaging.destination.name")
	attrMessageID     = attribute.Key("messaging.message.id")
	attrConsumerGroup = attribute.Key("messaging.consumer.group.name")
	attrBatchCount    = attribute.Key("messaging.batch.message_count")
)

// Bucket boundaries, in seconds. A handler call or a store call is
// milliseconds to seconds; a lag includes retry backoff and backlogs, so
// its buckets reach an hour.
var (
	durationBuckets  = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}
	lagBuckets       = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600}
	claimSizeBuckets = []float64{0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 10000}
)

// New makes the instruments on opts' providers. Its errors are the meter
// provider's (an instrument it refused). The meter provider keeps the
// Instruments, whose per-handler counts it reads at every collection,
// for as long as it lives: make them once per provider, and share them
// between buses.
func New(opts *Options) (*Instruments, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.MeterProvider == nil {
		o.MeterProvider = otelglobal.GetMeterProvider()
	}
	if o.TracerProvider == nil {
		o.TracerProvider = otelglobal.GetTracerProvider()
	}
	if o.Propagator == nil {
		o.Propagator = otelglobal.GetTextMapPropagator()
	}
	clockIsDefault := o.Now == nil
	if clockIsDefault {
		o.Now = time.Now
	}
	in := &Instruments{
		tracer:            o.TracerProvider.Tracer(ScopeName, trace.WithInstrumentationVersion(relaybus.Version)),
		prop:              o.Propagator,
		childOfPublish:    o.ChildOfPublish,
		samplerAttributes: o.SamplerAttributes,
		now:               o.Now,
		clockIsDefault:    clockIsDefault,
	}
	in.none = in.opts(attrKey{})
	in.publishOK = in.opts(attrKey{method: "EventPublish"})
	in.publishTxOK = in.opts(attrKey{method: "EventPublishTx"})
	m := o.MeterProvider.Meter(ScopeName, metric.WithInstrumentationVersion(relaybus.Version))
	var errs []error
	check := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	var err error
	// relaybus.handler.calls, relaybus.handler.active and
	// relaybus.delivery.finished are counts each handlerTel keeps with
	// atomic adds, observed at every collection (observeHandlers): the
	// same sums their synchronous counterparts would report, for an
	// atomic add per change instead of a recording by the SDK.
	in.handlerCalls, err = m.Int64ObservableCounter(NameHandlerCalls, metric.WithUnit("{call}"),
		metric.WithDescription("Handler calls started (plain and transactional), per handler."))
	check(err)
	in.handlerFailures, err = m.Int64Counter(NameHandlerFailures, metric.WithUnit("{call}"),
		metric.WithDescription("Handler calls that failed (an error or a panic), per handler and error type."))
	check(err)
	in.handlerDuration, err = m.Float64Histogram(NameHandlerDuration, metric.WithUnit("s"),
		metric.WithDescription("Duration of handler calls, per handler; failed calls carry error.type."),
		metric.WithExplicitBucketBoundaries(durationBuckets...))
	check(err)
	in.handlerLag, err = m.Float64Histogram(NameHandlerLag, metric.WithUnit("s"),
		metric.WithDescription("Time from an event's CreatedAt (set at publish, before the commit) to the start of a handler call on it."),
		metric.WithExplicitBucketBoundaries(lagBuckets...))
	check(err)
	in.handlerActive, err = m.Int64ObservableUpDownCounter(NameHandlerActive, metric.WithUnit("{call}"),
		metric.WithDescription("Handler calls running now, per handler."))
	check(err)
	in.finished, err = m.Int64ObservableCounter(NameDeliveryFinish, metric.WithUnit("{attempt}"),
		metric.WithDescription("Attempts the store recorded, per handler and outcome (completed, rescheduled, buried, released, lease_lost, write_failed)."))
	check(err)
	if len(errs) == 0 {
		_, err = m.RegisterCallback(in.observeHandlers, in.handlerCalls, in.handlerActive, in.finished)
		check(err)
	}
	in.claimDuration, err = m.Float64Histogram(NameClaimDuration, metric.WithUnit("s"),
		metric.WithDescription("Round trip of DeliveryClaim calls; failed calls carry error.type."),
		metric.WithExplicitBucketBoundaries(durationBuckets...))
	check(err)
	in.claimSize, err = m.Int64Histogram(NameClaimSize, metric.WithUnit("{delivery}"),
		metric.WithDescription("Deliveries returned by each DeliveryClaim call (0 included); its sum is the deliveries claimed."),
		metric.WithExplicitBucketBoundaries(claimSizeBuckets...))
	check(err)
	in.leaseRenewals, err = m.Int64Counter(NameLeaseRenewals, metric.WithUnit("{lease}"),
		metric.WithDescription("Leases a LeaseExtend call renewed."))
	check(err)
	in.leasesLost, err = m.Int64Counter(NameLeasesLost, metric.WithUnit("{lease}"),
		metric.WithDescription("Leases a LeaseExtend call found no longer held."))
	check(err)
	in.publishDuration, err = m.Float64Histogram(NamePublishDuration, metric.WithUnit("s"),
		metric.WithDescription("Duration of the store's publish calls (EventPublishTx: the inserts, not the caller's commit; EventPublish: with its commit)."),
		metric.WithExplicitBucketBoundaries(durationBuckets...))
	check(err)
	in.meter = m
	in.inFlight, err = m.Int64ObservableUpDownCounter(NameDispatcherInFlight, metric.WithUnit("{delivery}"),
		metric.WithDescription("Deliveries a dispatcher holds a lease on now (relaybus.DispatcherStats.InFlight), per owner."))
	check(err)
	in.storeDeadRows, err = m.Int64Gauge(NameStoreDeadRows, metric.WithUnit("{row}"),
		metric.WithDescription("Dead row versions of the deliveries table that vacuum has not removed yet (the database's statistics)."))
	check(err)
	in.storeVacuumAge, err = m.Float64Gauge(NameStoreVacuumAge, metric.WithUnit("s"),
		metric.WithDescription("Time since the deliveries table was last vacuumed (autovacuum or VACUUM)."))
	check(err)
	in.storeLaneHOTShare, err = m.Float64Gauge(NameStoreLaneHOTShare, metric.WithUnit("1"),
		metric.WithDescription("Share of the lane row updates since the previous health report that were heap-only (HOT)."))
	check(err)
	in.storeXminAge, err = m.Float64Gauge(NameStoreXminAge, metric.WithUnit("s"),
		metric.WithDescription("Age of the transaction holding the database's xmin horizon furthest back; 0 when none does."))
	check(err)
	in.storeHealthWarnings, err = m.Int64Counter(NameStoreHealthWarnings, metric.WithUnit("{warning}"),
		metric.WithDescription("Store health warnings (relaybus.CheckStoreHealth), per check."))
	check(err)
	in.queueDeliveries, err = m.Int64Gauge(NameQueueDeliveries, metric.WithUnit("{delivery}"),
		metric.WithDescription("Deliveries of a handler by status (relaybus.Bus.Statistics), as RecordStatistics last recorded them."))
	check(err)
	in.queueOldestDue, err = m.Float64Gauge(NameQueueOldestDue, metric.WithUnit("s"),
		metric.WithDescription("How long the oldest due pending delivery of a handler has been due (relaybus.Counts.OldestDueAge); 0 when none is."))
	check(err)
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("relaybus/otel: %w", err)
	}
	return in, nil
}

// Configure returns cfg with the instruments wired in: Middleware first
// in Config.Middleware (outermost, so its duration covers every other
// middleware and its span is their context), and AfterFinish called
// before cfg's own AfterFinish, if any. Pass the result to relaybus.New,
// with a store wrapped by WrapStore for the dispatcher's metrics.
func (in *Instruments) Configure(cfg relaybus.Config) relaybus.Config {
	cfg.Middleware = append([]relaybus.Middleware{in.Middleware()}, cfg.Middleware...)
	if after := cfg.AfterFinish; after != nil {
		cfg.AfterFinish = func(ctx context.Context, f relaybus.Finish) {
			in.AfterFinish(ctx, f)
			after(ctx, f)
		}
	} else {
		cfg.AfterFinish = in.AfterFinish
	}
	return cfg
}

// attrKey names one cached attribute combination; unset fields are not
// attributes.
type attrKey struct {
	handler, eventType, outcome, errorType, method string
}

// opts returns the cached measurement options of k.
func (in *Instruments) opts(k attrKey) *measOpts {
	if o, ok := in.sets.Load(k); ok {
		return o.(*measOpts)
	}
	kvs := make([]attribute.KeyValue, 0, 4)
	if k.handler != "" {
		kvs = append(kvs, AttrHandler.String(k.handler))
	}
	if k.eventType != "" {
		kvs = append(kvs, AttrEventType.String(k.eventType))
	}
	if k.outcome != "" {
		kvs = append(kvs, AttrOutcome.String(k.outcome))
	}
	if k.errorType != "" {
		kvs = append(kvs, AttrErrorType.String(k.errorType))
	}
	if k.method != "" {
		kvs = append(kvs, AttrStoreMethod.String(k.method))
	}
	o, _ := in.sets.LoadOrStore(k, newMeasOpts(kvs...))
	return o.(*measOpts)
}

// The error.type values: a handful, so that a metric's series stay few.
const (
	errorTypePanic     = "panic"
	errorTypePermanent = "permanent"
	errorTypeTimeout   = "timeout"
	errorTypeCanceled  = "canceled"
	errorTypeInvalid   = "invalid"
	errorTypeClosed    = "closed"
	// errorTypeOther is OpenTelemetry's fallback value of error.type.
	errorTypeOther = "_OTHER"
)

// errorType classifies err for the error.type attribute ("" for nil).
func errorType(err error) string {
	switch {
	case err == nil:
		return ""
	case relaybus.IsPermanent(err):
		return errorTypePermanent
	case errors.Is(err, context.DeadlineExceeded):
		return errorTypeTimeout
	case errors.Is(err, context.Canceled):
		return errorTypeCanceled
	case errors.Is(err, relaybus.ErrInvalid):
		return errorTypeInvalid
	case errors.Is(err, relaybus.ErrClosed):
		return errorTypeClosed
	default:
		return errorTypeOther
	}
}
