package relaybus

import "time"

// Every limit of package relaybus stands in this file, with its unit and
// the reason for its value. A value out of range is refused where it
// enters (New, Handle, Publish, a store call's Validate) with an ErrInvalid
// error that names the field and the range; nothing is written and nothing
// panics. A limit is a guard against a typo or a runaway caller (5h for
// 5ms, a million for a thousand), not a performance target: each is well
// beyond what a sane configuration uses, and still small enough that the
// memory and the statement it bounds stay reasonable.
//
// Stores share these limits (they call the params' Validate methods). A
// store whose database holds less states its own, lower bound and checks
// it itself: relaybus/mongo keeps a payload under a 16 MiB BSON document
// (its MaxPayloadBytesLimit).

// Limits on events, checked by Publish and PublishTx (and by a store's
// EventPublishParams.Validate when it is called directly).
const (
	// MaxEventIDBytes bounds Event.ID, in bytes. The ID is indexed with
	// the handler name (the (event, handler) unique key): two 255-byte
	// strings stay far below PostgreSQL's B-tree entry limit (about a
	// third of an 8 KiB page), and any UUID, ULID or natural key fits.
	MaxEventIDBytes = 255
	// MaxEventTypeBytes bounds Event.Type and a handler's event type, in
	// bytes: a name, like a handler name.
	MaxEventTypeBytes = 255
	// MaxKeyBytes bounds Event.Key, in bytes. The key is indexed with the
	// handler name and the sequence (the per-key ordering index), so it
	// has the ID's bound.
	MaxKeyBytes = 255
	// MaxHandlerNameBytes bounds handler names and lease owner names, in
	// bytes. A handler name is stored and indexed with every delivery.
	MaxHandlerNameBytes = 255
	// MaxHeaders bounds the entries of Event.Headers. Headers are metadata
	// (trace IDs, a content type), not payload: 64 entries of at most
	// MaxHeaderBytes each keep an event's headers under 512 KiB.
	MaxHeaders = 64
	// MaxHeaderBytes bounds each header name and each header value, in
	// bytes.
	MaxHeaderBytes = 4096
	// MaxEventsPerPublish bounds the events of one Publish or PublishTx
	// call. One call is one transaction that keeps the counter of every
	// key it publishes to locked until it commits; larger batches hold
	// publishers of those keys back longer, for no gain in throughput.
	MaxEventsPerPublish = 10_000
	// MaxHandlersPerEvent bounds the handlers of one event type, and so
	// the deliveries one event gets.
	MaxHandlersPerEvent = 1_000
	// MaxPayloadBytesLimit bounds Config.MaxPayloadBytes (and every
	// store's payload option), in bytes, for every store. A claim reads
	// the payloads of its whole batch into memory, so a payload bound is
	// a memory bound: 64 MiB times a claim's BatchSize is already more
	// than most processes should hold. A store whose database cannot hold
	// that much states a lower bound of its own (see above).
	MaxPayloadBytesLimit = 64 << 20
)

// Limits on Config, checked by New.
const (
	// MaxConcurrency bounds Config.Concurrency: handlers running at once,
	// each on one of as many worker goroutines.
	MaxConcurrency = 10_000
	// MinPollInterval and MaxPollInterval bound Config.PollInterval. Below
	// a millisecond an idle dispatcher is a busy loop against the
	// database; polling is the correctness path (the only thing that
	// finds work published by other processes), so more than an hour
	// between polls is a typo, not a setting.
	MinPollInterval = time.Millisecond
	MaxPollInterval = time.Hour
	// MinLeaseDuration bounds Config.LeaseDuration from below: a lease
	// must outlive the round trips that renew it.
	MinLeaseDuration = 10 * time.Millisecond
	// MaxLeaseDuration bounds Config.LeaseDuration and any lease a store
	// is asked for. The work of a crashed process waits out its lease
	// before another takes it over, so a lease of more than a day is a
	// mistake.
	MaxLeaseDuration = 24 * time.Hour
	// MaxCompletionBatchWindow bounds Config.CompletionBatchWindow: each
	// success may wait that long for its completion, holding its lease
	// and, for a keyed delivery, its key's next delivery.
	MaxCompletionBatchWindow = time.Second
	// MaxRetryDelay bounds Config.RetryBaseDelay and Config.RetryMaxDelay:
	// past a month a retry is a dead letter in all but name.
	MaxRetryDelay = 30 * 24 * time.Hour
	// MaxAttemptsLimit bounds every attempt budget (Config.MaxAttempts,
	// HandlerOptions.MaxAttempts, DeliverySpec.MaxAttempts).
	MaxAttemptsLimit = 1_000
	// MinHandlerTimeout and MaxHandlerTimeout bound HandlerOptions.Timeout.
	// A day is longer than any handler should hold a delivery; its lease
	// is renewed all that time.
	MinHandlerTimeout = time.Millisecond
	MaxHandlerTimeout = 24 * time.Hour
	// MinShutdownTimeout and MaxShutdownTimeout bound
	// Config.ShutdownTimeout: below a millisecond no handler could finish,
	// and past a day the wait is a hang (Disabled says so outright).
	MinShutdownTimeout = time.Millisecond
	MaxShutdownTimeout = 24 * time.Hour
)

// Limits on store calls, checked by the params' Validate methods.
const (
	// MaxClaimLimit bounds DeliveryClaimParams.Limit and Config.BatchSize:
	// deliveries (with their payloads) returned by one claim.
	MaxClaimLimit = 10_000
	// MaxLeasesPerCall bounds the leases of one LeaseExtend or
	// DeliveryCompleteMany call, and Config.CompletionBatchMax: they are
	// one array parameter of one statement.
	MaxLeasesPerCall = 10_000
	// MaxListLimit bounds DeliveryListParams.Limit: one admin page.
	MaxListLimit = 1_000
	// MaxErrorBytes: a longer error text is cut to this many bytes (on a
	// UTF-8 boundary) before it is stored with its delivery. The first
	// 4 KiB of an error say what went wrong; the rest would be written
	// again at every failed attempt.
	MaxErrorBytes = 4096
)

// Bounds of the dispatcher's own loops. They are not settings: each
// follows from the guarantee it serves, written beside it.
const (
	// claimGatherMax bounds how long a claim for few free slots waits for
	// more to free up (see claimLimit): short enough not to matter for
	// slow handlers, long enough for a busy dispatcher to claim in batches.
	claimGatherMax = time.Millisecond
	// maxClaimErrorBackoffFactor bounds the wait after claim errors in a
	// row, as a multiple of the poll interval: a store that is down is not
	// hammered, and one that is back is found within 16 polls.
	maxClaimErrorBackoffFactor = 16
	// writeRetryDelayMin is the wait before the first retry of a final
	// write (complete, reschedule, bury, release); it doubles per retry up
	// to writeRetryDelayMax, spread by ±writeRetryJitter. Retries go on
	// until the lease the write is made under would expire, never past
	// it (see write): the lease is what bounds them.
	writeRetryDelayMin = 20 * time.Millisecond
	// writeRetryDelayMax caps that wait: a database that is back is found
	// within a second.
	writeRetryDelayMax = time.Second
	// writeRetryJitter spreads the retries of writes that failed together
	// (the completions of a batch, the releases of a shutdown), so that
	// they do not all come back at once.
	writeRetryJitter = 0.2
)
