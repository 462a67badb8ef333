package mongo

import (
	"errors"
	"strings"
	"testing"

	"github.com/berkcansavur/relaybus/relaybus"
	"go.mongodb.org/mongo-driver/v2/bson"
)

func TestLeaseToken(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for range 1000 {
		tok := newLeaseToken()
		if !validLeaseToken(tok) {
			t.Fatalf("newLeaseToken() = %q, which validLeaseToken rejects", tok)
		}
		if seen[tok] {
			t.Fatalf("token %q issued twice", tok)
		}
		seen[tok] = true
	}
	for tok, want := range map[string]bool{
		"":                                    false,
		strings.Repeat("a", 31):               false,
		strings.Repeat("a", 33):               false,
		strings.Repeat("0", 32):               true,
		"0123456789abcdef0123456789abcdef":    true,
		"0123456789ABCDEF0123456789abcdef":    false, // issued lower case only
		"0123456789abcdeg0123456789abcdef":    false,
		"0123456789abcdef0123456789abcde\x00": false,
	} {
		if got := validLeaseToken(tok); got != want {
			t.Errorf("validLeaseToken(%q) = %v, want %v", tok, got, want)
		}
	}
}

func TestParseDeliveryID(t *testing.T) {
	t.Parallel()
	oid := bson.NewObjectID()
	got, ok := parseDeliveryID(oid.Hex())
	if !ok || got != oid {
		t.Fatalf("parseDeliveryID(%q) = %v, %v", oid.Hex(), got, ok)
	}
	for _, bad := range []string{
		"", "1", "42", oid.Hex()[:23], oid.Hex() + "0",
		strings.ToUpper(oid.Hex()), // would give one delivery a second ID
		"zzzzzzzzzzzzzzzzzzzzzzzz",
		" " + oid.Hex()[1:],
	} {
		if _, ok := parseDeliveryID(bad); ok {
			t.Errorf("parseDeliveryID(%q) accepted it", bad)
		}
	}
}

func TestCursor(t *testing.T) {
	t.Parallel()
	oid := bson.NewObjectID()
	got, err := decodeCursor(encodeCursor(oid))
	if err != nil || got != oid {
		t.Fatalf("cursor round trip: %v, %v", got, err)
	}
	_, err = decodeCursor("page-2")
	if !errors.Is(err, relaybus.ErrInvalid) || !strings.HasPrefix(err.Error(), "relaybus/mongo: ") {
		t.Fatalf("decodeCursor(bad) = %v, want a relaybus/mongo ErrInvalid", err)
	}
}

func FuzzParseDeliveryID(f *testing.F) {
	f.Add(bson.NewObjectID().Hex())
	f.Add("")
	f.Add("42")
	f.Add("ABCDEFABCDEFABCDEFABCDEF")
	f.Fuzz(func(t *testing.T, s string) {
		oid, ok := parseDeliveryID(s)
		if ok && oid.Hex() != s {
			t.Fatalf("parseDeliveryID(%q) accepted it, but the ID is %q", s, oid.Hex())
		}
		_, err := decodeCursor(s)
		if (err == nil) != ok {
			t.Fatalf("decodeCursor and parseDeliveryID disagree on %q", s)
		}
	})
}

func FuzzValidLeaseToken(f *testing.F) {
	f.Add(newLeaseToken())
	f.Add("")
	f.Add(strings.Repeat("G", 32))
	f.Fuzz(func(t *testing.T, s string) {
		if validLeaseToken(s) {
			if len(s) != 2*leaseTokenBytes || strings.ToLower(s) != s || strings.Trim(s, "0123456789abcdef") != "" {
				t.Fatalf("validLeaseToken(%q) accepted a token newLeaseToken cannot issue", s)
			}
		}
	})
}
