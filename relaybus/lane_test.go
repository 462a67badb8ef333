package relaybus

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

// The first three hashes are the published FNV-1a 32-bit test vectors
// (the FNV reference's test suite), so the function is checked against
// values that were not computed by it. The rest pin lanes of typical keys:
// a stored lane number must never change meaning.
func TestLaneOfGolden(t *testing.T) {
	cases := []struct {
		key, eventID string
		lane         int
	}{
		{"", "", 0x811c9dc5 % LaneCount},
		{"a", "ignored", 0xe40c292c % LaneCount},
		{"foobar", "ignored", 0xbf9cf968 % LaneCount},
		{"", "a", 0xe40c292c % LaneCount}, // unkeyed: the event ID
		{"customer-42", "x", 190},
		{"k0", "x", 46},
		{"k1", "x", 193},
		{"k3", "x", 155},
		{"", "order-1", 109},
	}
	for _, c := range cases {
		if got := LaneOf(c.key, c.eventID); got != c.lane {
			t.Errorf("LaneOf(%q, %q) = %d, want %d", c.key, c.eventID, got, c.lane)
		}
	}
}

func TestLaneTokenRoundTrip(t *testing.T) {
	for _, tok := range []LaneToken{{0, 0, 0}, {255, 1, 2}, {17, 1 << 62, 9_223_372_036_854_775_807}} {
		got, err := ParseLaneToken(tok.String())
		if err != nil || got != tok {
			t.Errorf("ParseLaneToken(%q) = %+v, %v; want %+v", tok.String(), got, err, tok)
		}
	}
}

func TestParseLaneTokenRejects(t *testing.T) {
	for _, s := range []string{
		"", "1", "1:2", "1:2:3:4", "256:0:0", "-1:0:0", "1:-2:3", "01:2:3", "1:02:3",
		"1: 2:3", "+1:2:3", "a:b:c", "1:2:9223372036854775808", "1:2:", ":2:3",
		"0123456789abcdef0123456789abcdef-17", // a 0.1.0 token
	} {
		if _, err := ParseLaneToken(s); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseLaneToken(%q): err = %v, want ErrInvalid", s, err)
		}
	}
}

func TestParseDecimal(t *testing.T) {
	good := map[string]int64{"0": 0, "7": 7, "1234567890": 1234567890, "9223372036854775807": 9223372036854775807}
	for s, want := range good {
		if v, ok := ParseDecimal(s); !ok || v != want {
			t.Errorf("ParseDecimal(%q) = %d, %v", s, v, ok)
		}
	}
	for _, s := range []string{"", "00", "01", "-1", "+1", " 1", "1 ", "1e3", "9223372036854775808", "99999999999999999999"} {
		if v, ok := ParseDecimal(s); ok {
			t.Errorf("ParseDecimal(%q) = %d, true; want false", s, v)
		}
	}
}

func FuzzParseLaneToken(f *testing.F) {
	for _, s := range []string{"0:0:0", "255:1:2", "256:0:0", "01:2:3", "1:2", "a:b:c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tok, err := ParseLaneToken(s)
		if err != nil {
			return
		}
		if tok.String() != s {
			t.Fatalf("ParseLaneToken(%q) accepted a non-canonical spelling (canonical %q)", s, tok.String())
		}
		if tok.Lane < 0 || tok.Lane >= LaneCount || tok.Epoch < 0 || tok.Claims < 0 {
			t.Fatalf("ParseLaneToken(%q) = %+v out of range", s, tok)
		}
	})
}

func TestParseDecimalLease(t *testing.T) {
	got, err := ParseDecimalLease(Lease{DeliveryID: "42", Token: "7:3:1"})
	if err != nil || got != (DecimalLease{ID: 42, Token: LaneToken{Lane: 7, Epoch: 3, Claims: 1}}) {
		t.Fatalf("ParseDecimalLease(42, 7:3:1) = %+v, %v", got, err)
	}
	for _, l := range []Lease{
		{DeliveryID: "0", Token: "7:3:1"},   // IDs start at 1
		{DeliveryID: "042", Token: "7:3:1"}, // not canonical
		{DeliveryID: "-1", Token: "7:3:1"},
		{DeliveryID: "x", Token: "7:3:1"},
		{DeliveryID: "42", Token: "7:3"},     // a token of another form
		{DeliveryID: "42", Token: "256:3:1"}, // no such lane
	} {
		if _, err := ParseDecimalLease(l); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseDecimalLease(%+v): %v, want ErrInvalid", l, err)
		}
	}
	if ls, err := ParseDecimalLeases([]Lease{{DeliveryID: "1", Token: "0:1:0"}, {DeliveryID: "2", Token: "bad"}}); err == nil || ls != nil {
		t.Errorf("one bad lease of two: %v, %v", ls, err)
	}
}

func TestDecimalListCursor(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{{"", 0, true}, {"1", 1, true}, {"9000", 9000, true}, {"0", 0, false}, {"-1", 0, false}, {"007", 0, false}, {"x", 0, false}} {
		got, err := DecimalListCursor("relaybus/test", tc.in)
		if tc.ok {
			require.NoError(t, err, tc.in)
			require.Equal(t, tc.want, got, tc.in)
			continue
		}
		require.ErrorIs(t, err, ErrInvalid, tc.in)
		require.ErrorContains(t, err, `relaybus/test: list: cursor "`+tc.in+`" is not one this store returned`)
	}
}
