package relaybus

import (
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
)

// LaneCount is the number of lanes of a lane-lease store (0.2.0). A lane
// is the unit a dispatcher leases: it holds every delivery whose ordering
// key (or, for an unkeyed event, event ID) hashes to it. The count is
// fixed: it is stored with every delivery, so changing it would move
// deliveries between lanes.
const LaneCount = 256

// LaneOf returns the lane of an event's deliveries: the 32-bit FNV-1a hash
// of key, or of eventID when key is empty, modulo LaneCount. All
// deliveries of one key share a lane, so one lease holder at a time sees
// a key, which is what keeps per-key order across takeovers. Every store
// uses this one function; golden vectors in lane_test.go pin it, because
// a stored lane number must never change meaning.
func LaneOf(key, eventID string) int {
	h := fnv.New32a()
	if key != "" {
		h.Write([]byte(key))
	} else {
		h.Write([]byte(eventID))
	}
	return int(h.Sum32() % LaneCount)
}

// LaneToken is the lease token of a lane-lease store, written
// "lane:epoch:claims" in Delivery.LeaseToken:
//
//   - Lane is the lane the delivery lives in;
//   - Epoch is the lane's epoch when the delivery was claimed; a takeover
//     raises it, so every write under an older epoch is refused;
//   - Claims is the delivery's claims counter when it was claimed; every
//     write that ends a claim (reschedule, bury, release, the charge of a
//     takeover) raises it, so the lease of an older claim of the same
//     delivery in the same epoch is refused too.
//
// A fenced write holds when the lane still has Epoch under the same
// holder, still lists the delivery as in flight, and the delivery's
// counter still equals Claims.
type LaneToken struct {
	Lane   int
	Epoch  int64
	Claims int64
}

// String formats t as "lane:epoch:claims".
func (t LaneToken) String() string {
	return strconv.Itoa(t.Lane) + ":" + strconv.FormatInt(t.Epoch, 10) + ":" + strconv.FormatInt(t.Claims, 10)
}

// ParseLaneToken parses a "lane:epoch:claims" token. It is strict: three
// canonical decimal numbers (no sign, no leading zero, no spaces), a lane
// below LaneCount, and epoch and claims that fit an int64. Anything else
// is not a token of a lane-lease store and is an ErrInvalid error, so a
// store tells a foreign token (a caller's bug) from a stale one (false).
func ParseLaneToken(s string) (LaneToken, error) {
	parts := strings.Split(s, ":")
	if len(parts) != 3 {
		return LaneToken{}, invalidf("lease token %q is not lane:epoch:claims", s)
	}
	var n [3]int64
	for i, p := range parts {
		v, ok := ParseDecimal(p)
		if !ok {
			return LaneToken{}, invalidf("lease token %q is not lane:epoch:claims", s)
		}
		n[i] = v
	}
	if n[0] >= LaneCount {
		return LaneToken{}, invalidf("lease token %q: lane %d out of range [0, %d)", s, n[0], LaneCount)
	}
	return LaneToken{Lane: int(n[0]), Epoch: n[1], Claims: n[2]}, nil
}

// ParseDecimal parses a canonical non-negative decimal int64: digits only,
// no sign, no leading zero (except "0" itself), no spaces. Stores use it
// for their numeric IDs and tokens, so that one value has one spelling
// and a lease or ID that was not produced by the store is recognised.
func ParseDecimal(s string) (int64, bool) {
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

// ParseDeliveryID reads a delivery ID of a store whose IDs are positive
// decimal integers (the PostgreSQL and memory stores): the canonical form
// only (ParseDecimal), above 0.
func ParseDeliveryID(s string) (int64, bool) {
	id, ok := ParseDecimal(s)
	return id, ok && id > 0
}

// DecimalListCursor reads DeliveryListParams.After for a store whose
// cursor is the last delivery ID of the previous page, a positive
// decimal integer (the PostgreSQL and memory stores): 0 for none, or an
// ErrInvalid error naming the store (e.g. "relaybus/postgres") for a
// cursor no such store returned.
func DecimalListCursor(store, after string) (int64, error) {
	if after == "" {
		return 0, nil
	}
	id, ok := ParseDeliveryID(after)
	if !ok {
		return 0, fmt.Errorf("%s: list: cursor %q is not one this store returned (the last ID of a page): %w", store, after, ErrInvalid)
	}
	return id, nil
}

// DecimalLease is a parsed Lease of a lane-lease store whose delivery IDs
// are positive decimal integers.
type DecimalLease struct {
	ID    int64
	Token LaneToken
}

// ParseDecimalLease reads a lease such a store handed out. A delivery ID
// or token of another form was never issued by it (a caller's bug, a lease
// of another store): the error wraps ErrInvalid, and the caller writes
// nothing. A well-formed lease that is merely stale is not an error: its
// write reports false. The caller prefixes its package and operation.
func ParseDecimalLease(l Lease) (DecimalLease, error) {
	id, ok := ParseDeliveryID(l.DeliveryID)
	if !ok {
		return DecimalLease{}, fmt.Errorf("delivery id %q is not one of this store's: %w", l.DeliveryID, ErrInvalid)
	}
	tok, err := ParseLaneToken(l.Token)
	if err != nil {
		return DecimalLease{}, fmt.Errorf("delivery %d: %w", id, err)
	}
	return DecimalLease{ID: id, Token: tok}, nil
}

// ParseDecimalLeases parses every lease of a call (ParseDecimalLease), so
// that a call with one bad lease writes nothing.
func ParseDecimalLeases(ls []Lease) ([]DecimalLease, error) {
	out := make([]DecimalLease, len(ls))
	for i, l := range ls {
		var err error
		if out[i], err = ParseDecimalLease(l); err != nil {
			return nil, err
		}
	}
	return out, nil
}
