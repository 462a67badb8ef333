package driver

import (
	"strconv"
	"time"

	"github.com/berkcansavur/relaybus/relaybus/internal/check"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

// storePayloadLimit is the payload limit a store's Validate names: the
// store checks a payload against its own option. (A Bus names its
// Config.MaxPayloadBytes when it validates the params it builds.)
const storePayloadLimit = "the store's MaxPayloadBytes option"

// validateEvent checks e against the limits of limits.go and
// maxPayloadBytes; a payload over it is an error that names limit. e.ID
// must be set.
func validateEvent(e *relaytype.Event, maxPayloadBytes int, limit string) error {
	if e == nil {
		return invalidf("event is nil")
	}
	if e.ID == "" {
		return invalidf("event id is empty")
	}
	if err := check.Text("event id", e.ID, MaxEventIDBytes); err != nil {
		return err
	}
	if e.Type == "" {
		return invalidf("event %q: type is empty", e.ID)
	}
	if err := check.Text("event type", e.Type, MaxEventTypeBytes); err != nil {
		return err
	}
	if e.Key != "" {
		if err := check.Text("event key", e.Key, MaxKeyBytes); err != nil {
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
		if err := check.Text("header name", k, MaxHeaderBytes); err != nil {
			return err
		}
		// Values may be empty, but are held to the same text rules as
		// names: PostgreSQL's jsonb cannot store a NUL.
		if err := check.Text("header "+strconv.Quote(k)+" value", v, MaxHeaderBytes); err != nil {
			return err
		}
	}
	return nil
}

// ValidateName checks a handler name, a lease owner or any other
// identifier-like name a store keeps as text: not empty, at most
// MaxHandlerNameBytes, UTF-8 without NUL. what names it in the error.
func ValidateName(what, name string) error {
	if name == "" {
		return invalidf("%s is empty", what)
	}
	return check.Text(what, name, MaxHandlerNameBytes)
}

// AvailableAt is when the deliveries a publish at now inserts for e
// become due: e.DeliverAt when it is after now, else now.
func AvailableAt(e *relaytype.Event, now time.Time) time.Time {
	if e.DeliverAt.After(now) {
		return e.DeliverAt
	}
	return now
}
