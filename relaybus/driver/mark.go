package driver

import (
	"time"

	"github.com/berkcansavur/relaybus/relaybus/internal/mark"
)

// The validate-once mark. A Bus validates the params it builds once,
// where they enter (Publish and PublishTx validate the events, Start the
// owner and handler names), through package relaybus/internal/mark, which
// only this module can import; the store's Validate then skips what the
// mark covers.
//
// What it protects: the mark is not a flag but a note of what was
// validated (the events slice, by its first element's address and its
// length, and Now; for a claim, the owner and the handlers slice). A copy
// of marked params keeps the mark only while it holds those same values:
// a copy given other events, another Now, another owner or other
// handlers is validated in full, so the mark never vouches for contents
// it did not see. A store with a lower payload limit than the Bus's
// checks the payloads again.
//
// What it does not: an edit made in place, through memory the params
// share with what was validated (an event changed, an element of the
// events or handlers slice overwritten), keeps the mark. Whoever holds
// params a Bus built (the store it calls, a decorator such as
// otel.WrapStore) is trusted not to edit them; checking the contents
// again would be the work the mark saves.

func init() {
	mark.Publish = func(params any, maxPayloadBytes int, limit string) error {
		p := params.(*EventPublishParams)
		if maxPayloadBytes <= 0 {
			maxPayloadBytes = DefaultMaxPayloadBytes
		}
		p.validated = publishMark{}
		if err := p.validate(maxPayloadBytes, limit); err != nil {
			return err
		}
		p.validated = publishMark{first: &p.Events[0], n: len(p.Events), now: p.Now, payloadBytes: maxPayloadBytes}
		return nil
	}
	mark.ClaimNames = func(params any) error {
		p := params.(*DeliveryClaimParams)
		p.namesValidated = namesMark{}
		if err := p.validateNames(); err != nil {
			return err
		}
		p.namesValidated = namesMark{owner: p.Owner, first: &p.Handlers[0], n: len(p.Handlers)}
		return nil
	}
}

// publishMark notes that all of some EventPublishParams were validated
// against a payload limit of payloadBytes. The zero value (n 0) marks
// nothing: valid params have at least one event.
type publishMark struct {
	first        **EventPublish // &Events[0]
	n            int            // len(Events)
	now          time.Time
	payloadBytes int
}

// holds reports whether m covers p's events and time, against a payload
// limit of maxPayloadBytes (no lower than the one m was checked against).
func (m publishMark) holds(p *EventPublishParams, maxPayloadBytes int) bool {
	return m.n > 0 && len(p.Events) == m.n && &p.Events[0] == m.first &&
		p.Now.Equal(m.now) && m.payloadBytes <= maxPayloadBytes
}

// namesMark notes that the owner and the handler names of some
// DeliveryClaimParams were validated. The zero value (n 0) marks nothing:
// valid params have at least one handler.
type namesMark struct {
	owner string
	first *string // &Handlers[0]
	n     int     // len(Handlers)
}

// holds reports whether m covers p's owner and handlers.
func (m namesMark) holds(p *DeliveryClaimParams) bool {
	return m.n > 0 && p.Owner == m.owner && len(p.Handlers) == m.n && &p.Handlers[0] == m.first
}
