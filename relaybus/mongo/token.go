package mongo

import (
	"crypto/rand"
	"encoding/hex"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// leaseTokenBytes is the entropy of a lease token. A token fences every
// write of one claim; 128 random bits make it unguessable and make two
// claims sharing a token as likely as a UUIDv4 collision.
const leaseTokenBytes = 16

// newLeaseToken returns a fresh lease token: leaseTokenBytes random bytes
// as lower-case hex.
func newLeaseToken() string {
	var b [leaseTokenBytes]byte
	// crypto/rand.Read never returns an error (Go 1.24+): it crashes the
	// program if the system's generator fails.
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// validLeaseToken reports whether s has the form newLeaseToken returns.
// A token of any other form was not issued by this store, so a fenced
// write under it reports false without a round trip.
func validLeaseToken(s string) bool {
	if len(s) != 2*leaseTokenBytes {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// parseDeliveryID turns a relaybus delivery ID (the hex form of the
// document's ObjectID) back into the ObjectID. ok is false for anything
// this store cannot have issued.
func parseDeliveryID(id string) (bson.ObjectID, bool) {
	// ObjectIDFromHex accepts upper-case hex too; IDs are only ever
	// issued in lower case, and accepting both would give one delivery
	// two IDs.
	if len(id) != 24 {
		return bson.ObjectID{}, false
	}
	oid, err := bson.ObjectIDFromHex(id)
	if err != nil || oid.Hex() != id {
		return bson.ObjectID{}, false
	}
	return oid, true
}

// encodeCursor and decodeCursor implement DeliveryList's paging: the
// cursor is the ID of the last delivery of the page, and the next page
// starts after it in _id order.
func encodeCursor(last bson.ObjectID) string { return last.Hex() }

func decodeCursor(cursor string) (bson.ObjectID, error) {
	oid, ok := parseDeliveryID(cursor)
	if !ok {
		return bson.ObjectID{}, invalidf("list: cursor %q is not a cursor this store returned", cursor)
	}
	return oid, nil
}
