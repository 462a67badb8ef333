package driver

import (
	"hash/fnv"
	"strconv"
	"strings"

	"github.com/berkcansavur/relaybus/relaybus/internal/decimal"
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
	// One allocation, the string: a token is made for every claimed
	// delivery.
	var b [3*20 + 2]byte
	out := strconv.AppendInt(b[:0], int64(t.Lane), 10)
	out = append(out, ':')
	out = strconv.AppendInt(out, t.Epoch, 10)
	out = append(out, ':')
	out = strconv.AppendInt(out, t.Claims, 10)
	return string(out)
}

// ParseLaneToken parses a "lane:epoch:claims" token. It is strict: three
// canonical decimal numbers (no sign, no leading zero, no spaces), a lane
// below LaneCount, and epoch and claims that fit an int64. Anything else
// is not a token of a lane-lease store and is an ErrInvalid error, so a
// store tells a foreign token (a caller's bug) from a stale one (false).
func ParseLaneToken(s string) (LaneToken, error) {
	// Cut, not Split: no slice of parts per token (one is parsed for
	// every completion). A third ':' makes the last part fail to parse.
	lane, rest, ok1 := strings.Cut(s, ":")
	epoch, claims, ok2 := strings.Cut(rest, ":")
	if !ok1 || !ok2 {
		return LaneToken{}, invalidf("lease token %q is not lane:epoch:claims", s)
	}
	var n [3]int64
	for i, p := range [...]string{lane, epoch, claims} {
		v, ok := decimal.Parse(p)
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
