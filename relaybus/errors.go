package relaybus

import (
	"errors"
	"fmt"
)

// Sentinel errors. Stores map their driver errors onto these (see each
// store's errorFrom) so callers can use errors.Is whatever the store.
var (
	// ErrNotFound: the delivery or event named does not exist.
	ErrNotFound = errors.New("relaybus: not found")
	// ErrInvalid: input failed validation. Errors wrapping it say which
	// field and why; nothing was written.
	ErrInvalid = errors.New("relaybus: invalid input")
	// ErrClosed: the bus or component has been stopped.
	ErrClosed = errors.New("relaybus: closed")
	// ErrNotDead: Requeue was asked to requeue a delivery that is not a
	// dead letter.
	ErrNotDead = errors.New("relaybus: delivery is not dead")
	// ErrAlreadyRunning: Start or Run was called on a bus that runs.
	ErrAlreadyRunning = errors.New("relaybus: dispatcher already running")
)

// invalidf returns an error wrapping ErrInvalid.
func invalidf(format string, args ...any) error {
	return fmt.Errorf("relaybus: "+format+": %w", append(args, ErrInvalid)...)
}

// Invalidf is invalidf for stores: it returns an error that wraps
// ErrInvalid and whose text starts with "relaybus: ".
func Invalidf(format string, args ...any) error { return invalidf(format, args...) }
