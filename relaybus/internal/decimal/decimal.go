// Package decimal reads the canonical decimal numbers of the stores whose
// delivery IDs and lease tokens are decimal integers (relaybus/postgres
// and relaybus/memory; relaybus/driver's lane tokens too), so that one
// value has one spelling and an ID or token the store did not produce is
// recognised.
package decimal

import (
	"fmt"
	"strconv"

	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

// Parse parses a canonical non-negative decimal int64: digits only, no
// sign, no leading zero (except "0" itself), no spaces.
func Parse(s string) (int64, bool) {
	if s == "" || len(s) > 19 || (len(s) > 1 && s[0] == '0') {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, false
	}
	return v, true
}

// ParseID reads a delivery ID of a store whose IDs are positive decimal
// integers: the canonical form only (Parse), above 0.
func ParseID(s string) (int64, bool) {
	id, ok := Parse(s)
	return id, ok && id > 0
}

// ListCursor reads driver.DeliveryListParams.After for a store whose
// cursor is the last delivery ID of the previous page, a positive decimal
// integer: 0 for none, or an ErrInvalid error naming the store (e.g.
// "relaybus/postgres") for a cursor no such store returned.
func ListCursor(store, after string) (int64, error) {
	if after == "" {
		return 0, nil
	}
	id, ok := ParseID(after)
	if !ok {
		return 0, fmt.Errorf("%s: list: cursor %q is not one this store returned (the last ID of a page): %w", store, after, relaytype.ErrInvalid)
	}
	return id, nil
}
