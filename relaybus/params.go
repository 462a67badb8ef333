package relaybus

import (
	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/internal/mark"
)

// Validated once, at the edge: the Bus validates the params it builds for
// a store where they enter (publishParams, at Publish and PublishTx; the
// dispatcher's claim names, at Start) and marks them so, and the store's
// own Validate does not do the work again. The mark lives in package
// driver, which only this module can set (relaybus/internal/mark);
// driver/mark.go says what it covers and what it does not.

// busPayloadLimit is the payload limit the Bus's errors name: it checks a
// payload against Config.MaxPayloadBytes (a store checks it again against
// its own option, unless it allows at least as much).
const busPayloadLimit = "Config.MaxPayloadBytes"

// validatePublish validates p in full against maxPayloadBytes (naming
// Config.MaxPayloadBytes) and marks it validated.
func validatePublish(p *driver.EventPublishParams, maxPayloadBytes int) error {
	return mark.Publish(p, maxPayloadBytes, busPayloadLimit)
}

// validateClaimNames validates the owner and handler names of p and marks
// them validated: copies of p with the same owner and handlers (each
// claim's params) are not checked for them again.
func validateClaimNames(p *driver.DeliveryClaimParams) error {
	return mark.ClaimNames(p)
}
