package relaytype

import "time"

// PausedHandler is a handler paused in a store (Bus.PauseHandler): no
// dispatcher of any process claims its deliveries until it is resumed;
// they stay pending, their attempts unspent.
type PausedHandler struct {
	// Handler is the handler's name.
	Handler string
	// Reason is what the pause said about itself ("" if nothing).
	Reason string
	// PausedAt is when it was paused (the pausing call's Now); a second
	// pause of a paused handler keeps the first one's time and reason.
	PausedAt time.Time
}
