package relaybus

import (
	"strconv"
	"time"
	"unicode/utf8"
)

// Event is what a service publishes. Every handler registered for its
// Type gets one Delivery of it.
type Event struct {
	// ID is the idempotency key: publishing an event whose ID exists adds
	// no delivery for a handler that already has one, or had one that
	// completed. The guard lasts as long as the event is kept: PurgeExpired
	// purges events by Retention.Completed only (never with Completed 0),
	// and a republish after that is a new event. Empty means the bus
	// generates one (a UUIDv7) and writes it back into the event.
	ID string
	// Type selects the handlers. Required.
	Type string
	// Key is the ordering key. Deliveries of events with the same non-empty
	// key run per handler in commit order, one at a time. Empty means
	// unordered.
	Key string
	// Payload is opaque to relaybus. It may be nil.
	Payload []byte
	// Headers are opaque to relaybus.
	Headers map[string]string
	// CreatedAt is set by the bus at publish when zero.
	CreatedAt time.Time
}

// ValidateEvent checks e against the limits above and maxPayloadBytes.
// Stores call it again before they write, so an event that reaches a
// store directly is held to the same rules. e.ID must be set. A payload
// over maxPayloadBytes is an error that names the store's limit.
func ValidateEvent(e *Event, maxPayloadBytes int) error {
	return validateEvent(e, maxPayloadBytes, storePayloadLimit)
}

// The payload limits an error can name: the Bus's (checked first, at
// Publish and PublishTx) and the store's (checked again by the store,
// with its own option).
const (
	busPayloadLimit   = "Config.MaxPayloadBytes"
	storePayloadLimit = "the store's MaxPayloadBytes option"
)

// validateEvent is ValidateEvent with the name of the payload limit that
// applies.
func validateEvent(e *Event, maxPayloadBytes int, limit string) error {
	if e == nil {
		return invalidf("event is nil")
	}
	if e.ID == "" {
		return invalidf("event id is empty")
	}
	if err := checkText("event id", e.ID, MaxEventIDBytes); err != nil {
		return err
	}
	if e.Type == "" {
		return invalidf("event %q: type is empty", e.ID)
	}
	if err := checkText("event type", e.Type, MaxEventTypeBytes); err != nil {
		return err
	}
	if e.Key != "" {
		if err := checkText("event key", e.Key, MaxKeyBytes); err != nil {
			return err
		}
	}
	if maxPayloadBytes > 0 && len(e.Payload) > maxPayloadBytes {
		return invalidf("event %q: payload is %d bytes, over the limit of %d (%s)", e.ID, len(e.Payload), maxPayloadBytes, limit)
	}
	if len(e.Headers) > MaxHeaders {
		return invalidf("event %q: %d headers, over the limit of %d", e.ID, len(e.Headers), MaxHeaders)
	}
	for k, v := range e.Headers {
		if k == "" {
			return invalidf("event %q: empty header name", e.ID)
		}
		if err := checkText("header name", k, MaxHeaderBytes); err != nil {
			return err
		}
		// Values may be empty, but are held to the same text rules as
		// names: PostgreSQL's jsonb cannot store a NUL.
		if err := checkText("header "+strconv.Quote(k)+" value", v, MaxHeaderBytes); err != nil {
			return err
		}
	}
	return nil
}

// checkText rejects text that is too long, not UTF-8, or holds a NUL
// (PostgreSQL text cannot store NUL).
func checkText(what, s string, maxBytes int) error {
	if len(s) > maxBytes {
		return invalidf("%s is %d bytes, over the limit of %d", what, len(s), maxBytes)
	}
	if !utf8.ValidString(s) {
		return invalidf("%s is not valid UTF-8", what)
	}
	for i := 0; i < len(s); i++ {
		if s[i] == 0 {
			return invalidf("%s contains a NUL byte", what)
		}
	}
	return nil
}

// ValidateName checks a handler name (or any other identifier-like name a
// store keeps as text).
func ValidateName(what, name string) error {
	if name == "" {
		return invalidf("%s is empty", what)
	}
	return checkText(what, name, MaxHandlerNameBytes)
}
