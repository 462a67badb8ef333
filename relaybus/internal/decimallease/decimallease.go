// Package decimallease reads the leases of a lane-lease store whose
// delivery IDs are positive decimal integers (relaybus/postgres and
// relaybus/memory): a decimal ID and a driver.LaneToken.
package decimallease

import (
	"fmt"

	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/internal/decimal"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

// Lease is a parsed relaytype.Lease of such a store.
type Lease struct {
	ID    int64
	Token driver.LaneToken
}

// Parse reads a lease such a store handed out. A delivery ID or token of
// another form was never issued by it (a caller's bug, a lease of another
// store): the error wraps ErrInvalid, and the caller writes nothing. A
// well-formed lease that is merely stale is not an error: its write
// reports false. The caller prefixes its package and operation.
func Parse(l relaytype.Lease) (Lease, error) {
	id, ok := decimal.ParseID(l.DeliveryID)
	if !ok {
		return Lease{}, fmt.Errorf("delivery id %q is not one of this store's: %w", l.DeliveryID, relaytype.ErrInvalid)
	}
	tok, err := driver.ParseLaneToken(l.Token)
	if err != nil {
		return Lease{}, fmt.Errorf("delivery %d: %w", id, err)
	}
	return Lease{ID: id, Token: tok}, nil
}

// ParseAll parses every lease of a call (Parse), so that a call with one
// bad lease writes nothing.
func ParseAll(ls []relaytype.Lease) ([]Lease, error) {
	out := make([]Lease, len(ls))
	for i, l := range ls {
		var err error
		if out[i], err = Parse(l); err != nil {
			return nil, err
		}
	}
	return out, nil
}
