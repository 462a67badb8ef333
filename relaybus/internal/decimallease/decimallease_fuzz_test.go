package decimallease

import (
	"errors"
	"strconv"
	"testing"

	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/internal/decimal"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

// FuzzParseDecimalLease fuzzes the lease parser of the stores with
// decimal delivery IDs (PostgreSQL, memory), and decimal.Parse under it:
//
//   - decimal.Parse accepts exactly the strings strconv.FormatInt writes
//     for a non-negative int64;
//   - Parse accepts a lease exactly when decimal.ParseID accepts its ID
//     and driver.ParseLaneToken its token, refuses with an ErrInvalid
//     error otherwise, and what it accepts formats back to the same ID
//     and token;
//   - every token a store can issue (lane below LaneCount, non-negative
//     epoch and claims) parses back from its String to itself.
//
// driver's FuzzParseLaneToken fuzzes the token on its own; the seed
// corpus of each is under its package's testdata/fuzz.
func FuzzParseDecimalLease(f *testing.F) {
	f.Add("42", "7:3:1", uint8(7), int64(3), int64(1))
	f.Add("1", "0:1:0", uint8(0), int64(0), int64(0))
	f.Add("9223372036854775807", "255:9223372036854775807:9223372036854775807", uint8(255), int64(9223372036854775807), int64(-1))
	f.Add("0", "256:0:0", uint8(1), int64(-9223372036854775808), int64(5))
	f.Add("042", "7:3", uint8(2), int64(1), int64(2))
	f.Add("-1", "+1:2:3", uint8(3), int64(10), int64(20))
	f.Add("9223372036854775808", "1:2:3:4", uint8(4), int64(7), int64(7))
	f.Add("١", "1:٢:3", uint8(5), int64(8), int64(8))
	f.Fuzz(func(t *testing.T, id, tok string, lane uint8, epoch, claims int64) {
		v, ok := decimal.Parse(id)
		n, err := strconv.ParseInt(id, 10, 64)
		canonical := err == nil && n >= 0 && strconv.FormatInt(n, 10) == id
		if ok != canonical || (ok && v != n) {
			t.Fatalf("decimal.Parse(%q) = %d, %v; canonical: %v", id, v, ok, canonical)
		}

		l, err := Parse(relaytype.Lease{DeliveryID: id, Token: tok})
		_, idOK := decimal.ParseID(id)
		_, tokErr := driver.ParseLaneToken(tok)
		if (err == nil) != (idOK && tokErr == nil) {
			t.Fatalf("Parse(%q, %q): %v; decimal.ParseID ok %v, driver.ParseLaneToken %v", id, tok, err, idOK, tokErr)
		}
		if err != nil {
			if !errors.Is(err, relaytype.ErrInvalid) {
				t.Fatalf("Parse(%q, %q): %v, not ErrInvalid", id, tok, err)
			}
		} else if l.ID <= 0 || strconv.FormatInt(l.ID, 10) != id || l.Token.String() != tok {
			t.Fatalf("Parse(%q, %q) = %+v: not the lease it was given", id, tok, l)
		}

		// An issued token: fold the fuzzed numbers into its range.
		if epoch < 0 {
			epoch = -(epoch + 1)
		}
		if claims < 0 {
			claims = -(claims + 1)
		}
		issued := driver.LaneToken{Lane: int(lane), Epoch: epoch, Claims: claims}
		back, err := driver.ParseLaneToken(issued.String())
		if err != nil || back != issued {
			t.Fatalf("driver.ParseLaneToken(%q) = %+v, %v; want %+v", issued.String(), back, err, issued)
		}
	})
}
