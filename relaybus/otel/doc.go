// Package otel instruments a relaybus Bus with OpenTelemetry metrics and
// traces. It uses only the OpenTelemetry API (go.opentelemetry.io/otel,
// otel/metric, otel/trace): the program chooses the SDK and exporters and
// hands their providers to New, or sets the globals. The core package
// relaybus does not import this one, so a service that does not want
// telemetry links none. Its name clashes with go.opentelemetry.io/otel:
// import it under another, such as relaybusotel.
//
// It plugs into the hooks the core already has, and nowhere else:
//
//   - Instruments.Middleware, a relaybus.Middleware (Config.Middleware,
//     or HandlerOptions.Middleware for one handler): the per-handler
//     metrics and the handler span, for plain and transactional handlers
//     alike;
//   - Instruments.AfterFinish, as Config.AfterFinish: how each attempt
//     ended, as the store recorded it;
//   - WrapStore, a Store decorator: the dispatcher's claims and lease
//     renewals and the store's publish calls;
//   - Publish and PublishTx, in place of Bus.Publish and Bus.PublishTx:
//     the publish span and the trace context in each event's Headers;
//   - Instruments.ObserveDispatcher, on a Bus: what its dispatcher has in
//     flight, read at every collection;
//   - Instruments.RecordStoreHealth, as StoreHealthWatch.OnReport of
//     Bus.WatchStoreHealth: the store's health gauges.
//
// Wiring (errors elided; Example shows it whole):
//
//	in, err := relaybusotel.New(&relaybusotel.Options{
//		MeterProvider:  meterProvider,
//		TracerProvider: tracerProvider,
//		Propagator:     propagation.TraceContext{},
//	})
//	bus, err := relaybus.New(relaybusotel.WrapStore[pgx.Tx](store, in), in.Configure(relaybus.Config{}))
//	err = bus.Handle("order.placed", "send-receipt", sendReceipt, nil)
//	err = relaybusotel.PublishTx(ctx, in, bus, tx, &relaybus.Event{Type: "order.placed", Key: "customer-42"})
//
// Configure puts the middleware first in Config.Middleware, so that its
// duration covers the other middleware and its span is their context, and
// chains AfterFinish before the one cfg has.
//
// # Metrics
//
// Every instrument is made by the meter named ScopeName. Attributes:
// relaybus.handler (the handler's name), relaybus.event.type,
// relaybus.outcome (a relaybus.FinishOutcome), relaybus.store.method,
// relaybus.owner (Bus.Owner), relaybus.health.check (a
// relaybus.HealthCheck... name), and error.type on a failure: permanent
// (relaybus.Permanent), timeout (context.DeadlineExceeded:
// HandlerOptions.Timeout or the handler's own), canceled
// (context.Canceled: a shutdown or a lost lease), invalid
// (relaybus.ErrInvalid), closed (relaybus.ErrClosed), panic (the handler
// panicked) or _OTHER. Event keys, IDs and delivery IDs are never metric
// attributes (they are unbounded); they are on the spans. The table
// writes the attribute keys without their relaybus. prefix; three of
// its counters are observable instruments (see Cost).
//
//	name                            kind           unit        attributes                         what
//	relaybus.handler.calls          counter        {call}      handler, event.type                handler calls started
//	relaybus.handler.failures       counter        {call}      handler, event.type, error.type    handler calls that failed (error or panic)
//	relaybus.handler.duration       histogram      s           handler, event.type[, error.type]  duration of a handler call
//	relaybus.handler.lag            histogram      s           handler, event.type                event's CreatedAt to the start of the call
//	relaybus.handler.active         updowncounter  {call}      handler, event.type                handler calls running now
//	relaybus.delivery.finished      counter        {attempt}   handler, event.type, outcome       attempts the store recorded, by outcome
//	relaybus.claim.duration         histogram      s           [error.type]                       DeliveryClaim round trip
//	relaybus.claim.size             histogram      {delivery}  none                               deliveries one DeliveryClaim returned (0 too)
//	relaybus.lease.renewals         counter        {lease}     none                               leases a LeaseExtend renewed
//	relaybus.lease.lost             counter        {lease}     none                               leases a LeaseExtend found no longer held
//	relaybus.publish.duration       histogram      s           store.method[, error.type]         EventPublishTx or EventPublish call
//	relaybus.dispatcher.in_flight   updowncounter  {delivery}  owner                              deliveries the dispatcher holds a lease on now
//	relaybus.store.dead_rows        gauge          {row}       none                               dead rows of the deliveries table
//	relaybus.store.vacuum.age       gauge          s           none                               time since the deliveries table was vacuumed
//	relaybus.store.lane.hot_share   gauge          1           none                               HOT share of lane updates since the last report
//	relaybus.store.xmin.age         gauge          s           none                               age of the transaction holding the xmin horizon
//	relaybus.store.health.warnings  counter        {warning}   health.check                       health warnings, per check
//	relaybus.queue.deliveries       gauge          {delivery}  handler, delivery.status           deliveries per handler and status (Bus.Statistics)
//	relaybus.queue.oldest_due.age   gauge          s           handler                            how long the handler's oldest due pending delivery has waited
//
// The first five come from Middleware, relaybus.delivery.finished from
// AfterFinish, the claim, lease and publish ones from WrapStore,
// relaybus.dispatcher.in_flight from ObserveDispatcher, the
// relaybus.store ones from RecordStoreHealth and the relaybus.queue ones
// from RecordStatistics. What each one means
// exactly:
//
//   - relaybus.handler.calls counts calls of the middleware, which runs
//     once per attempt that reached its handler; relaybus.handler.failures
//     those whose chain returned an error or panicked. A Permanent error
//     is a failure too, and the delivery is buried.
//   - relaybus.handler.duration is the time inside the middleware: the
//     handler and every middleware after this one, and for a
//     transactional handler not the transaction's begin or commit.
//   - relaybus.handler.lag is measured from Event.CreatedAt, which the
//     Bus sets at publish, before the publishing transaction commits: it
//     includes the rest of that transaction, the wait for a claim, any
//     backoff of earlier attempts and the wait for a free handler slot.
//     An event published with a CreatedAt of its own is measured from
//     that. It reads Options.Now, which must be the bus's clock.
//   - relaybus.handler.active is the number of handler calls in the
//     middleware now, exactly (+1 when a call starts, -1 when it ends,
//     panics included). It is the in-flight measure of this package: a
//     delivery claimed and not started yet, or whose completion is still
//     being written, is not in it: relaybus.dispatcher.in_flight counts
//     those.
//   - relaybus.dispatcher.in_flight is relaybus.DispatcherStats.InFlight
//     of each bus given to ObserveDispatcher, read when the metrics are
//     collected: the deliveries the dispatcher holds a lease on, from
//     the claim until their final write is done (a handler running or
//     waiting for a worker, a completion queued or being written). A
//     delivery whose lease was found lost leaves it at once, even while
//     its handler still runs.
//   - relaybus.delivery.finished counts Finish outcomes: completed (the
//     handler's success committed), rescheduled (failed, to be retried),
//     buried (a dead letter), released (given back, no attempt spent),
//     lease_lost (the final write found the lease taken over) and
//     write_failed (the final write kept failing; the delivery runs again
//     once its lease expires). An attempt whose lease the renewal found
//     lost while its handler ran gets no Finish, and so is not counted
//     here: relaybus.lease.lost counts it.
//   - relaybus.claim.size records every claim that returned, including
//     empty ones and what a claim that failed part way returned; its sum
//     is the deliveries claimed, its count the claims made.
//   - relaybus.lease.lost counts the false results of LeaseExtend: a
//     lease taken over (or expired and taken), and also a delivery that
//     finished while its renewal was under way, for which the store no
//     longer holds a lease. The dispatcher does not count the latter as
//     lost, so this can exceed DispatcherStats.LeasesLost, and a lease
//     lost while its completion was being written is counted here and
//     again as lease_lost in relaybus.delivery.finished.
//   - relaybus.publish.duration of EventPublishTx covers the inserts in
//     the caller's transaction, not its commit; of EventPublish (a store
//     that publishes in a transaction of its own: relaybus/postgres,
//     relaybus/mongo) the whole transaction, with its retries on
//     MongoDB. With group commit one EventPublish writes the events of
//     several Bus.Publish calls. Bus.Publish on a store without
//     EventPublisher runs TxBegin, EventPublishTx and TxCommit: only the
//     middle one is measured.
//   - The relaybus.store gauges take the values of the last report given
//     to RecordStoreHealth (relaybus.StoreHealthWatch.OnReport, once an
//     interval, a minute by default): they are as fresh as the watch's
//     interval. relaybus.store.vacuum.age counts from the later of the
//     last autovacuum and the last VACUUM and is not recorded while the
//     table has never been vacuumed; relaybus.store.lane.hot_share is
//     over the lane updates since the previous report and is not
//     recorded when there were none; relaybus.store.xmin.age is 0 when
//     no transaction holds the horizon. What to do when one of them
//     crosses its threshold: docs/operations.md in the relaybus
//     repository.
//
// WrapStore is transparent: it returns the wrapped store's results and
// errors as they are, has each optional capability of the driver
// package (driver.EventPublisher, driver.Waker, driver.HealthReporter)
// exactly when the wrapped store has it, and adds no other interface. Metrics of several
// buses on one wrapped store add up.
//
// # Traces
//
// Publish and PublishTx start a producer span, "publish <event type>"
// ("publish" when the events' types differ), with messaging.system
// "relaybus", messaging.operation.type "send", messaging.destination.name
// (the event type), messaging.batch.message_count for more than one
// event, and for one event its key and ID. The propagator writes the
// span's context into each event's Headers: with propagation.TraceContext
// the W3C traceparent, and tracestate when it is not empty. The headers
// are written into copies of the events; the caller's events get only what
// the Bus writes back (ID and CreatedAt), as from Bus.Publish.
//
// The middleware starts a consumer span per attempt, "process <event
// type>", with messaging.system, messaging.operation.type "process",
// messaging.destination.name, messaging.consumer.group.name (the
// handler), messaging.message.id (the event ID), relaybus.handler,
// relaybus.event.type, relaybus.event.key (when set),
// relaybus.delivery.id and relaybus.delivery.attempt (1 for the first).
// The sampler sees the span's kind, its name (which holds the event
// type) and its link or parent; the attributes are set only on a span
// that records, just after its start, so that an attempt that is not
// sampled pays for none of them. Options.SamplerAttributes gives the
// sampler the five that OpenTelemetry's messaging conventions name as
// sampling-relevant (messaging.system, messaging.operation.type and
// .name, messaging.destination.name, messaging.consumer.group.name) at
// the start too; no sampler sees the key, the attempt or the IDs. A failure sets its status to Error with the error's text, records the
// error as an event and sets error.type; a panic sets status Error
// "handler panicked" (the dispatcher recovers it, so the middleware does
// not see its value).
//
// The handler span is linked to the publish span it extracts from the
// delivery's headers and is the root of a trace of its own, by default.
// That is what OpenTelemetry's messaging conventions recommend for
// consumers that process messages apart from their producer: an event is
// handled by several handlers, in other processes, possibly hours later
// and over many attempts, and its deliveries are claimed in batches; a
// trace per attempt stays bounded, and sampling is decided per attempt
// instead of by the publishing request. Options.ChildOfPublish makes it a
// child instead, for one trace from the request to every handler. Either
// way a delivery without the headers (published without Publish, or by a
// propagator that wrote nothing) gets a span with no link, and baggage
// the propagator carried is put into the handler's context.
//
// # Cost
//
// Per handler call the middleware makes one span and two recordings by
// the SDK, relaybus.handler.lag and relaybus.handler.duration (a failure
// adds relaybus.handler.failures). relaybus.handler.calls,
// relaybus.handler.active and relaybus.delivery.finished are counts the
// package keeps per handler and event type with atomic adds (one at each
// end of a call, one per finish) and the meter reads at each collection,
// with the values synchronous counters would have: they are observable
// instruments, which matters only to a View that selects instruments by
// kind (InstrumentKindObservableCounter,
// InstrumentKindObservableUpDownCounter). The attribute sets of the
// metrics and each handler's span name and fixed attributes are built
// once; a span's link and start options, and the attributes of a span
// that records, are assembled in a buffer from a pool of its handler's,
// whose fixed parts are written once, so that a call writes only its
// own attributes (and the link) and clears them after the start. Only
// the five sampling-relevant attributes are given at the start: a span
// that is not sampled costs the tracer one copy of those five and
// nothing for the other six. WrapStore adds a clock read and two recordings per
// claim, one or two per renewal and one per publish call, with attribute
// sets built once, and nothing to the other calls.
//
// Measured with the benchmarks of this package (SDK meter provider with
// a manual reader, a span processor that drops the spans), ten
// interleaved runs on a shared 2-core machine, medians:
//
//	for i in $(seq 10); do go test ./relaybus/otel -run '^$' -bench 'Bus|Store|Middleware' -benchtime 100000x -count 1; done
//
// BenchmarkMiddleware, one call of a handler that does nothing on a
// delivery with a traceparent: 4 allocations (224 B) with the no-op
// providers, 8 (1.7 KB) with every span sampled, 6 (0.4 KB) with the
// sampler suggested below and 3 (0.2 KB) with it on a delivery without
// headers (3, 8, 6 and 3 allocations, 0.2, 2.4, 1.2 and 0.9 KB, when
// every attribute was given at the start). BenchmarkBus, one delivery
// through a Bus on the memory store, the process's CPU time per delivery
// against off (15 allocations, 1.2 KB), as the median of the ratios of
// each run: 2.19x with every span sampled (31 allocations, 4.2 KB; 1.78x
// against headers, off with a traceparent in each event: 17
// allocations, 1.6 KB), 1.43x with the suggested sampler (24, 2.0 KB;
// 1.19x against headers) and 1.17x with it and no headers (19, 1.5 KB),
// which is what a publisher that does not use Publish gets (2.38x,
// 1.68x and 1.32x in the same runs with every attribute given at the
// start). The spread between runs is wide (0.95x to 1.35x for the
// last), and the memory store's dispatch is cheap, its heap large (every
// event of the run), so that each allocation costs more garbage
// collection than on a store that does real work per delivery, such as
// PostgreSQL; the harness measures that. BenchmarkStore, a claim and a
// completion through WrapStore: 19 allocations, as many as without it.
//
// What is left is the SDK's: the tracer's Start (the IDs, the sampler,
// the span and its context), the two histogram recordings (the
// attribute set's deduplication, the exemplar filter, the bucket's
// atomic adds) and the clock. With every span sampled the SDK also
// copies the attributes into the span and at its end snapshots it for
// the span processors. A span without a link costs this package no
// allocation, and only the span of no trace put over the dispatcher's
// context (one), which spares the tracer and the sampler their walks
// through the dispatcher's context.
//
// Sampling every attempt is what the larger figures cost. In production,
// sample a share of the attempts: as the tracer provider's sampler,
//
//	sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0.01))
//
// samples one handler span in a hundred (each the root of a trace of its
// own), or, with Options.ChildOfPublish, follows the publisher's
// decision. An attempt that is not sampled still extracts the headers
// and hands the tracer its link (and with Options.SamplerAttributes the
// five sampling-relevant attributes), for the sampler to see.
package otel
