package driver

import "time"

// Every limit a store enforces stands in this file, with its unit and the
// reason for its value. The params' Validate methods check them, so a
// value out of range is an ErrInvalid error that names the field and the
// range, in every store alike; nothing is written and nothing panics. A
// limit is a guard against a typo or a runaway caller (5h for 5ms, a
// million for a thousand), not a performance target: each is well beyond
// what a sane configuration uses, and still small enough that the memory
// and the statement it bounds stay reasonable.
//
// A Bus holds what it hands a store to the same limits (package relaybus
// restates those that bound a field of its Config, HandlerOptions or
// Event). A store whose database holds less states its own, lower bound
// and checks it itself: relaybus/mongo keeps a payload under a 16 MiB BSON
// document (its MaxPayloadBytesLimit).

// Limits on events, checked by EventPublishParams.Validate.
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
	// MaxEventsPerPublish bounds the events of one EventPublishTx call.
	// One call is one transaction that keeps the counter of every key it
	// publishes to locked until it commits; larger batches hold publishers
	// of those keys back longer, for no gain in throughput.
	MaxEventsPerPublish = 10_000
	// MaxHandlersPerEvent bounds the deliveries of one event (the handlers
	// of one event type).
	MaxHandlersPerEvent = 1_000
	// MaxDeliverDelay bounds Event.DeliverAt: at most this long after the
	// publish (a year and a day). A keyed event's delay holds its key's
	// later events back, so a DeliverAt decades away is a mistake that
	// would stop a key, not a schedule.
	MaxDeliverDelay = 366 * 24 * time.Hour
	// DefaultMaxPayloadBytes is a store's payload option (and a Bus's
	// Config.MaxPayloadBytes) when unset, and what
	// EventPublishParams.Validate(0) checks: 1 MiB.
	DefaultMaxPayloadBytes = 1 << 20
	// MaxPayloadBytesLimit bounds every store's payload option (and a
	// Bus's Config.MaxPayloadBytes), in bytes. A claim reads the payloads
	// of its whole batch into memory, so a payload bound is a memory
	// bound: 64 MiB times a claim's limit is already more than most
	// processes should hold. A store whose database cannot hold that much
	// states a lower bound of its own (see above).
	MaxPayloadBytesLimit = 64 << 20
)

// Limits on store calls, checked by the params' Validate methods.
const (
	// MaxClaimLimit bounds DeliveryClaimParams.Limit: deliveries (with
	// their payloads) returned by one claim.
	MaxClaimLimit = 10_000
	// MaxKeyRun bounds KeyRun.Max: the deliveries of one key a claim
	// returns as one run (one batch of a batch handler).
	MaxKeyRun = 1_000
	// MaxLeasesPerCall bounds the leases of one LeaseExtend or
	// DeliveryCompleteMany call: they are one array parameter of one
	// statement.
	MaxLeasesPerCall = 10_000
	// MaxLeaseDuration bounds any lease a store is asked for
	// (DeliveryClaimParams.LeaseDuration, LeaseExtendParams.ExpiresAt
	// after Now). The work of a crashed process waits out its lease before
	// another takes it over, so a lease of more than a day is a mistake.
	MaxLeaseDuration = 24 * time.Hour
	// MaxAttemptsLimit bounds every attempt budget
	// (DeliverySpec.MaxAttempts).
	MaxAttemptsLimit = 1_000
	// DefaultListLimit is the page size of DeliveryList when
	// DeliveryListParams.Limit is 0.
	DefaultListLimit = 100
	// MaxListLimit bounds DeliveryListParams.Limit: one admin page.
	MaxListLimit = 1_000
	// MaxErrorBytes: a longer error text is cut to this many bytes (on a
	// UTF-8 boundary, TruncateError) before it is stored with its
	// delivery. The first 4 KiB of an error say what went wrong; the rest
	// would be written again at every failed attempt.
	MaxErrorBytes = 4096
)
