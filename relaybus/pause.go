package relaybus

import (
	"context"
	"fmt"

	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

// PausedHandler is a handler paused in the store (relaytype.PausedHandler).
type PausedHandler = relaytype.PausedHandler

// PauseHandler pauses the handler named, in the store, for every process:
// from its next reading of the paused handlers (once per PollInterval)
// no dispatcher claims the handler's deliveries. They stay pending, with
// their attempts unspent, and are claimed again in order once
// ResumeHandler resumes it; what a dispatcher was running when it read
// the pause finishes as usual. The other handlers are not touched, in the
// same lanes and keys included: each handler has its own per-key order.
// reason (at most driver.MaxPauseReasonBytes, may be empty) is recorded
// for PausedHandlers and the admin command. Pausing a paused handler
// changes nothing. The handler need not be registered on this bus; its
// name must be valid.
//
// Only dispatchers of version 0.3.0 or later know pauses: a 0.2
// dispatcher on the same tables goes on claiming.
func (b *Bus[TTx]) PauseHandler(ctx context.Context, handler, reason string) error {
	p := &driver.HandlerPauseParams{Handler: handler, Reason: reason, Now: b.cfg.Now()}
	if err := b.store.HandlerPause(ctx, p); err != nil {
		return fmt.Errorf("relaybus: pause handler %q: %w", handler, err)
	}
	return nil
}

// ResumeHandler resumes a paused handler; the dispatchers claim its
// deliveries again from their next reading of the paused handlers
// (within a PollInterval). It reports whether the handler was paused.
func (b *Bus[TTx]) ResumeHandler(ctx context.Context, handler string) (bool, error) {
	ok, err := b.store.HandlerResume(ctx, &driver.HandlerResumeParams{Handler: handler})
	if err != nil {
		return false, fmt.Errorf("relaybus: resume handler %q: %w", handler, err)
	}
	return ok, nil
}

// PausedHandlers lists the handlers paused in the store, in name order.
func (b *Bus[TTx]) PausedHandlers(ctx context.Context) ([]PausedHandler, error) {
	ps, err := b.store.HandlersPaused(ctx, &driver.HandlersPausedParams{})
	if err != nil {
		return nil, fmt.Errorf("relaybus: paused handlers: %w", err)
	}
	return ps, nil
}
