package relaybus

import (
	"time"

	"github.com/berkcansavur/relaybus/relaybus/driver"
)

// Every limit of package relaybus stands in this file, with its unit and
// the reason for its value. A value out of range is refused where it
// enters (New, Handle, Declare, Publish, PublishTx) with an ErrInvalid
// error that names the field and the range; nothing is written and
// nothing panics. A limit is a guard against a typo or a runaway caller
// (5h for 5ms, a million for a thousand), not a performance target: each
// is well beyond what a sane configuration uses, and still small enough
// that the memory and the statement it bounds stay reasonable.

// Limits the Bus shares with every store. What a Bus hands a store is
// held to what the store enforces, so these are the store's limits
// (relaybus/driver/limits.go gives each one's unit and reason), named
// here for the fields of Config, HandlerOptions, Event and
// DeliveryListParams they bound. A store whose database holds less
// states a lower bound of its own: relaybus/mongo keeps a payload under a
// 16 MiB BSON document (its MaxPayloadBytesLimit).
const (
	// MaxBatchMaxSize bounds BatchOptions.MaxSize, in deliveries: the
	// most of one key a claim returns as one run (driver.MaxKeyRun), and
	// a batch's completions are one DeliveryCompleteMany call.
	MaxBatchMaxSize = driver.MaxKeyRun
	// DefaultBatchMaxSize is BatchOptions.MaxSize when it is 0.
	DefaultBatchMaxSize = 100
	// MaxBatchMaxCalls bounds BatchOptions.MaxCalls, in calls (a run is
	// at most MaxBatchMaxSize deliveries whatever it is).
	MaxBatchMaxCalls = driver.MaxKeyRun
	// DefaultBatchMaxCalls is BatchOptions.MaxCalls when it is 0.
	DefaultBatchMaxCalls = 4
	// MaxBatchMaxWait bounds BatchOptions.MaxWait: a wait to fill a
	// batch, not a schedule (Event.DeliverAt is that).
	MaxBatchMaxWait = time.Minute
	// MaxEventIDBytes bounds Event.ID, in bytes.
	MaxEventIDBytes = driver.MaxEventIDBytes
	// MaxEventTypeBytes bounds Event.Type and a handler's event type, in
	// bytes.
	MaxEventTypeBytes = driver.MaxEventTypeBytes
	// MaxKeyBytes bounds Event.Key, in bytes.
	MaxKeyBytes = driver.MaxKeyBytes
	// MaxHandlerNameBytes bounds handler names and Config.Owner, in bytes.
	MaxHandlerNameBytes = driver.MaxHandlerNameBytes
	// MaxHeaders bounds the entries of Event.Headers.
	MaxHeaders = driver.MaxHeaders
	// MaxHeaderBytes bounds each header name and each header value, in
	// bytes.
	MaxHeaderBytes = driver.MaxHeaderBytes
	// MaxEventsPerPublish bounds the events of one Publish or PublishTx
	// call (one transaction).
	MaxEventsPerPublish = driver.MaxEventsPerPublish
	// MaxHandlersPerEvent bounds the handlers of one event type, and so
	// the deliveries one event gets.
	MaxHandlersPerEvent = driver.MaxHandlersPerEvent
	// MaxDeliverDelay bounds Event.DeliverAt: at most this long after the
	// publish.
	MaxDeliverDelay = driver.MaxDeliverDelay
	// MaxPayloadBytesLimit bounds Config.MaxPayloadBytes (and every
	// store's payload option), in bytes: a claim holds the payloads of its
	// batch in memory.
	MaxPayloadBytesLimit = driver.MaxPayloadBytesLimit
	// MaxClaimLimit bounds Config.BatchSize: deliveries (with their
	// payloads) returned by one claim.
	MaxClaimLimit = driver.MaxClaimLimit
	// MaxLeasesPerCall bounds Config.CompletionBatchMax: the leases of one
	// completion (and of one renewal) are one statement's parameter.
	MaxLeasesPerCall = driver.MaxLeasesPerCall
	// MaxLeaseDuration bounds Config.LeaseDuration: the work of a crashed
	// process waits out its lease before another takes it over.
	MaxLeaseDuration = driver.MaxLeaseDuration
	// MaxAttemptsLimit bounds every attempt budget (Config.MaxAttempts,
	// HandlerOptions.MaxAttempts).
	MaxAttemptsLimit = driver.MaxAttemptsLimit
	// MaxListLimit bounds DeliveryListParams.Limit: one admin page.
	MaxListLimit = driver.MaxListLimit
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
	// MaxCompletionBatchWindow bounds Config.CompletionBatchWindow: each
	// success may wait that long for its completion, holding its lease
	// and, for a keyed delivery, its key's next delivery.
	MaxCompletionBatchWindow = time.Second
	// MaxPublishGroupWait bounds Config.PublishGroupWait: a Publish call
	// may wait that long for the group commit in flight before its own
	// is sent, on the caller's request path.
	MaxPublishGroupWait = time.Second
	// MaxRetryDelay bounds Config.RetryBaseDelay and Config.RetryMaxDelay:
	// past a month a retry is a dead letter in all but name.
	MaxRetryDelay = 30 * 24 * time.Hour
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

// Limits on StoreHealthWatch, checked by WatchStoreHealth.
const (
	// MinHealthInterval and MaxHealthInterval bound
	// StoreHealthWatch.Interval (and HealthThresholds.VacuumAgeMax from
	// below). A reading is a statement on the statistics views, cheap but
	// not free: more than one a second is a busy loop, and the database's
	// statistics move no faster (a server process reports its counts at
	// most once a second). Past a day a watch warns too late to matter.
	MinHealthInterval = time.Second
	MaxHealthInterval = 24 * time.Hour
)

// Limits on WorkParams, checked by Work.
const (
	// DefaultWorkLimit is WorkParams.Limit when zero: deliveries run by
	// one Work call. A test's backlog is far smaller; a handler that
	// publishes an event it handles itself would otherwise never let
	// Work return.
	DefaultWorkLimit = 1_000
	// MaxWorkLimit bounds WorkParams.Limit: a script that drains a
	// backlog calls Work again rather than hold one call for hours.
	MaxWorkLimit = 1_000_000
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
