package relaytype

import "time"

// Status is the state of a delivery.
type Status string

const (
	// StatusPending: waiting to be claimed (possibly not due yet).
	StatusPending Status = "pending"
	// StatusProcessing: in flight in a lane whose lease has not been given
	// back or taken over. Lane-lease stores do not store it: they report a
	// pending delivery as processing while its lane lists it in flight.
	StatusProcessing Status = "processing"
	// StatusCompleted: its handler succeeded. A lane-lease store deletes
	// a completed delivery; it is listed and counted as completed only
	// where the store keeps a completion history (or holds rows a 0.1.0
	// store completed), until retention purges it.
	StatusCompleted Status = "completed"
	// StatusDead: its attempt budget is spent (a dead letter). Only
	// Requeue brings it back.
	StatusDead Status = "dead"
)

// Valid reports whether s is one of the four statuses.
func (s Status) Valid() bool {
	switch s {
	case StatusPending, StatusProcessing, StatusCompleted, StatusDead:
		return true
	}
	return false
}

// Delivery is one (event, handler) pair: the unit of work, with its own
// attempts, retry schedule and dead letter.
type Delivery struct {
	// ID is assigned by the store and opaque to callers.
	ID string

	EventID        string
	EventType      string
	Key            string
	Sequence       int64 // per-key sequence in commit order; 0 when Key is empty
	Payload        []byte
	Headers        map[string]string
	EventCreatedAt time.Time

	Handler     string
	Status      Status
	Attempts    int // attempts ended (failed, or lost at a takeover); for a claimed delivery, the number of this attempt (1 = first)
	MaxAttempts int // attempt budget; when spent the delivery is dead
	AvailableAt time.Time
	LastError   string

	// Lease fields are set while the delivery is processing.
	LeaseOwner     string
	LeaseToken     string
	LeaseExpiresAt time.Time

	// FencingToken is for the handler's own writes elsewhere (a fencing
	// token, as Kleppmann names it): a number that only grows, per key,
	// from one holder of the key to the next. It is set on a delivery
	// that is processing (claimed, or listed as processing) and 0
	// otherwise, and is at least 1 then.
	//
	// It is the epoch of the delivery's lane (driver.LaneToken.Epoch of
	// LeaseToken). A lane's epoch is raised every time a dispatcher takes
	// the lane, a takeover of an expired lease included, and by nothing
	// else; every delivery of a key (every handler's) lives in the key's
	// one lane (driver.LaneOf), an unkeyed delivery in its event ID's. So:
	//
	//   - a claim under a later hold of the lane has a larger token than
	//     every claim under an earlier hold, whoever held it;
	//   - the claims of one hold share a token: equal tokens are the same
	//     holder, which runs a key's deliveries one at a time (per handler);
	//   - the store makes the take durable before it returns the token
	//     (PostgreSQL waits for the claim's commit to be flushed, with the
	//     server's synchronous_commit on, its default; MongoDB writes it
	//     with majority concern), so a crash of the database does not hand
	//     one token to two holders.
	//
	// A downstream store that keeps, per key, the largest token it has
	// accepted, and refuses a write with a smaller one, refuses a holder
	// that lost its lease once the next holder has written. Accept equal
	// tokens; make the check and the write one atomic step (an UPDATE
	// ... WHERE fence <= $token, a compare-and-set). Package relaybus's
	// ExampleDelivery_fencingToken shows one.
	//
	// What it does not promise: an order between keys of different lanes
	// (each lane counts for itself: compare tokens of one key only);
	// consecutive numbers; that a stale holder is refused before the new
	// one has written (until then nothing downstream knows of it); or
	// anything across a restore of the store's database from a backup,
	// which takes epochs back.
	FencingToken int64

	// Suspect is set by a lane-lease store on a claimed delivery that was
	// in flight when its lane was taken over: it may be what crashed its
	// last process. A claim returns a suspect alone, and only to a caller
	// with nothing in flight (driver.DeliveryClaimParams.Busy false), so
	// that a delivery which keeps crashing its process is charged into the
	// dead letters by itself. A takeover buries only a delivery that was a
	// suspect already: one that merely ran beside the crasher stays
	// pending, now a suspect, and its next attempt, alone, decides.
	Suspect bool

	CreatedAt   time.Time
	UpdatedAt   time.Time
	CompletedAt time.Time // zero unless completed
}

// Lease names a claimed delivery and the token of the claim. Every fenced
// write takes one; a write under a lease that is no longer current (the
// delivery was taken over, released or finished) does nothing and reports
// false.
func (d *Delivery) Lease() Lease { return Lease{DeliveryID: d.ID, Token: d.LeaseToken} }

// Lease identifies one claim of one delivery: what a store's fenced
// writes (complete, reschedule, bury, release, extend) take.
type Lease struct {
	DeliveryID string
	Token      string
}
