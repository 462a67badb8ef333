package relaytype

import "errors"

// Sentinel errors. Stores map their driver errors onto these (see each
// store's errorFrom) so callers can use errors.Is whatever the store.
var (
	// ErrNotFound: the delivery or event named does not exist.
	ErrNotFound = errors.New("relaybus: not found")
	// ErrInvalid: input failed validation. Errors wrapping it say which
	// field and why; nothing was written.
	ErrInvalid = errors.New("relaybus: invalid input")
	// ErrClosed: the bus, the store or its connection has been closed.
	ErrClosed = errors.New("relaybus: closed")
	// ErrNotDead: Requeue was asked to requeue a delivery that is not a
	// dead letter.
	ErrNotDead = errors.New("relaybus: delivery is not dead")
)
