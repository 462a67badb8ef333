package relaybus

import "github.com/berkcansavur/relaybus/relaybus/relaytype"

// Event is what a service publishes (Publish, PublishTx): its Type selects
// the handlers, each of which gets one Delivery of it; its Key orders
// them; its ID, generated when empty, makes a republish idempotent. The
// fields are documented on relaytype.Event, which this names: the store
// keeps the same row.
type Event = relaytype.Event
