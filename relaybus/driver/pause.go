package driver

import (
	"time"

	"github.com/berkcansavur/relaybus/relaybus/internal/check"
)

// MaxPauseReasonBytes bounds the reason a pause records: a line for an
// operator (a ticket, a name), not a document.
const MaxPauseReasonBytes = 1024

// HandlerPauseParams are the arguments of HandlerPause.
type HandlerPauseParams struct {
	// Handler is the handler to pause: any valid name, registered in
	// this process or not (the admin command pauses handlers it does
	// not run).
	Handler string
	// Reason is recorded with the pause; at most MaxPauseReasonBytes of
	// text.
	Reason string
	// Now stamps the pause.
	Now time.Time
}

// Validate checks p.
func (p *HandlerPauseParams) Validate() error {
	if p == nil {
		return invalidf("handler pause params are nil")
	}
	if err := ValidateName("pause: handler", p.Handler); err != nil {
		return err
	}
	if p.Reason != "" {
		if err := check.Text("pause: reason", p.Reason, MaxPauseReasonBytes); err != nil {
			return err
		}
	}
	if p.Now.IsZero() {
		return invalidf("pause: now is zero")
	}
	return nil
}

// HandlerResumeParams are the arguments of HandlerResume.
type HandlerResumeParams struct {
	Handler string
}

// Validate checks p.
func (p *HandlerResumeParams) Validate() error {
	if p == nil {
		return invalidf("handler resume params are nil")
	}
	return ValidateName("resume: handler", p.Handler)
}

// HandlersPausedParams are the arguments of HandlersPaused. It has no
// fields yet; the struct keeps new ones from breaking the interface.
type HandlersPausedParams struct{}

// Validate checks p.
func (p *HandlersPausedParams) Validate() error {
	if p == nil {
		return invalidf("handlers paused params are nil")
	}
	return nil
}
