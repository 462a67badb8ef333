package driver

import (
	"errors"
	"testing"

	"github.com/berkcansavur/relaybus/relaybus/relaytype"
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
		if _, err := ParseLaneToken(s); !errors.Is(err, relaytype.ErrInvalid) {
			t.Errorf("ParseLaneToken(%q): err = %v, want ErrInvalid", s, err)
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

// BenchmarkLaneToken: a token is made for every claimed delivery and
// parsed for every completion. Before 2026-12-07 String made 4
// allocations (40 B) and Parse 1 (its slice of parts, 48 B); now String
// makes one, the string, and Parse none.
func BenchmarkLaneToken(b *testing.B) {
	tok := LaneToken{Lane: 201, Epoch: 1_234_567, Claims: 89_012}
	s := tok.String()
	b.Run("String", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			s = tok.String()
		}
	})
	b.Run("Parse", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := ParseLaneToken(s); err != nil {
				b.Fatal(err)
			}
		}
	})
}
