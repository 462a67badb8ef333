// Package check holds the validation primitives that package relaybus
// and package relaybus/driver share, so that the Bus and every store word
// a bad input alike: an error that starts with "relaybus: " and wraps
// relaytype.ErrInvalid.
package check

import (
	"fmt"
	"unicode/utf8"

	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

// Invalidf returns an error wrapping relaytype.ErrInvalid whose text
// starts with "relaybus: ".
func Invalidf(format string, args ...any) error {
	return fmt.Errorf("relaybus: "+format+": %w", append(args, relaytype.ErrInvalid)...)
}

// Text rejects text that is too long, not UTF-8, or holds a NUL
// (PostgreSQL text cannot store NUL). what names the field in the error.
func Text(what, s string, maxBytes int) error {
	if len(s) > maxBytes {
		return Invalidf("%s is %d bytes, over the limit of %d", what, len(s), maxBytes)
	}
	if !utf8.ValidString(s) {
		return Invalidf("%s is not valid UTF-8", what)
	}
	for i := 0; i < len(s); i++ {
		if s[i] == 0 {
			return Invalidf("%s contains a NUL byte", what)
		}
	}
	return nil
}
