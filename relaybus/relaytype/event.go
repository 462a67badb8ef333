package relaytype

import "time"

// Event is what a service publishes. Every handler registered for its
// Type gets one Delivery of it.
type Event struct {
	// ID is the idempotency key: publishing an event whose ID exists adds
	// no delivery for a handler that already has one, or had one that
	// completed. The guard lasts as long as the event is kept: a Bus's
	// PurgeExpired purges events by Retention.Completed only (never with
	// Completed 0), and a republish after that is a new event. Empty means
	// the bus generates one (a UUIDv7) and writes it back into the event.
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
	// DeliverAt delays the event: its deliveries are not claimed before
	// it (they are stored with it as their AvailableAt). Zero, or a time
	// not after the publish, means at once; at most a year and a day
	// after the publish (driver.MaxDeliverDelay). A keyed event keeps its place in its key's order: its
	// key's later events (of each handler) wait for it, delayed or not,
	// as they wait for a delivery being retried. It applies to the
	// deliveries this publish inserts; a republished event keeps the due
	// times of the deliveries it has.
	DeliverAt time.Time
}
