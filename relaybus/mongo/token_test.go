package mongo

import (
	"errors"
	"strings"
	"testing"

	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
	"go.mongodb.org/mongo-driver/v2/bson"
)

func TestHolderID(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for range 1000 {
		h := newHolderID()
		if len(h) != 2*holderIDBytes || strings.Trim(h, "0123456789abcdef") != "" {
			t.Fatalf("newHolderID() = %q, not %d lower-case hex digits", h, 2*holderIDBytes)
		}
		if seen[h] {
			t.Fatalf("holder ID %q issued twice", h)
		}
		seen[h] = true
	}
}

func TestParseLease(t *testing.T) {
	t.Parallel()
	oid := bson.NewObjectID()
	ref, ok, err := parseLease(relaytype.Lease{DeliveryID: oid.Hex(), Token: "7:3:2"})
	if err != nil || !ok || ref.id != oid || ref.tok != (driver.LaneToken{Lane: 7, Epoch: 3, Claims: 2}) {
		t.Fatalf("parseLease(good) = %+v, %v, %v", ref, ok, err)
	}
	// A delivery ID this store cannot have issued: not current, no error.
	for _, id := range []string{"42", strings.ToUpper(oid.Hex()), ""} {
		if _, ok, err := parseLease(relaytype.Lease{DeliveryID: id, Token: "7:3:2"}); ok || err != nil {
			t.Errorf("parseLease(id %q) = %v, %v; want not usable, no error", id, ok, err)
		}
	}
	// A token that is not lane:epoch:claims: the caller's bug, ErrInvalid,
	// whatever the ID.
	for _, tok := range []string{"", "7:3", "7:3:2:1", "256:0:0", "-1:0:0", "07:3:2", "0123456789abcdef0123456789abcdef", "7:3:2x"} {
		_, ok, err := parseLease(relaytype.Lease{DeliveryID: oid.Hex(), Token: tok})
		if ok || !errors.Is(err, relaytype.ErrInvalid) || !strings.HasPrefix(err.Error(), "relaybus/mongo: ") {
			t.Errorf("parseLease(token %q) = %v, %v; want a relaybus/mongo ErrInvalid", tok, ok, err)
		}
		_, _, err = parseLease(relaytype.Lease{DeliveryID: "42", Token: tok})
		if !errors.Is(err, relaytype.ErrInvalid) {
			t.Errorf("parseLease(foreign id, token %q) = %v; a malformed token is ErrInvalid whatever the id", tok, err)
		}
	}
}

// parseLeases checks every lease before anything is sent: a malformed
// token anywhere fails the whole call.
func TestParseLeases(t *testing.T) {
	t.Parallel()
	a, b := bson.NewObjectID(), bson.NewObjectID()
	refs, usable, err := parseLeases([]relaytype.Lease{{DeliveryID: a.Hex(), Token: "1:0:0"}, {DeliveryID: "x", Token: "2:0:0"}, {DeliveryID: b.Hex(), Token: "3:1:4"}})
	if err != nil || len(refs) != 3 || !usable[0] || usable[1] || !usable[2] || refs[2].id != b || refs[2].tok.Claims != 4 {
		t.Fatalf("parseLeases = %+v, %v, %v", refs, usable, err)
	}
	_, _, err = parseLeases([]relaytype.Lease{{DeliveryID: a.Hex(), Token: "1:0:0"}, {DeliveryID: b.Hex(), Token: "nope"}})
	if !errors.Is(err, relaytype.ErrInvalid) {
		t.Fatalf("parseLeases with a malformed second token = %v, want ErrInvalid", err)
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
	if !errors.Is(err, relaytype.ErrInvalid) || !strings.HasPrefix(err.Error(), "relaybus/mongo: ") {
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

func FuzzParseLease(f *testing.F) {
	f.Add(bson.NewObjectID().Hex(), "7:3:2")
	f.Add("42", "")
	f.Add("", "255:9223372036854775807:0")
	f.Fuzz(func(t *testing.T, id, tok string) {
		ref, ok, err := parseLease(relaytype.Lease{DeliveryID: id, Token: tok})
		if _, perr := driver.ParseLaneToken(tok); (perr != nil) != (err != nil) {
			t.Fatalf("parseLease(%q, %q) error %v, but ParseLaneToken says %v", id, tok, err, perr)
		}
		if ok && (ref.id.Hex() != id || ref.tok.String() != tok) {
			t.Fatalf("parseLease(%q, %q) = %+v: not the lease it was given", id, tok, ref)
		}
	})
}
