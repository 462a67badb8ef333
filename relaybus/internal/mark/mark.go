// Package mark lets package relaybus mark the params it validated before
// it hands them to a store, so that the store's Validate does not do the
// work again, while no code outside this module can set a mark.
//
// The mark is an unexported field of the params of relaybus/driver: only
// driver reads or writes it. Driver's init sets the functions below; the
// Bus, which builds the params, calls them. Go lets only packages under
// relaybus/ import this one, so a store, a user or a test of another
// module cannot mark params: what they build is validated in full.
//
// The functions take any because driver imports this package to set
// them, so this package cannot name driver's types. Package relaybus
// calls them through typed wrappers; params of any other type are a bug
// of this module, and panic.
package mark

var (
	// Publish validates params (a *driver.EventPublishParams) in full
	// against a payload limit of maxPayloadBytes, which the error of a
	// payload over it names as limit, and marks params validated when
	// they are valid.
	Publish func(params any, maxPayloadBytes int, limit string) error
	// ClaimNames validates the owner and handler names of params (a
	// *driver.DeliveryClaimParams), and marks them validated when they
	// are valid.
	ClaimNames func(params any) error
)
