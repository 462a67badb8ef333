package relaybus

import (
	"errors"

	"github.com/berkcansavur/relaybus/relaybus/internal/check"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

// Sentinel errors: test for them with errors.Is. Every store returns the
// same ones (they are relaytype's, which stores map their database errors
// onto), so a check does not depend on the store.
var (
	// ErrNotFound: the delivery or event named does not exist (Requeue).
	ErrNotFound = relaytype.ErrNotFound
	// ErrInvalid: input failed validation (New, Handle, Publish, a list's
	// params, ...). Errors wrapping it say which field and why; nothing
	// was written.
	ErrInvalid = relaytype.ErrInvalid
	// ErrClosed: the bus has shut down (Publish and Start after it), or
	// the store's connection is closed.
	ErrClosed = relaytype.ErrClosed
	// ErrNotDead: Requeue was asked to requeue a delivery that is not a
	// dead letter.
	ErrNotDead = relaytype.ErrNotDead
	// ErrAlreadyRunning: Start or Run was called on a bus that runs.
	ErrAlreadyRunning = errors.New("relaybus: dispatcher already running")
)

// invalidf returns an error wrapping ErrInvalid whose text starts with
// "relaybus: ", worded as the stores' Validate methods word theirs.
func invalidf(format string, args ...any) error { return check.Invalidf(format, args...) }
