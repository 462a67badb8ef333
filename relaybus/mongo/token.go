package mongo

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"

	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// holderIDBytes is the entropy of a store instance's holder ID. Two
// instances that shared one would adopt each other's lanes; 128 random
// bits make that as likely as a UUIDv4 collision.
const holderIDBytes = 16

// newHolderID returns a fresh holder ID: holderIDBytes random bytes as
// lower-case hex.
func newHolderID() string {
	var b [holderIDBytes]byte
	// crypto/rand.Read never returns an error (Go 1.24+): it crashes the
	// program if the system's generator fails.
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// leaseRef is a lease this store may have issued: the delivery's
// ObjectID and the parsed lane:epoch:claims token.
type leaseRef struct {
	id  bson.ObjectID
	tok driver.LaneToken
}

// parseLease reads a lease. A token that is not lane:epoch:claims is the
// caller's bug and an ErrInvalid error (nothing is written). A delivery ID
// that this store cannot have issued (not the lower-case hex of an
// ObjectID) names no delivery here: ok is false and the fenced write
// reports false without a round trip, as for any lease that is not
// current.
func parseLease(l relaytype.Lease) (ref leaseRef, ok bool, err error) {
	tok, err := driver.ParseLaneToken(l.Token)
	if err != nil {
		return leaseRef{}, false, fmt.Errorf("%slease of delivery %q: %w", errPrefix, l.DeliveryID, err)
	}
	id, ok := parseDeliveryID(l.DeliveryID)
	if !ok {
		return leaseRef{}, false, nil
	}
	return leaseRef{id: id, tok: tok}, true, nil
}

// parseLeases parses every lease of a call before anything is sent, so a
// malformed token in position 7 fails the call without writing the first
// six. usable[i] is false for a lease whose ID cannot be ours.
func parseLeases(leases []relaytype.Lease) (refs []leaseRef, usable []bool, err error) {
	refs = make([]leaseRef, len(leases))
	usable = make([]bool, len(leases))
	for i, l := range leases {
		refs[i], usable[i], err = parseLease(l)
		if err != nil {
			return nil, nil, err
		}
	}
	return refs, usable, nil
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
