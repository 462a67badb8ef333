package mongo

import (
	"time"

	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// Field names. One place, so filters, updates, pipelines, indexes and
// the decoders cannot disagree.
const (
	fID             = "_id"
	fType           = "type"
	fKey            = "key"
	fSequence       = "sequence"
	fPayload        = "payload"
	fHeaders        = "headers"
	fCreatedAt      = "createdAt"
	fHandlers       = "handlers" // events: every handler the event ever had a delivery for
	fEventID        = "eventId"
	fHandler        = "handler"
	fEventType      = "eventType"
	fEventCreatedAt = "eventCreatedAt"
	fStatus         = "status"
	fAttempts       = "attempts"
	fMaxAttempts    = "maxAttempts"
	fDueAt          = "dueAt"
	fLaneID         = "laneId"  // deliveries: the lease partition, driver.LaneOf
	fClaims         = "claims"  // deliveries: raised by every write that ends a claim
	fSuspect        = "suspect" // deliveries: in flight when its lane was taken over
	fQueue          = "queue"   // deliveries: claim-index membership, queueReady or queueParked
	fLastError      = "lastError"
	fUpdatedAt      = "updatedAt"
	fCompletedAt    = "completedAt"
	fSeq            = "seq" // keys collection: the last sequence of a key

	// Lane documents.
	fEpoch          = "epoch"
	fOwner          = "owner"
	fHolder         = "holder"
	fLeaseExpiresAt = "leaseExpiresAt"
	fInFlight       = "inFlight"
	fLost           = "lost"
	fParkedKeys     = "parkedKeys"

	// 0.1.0 lease fields of a delivery, removed by the upgrade.
	fLeaseOwner = "leaseOwner"
	fLeaseToken = "leaseToken"
)

// Values of a delivery's queue field. A pending delivery is in the claim
// index (queueReady) unless its key's backlog was parked out of it
// (queueParked); see park.go.
const (
	queueReady  = "ready"
	queueParked = "parked"
)

// Headers are stored as an array of {k, v} pairs rather than as a
// sub-document: header names are arbitrary text, and MongoDB restricts
// field names ("$" prefixes, "." in some operators); an array of pairs
// stores any name as plain data. Pairs are sorted by name, so the same
// headers always make the same document.
type headerDoc struct {
	K string `bson:"k"`
	V string `bson:"v"`
}

// eventDoc is an events document.
//
// The event id is the _id: the primary key index gives idempotent publish
// without another unique index. Handlers lists every handler the event
// ever had a delivery for: a delivery is deleted when it completes, so
// this list, not the deliveries, is what keeps a republished or
// redelivered event from running a completed handler again. It is a
// pointer so that an event stored by 0.1.0 (no such field) is told apart
// from an event with no handlers.
type eventDoc struct {
	ID        string      `bson:"_id"`
	Type      string      `bson:"type"`
	Key       string      `bson:"key,omitempty"`
	Sequence  int64       `bson:"sequence,omitempty"`
	Payload   []byte      `bson:"payload"`
	Headers   []headerDoc `bson:"headers,omitempty"`
	CreatedAt time.Time   `bson:"createdAt"`
	Handlers  *[]string   `bson:"handlers,omitempty"`
}

// deliveryDoc is a deliveries document. It carries a copy of its event's
// type, key, sequence, payload, headers and creation time: a claim then
// returns a complete relaytype.Delivery from one read of the picked
// documents (no $lookup, no read per delivery), and a delivery does not
// depend on its event document, which Purge may delete. The price is the
// payload stored once per handler instead of once per event.
//
// key is absent (not "") on unkeyed deliveries, so the partial per-key
// index ({key: {$exists: true}, ...}) holds keyed deliveries only.
//
// Nothing here says who holds the delivery: that is the lane document's
// inFlight list (laneDoc). A claim writes no delivery field, so the
// happy path (publish, claim, complete) changes no indexed field of a
// delivery: it is inserted once and deleted once.
type deliveryDoc struct {
	ID             bson.ObjectID `bson:"_id"`
	EventID        string        `bson:"eventId"`
	Handler        string        `bson:"handler"`
	EventType      string        `bson:"eventType"`
	Key            string        `bson:"key,omitempty"`
	Sequence       int64         `bson:"sequence,omitempty"`
	Payload        []byte        `bson:"payload"`
	Headers        []headerDoc   `bson:"headers,omitempty"`
	EventCreatedAt time.Time     `bson:"eventCreatedAt"`
	Status         string        `bson:"status"`
	Attempts       int64         `bson:"attempts"`
	MaxAttempts    int64         `bson:"maxAttempts"`
	DueAt          time.Time     `bson:"dueAt"`
	LaneID         int32         `bson:"laneId"`
	Claims         int64         `bson:"claims"`
	Suspect        bool          `bson:"suspect"`
	Queue          string        `bson:"queue"`
	LastError      string        `bson:"lastError,omitempty"`
	CreatedAt      time.Time     `bson:"createdAt"`
	UpdatedAt      time.Time     `bson:"updatedAt"`
	CompletedAt    time.Time     `bson:"completedAt,omitempty"` // only on deliveries completed under 0.1.0
}

// laneDoc is a lanes document: one per lane, 256 in all, seeded by Setup.
//
//   - Epoch is the fencing number: +1 every time the lane is taken (a
//     free lane or a takeover). A token carries the epoch it was issued
//     under, and a fenced write checks it.
//   - Owner is the dispatcher's Config.Owner; Holder is the random ID of
//     the Store instance (new at every New), so a restarted process that
//     reuses its owner name does not adopt its predecessor's lanes.
//   - InFlight lists the deliveries the holder claimed and has not
//     finished. A completion does not write the lane (see complete.go),
//     so it may list deliveries that are gone; the holder's next claim
//     drops them.
//   - Lost lists deliveries that were in flight when the lane was taken
//     over, until the new holder has charged each of them an attempt.
//   - ParkedKeys lists the (handler, key) pairs of this lane whose
//     backlog was parked out of the claim index (park.go).
//
// A lane is free when Owner is null, held by (owner, holder) while
// LeaseExpiresAt is in the future, abandoned once that has passed.
type laneDoc struct {
	ID             int32           `bson:"_id"`
	Epoch          int64           `bson:"epoch"`
	Owner          *string         `bson:"owner"`
	Holder         *string         `bson:"holder"`
	LeaseExpiresAt *time.Time      `bson:"leaseExpiresAt"`
	InFlight       []bson.ObjectID `bson:"inFlight"`
	Lost           []bson.ObjectID `bson:"lost"`
	ParkedKeys     []parkedKey     `bson:"parkedKeys"`
}

// parkedKey names one ordering lane of a lane document: a handler and a
// key. Its fields are always written in this order (h, then k), because
// MongoDB compares embedded documents field by field, in order: $pull,
// $addToSet and $in on parkedKeys match only the same order.
type parkedKey struct {
	Handler string `bson:"h"`
	Key     string `bson:"k"`
}

// historyDoc is a completed_deliveries document (Options.CompletionHistory):
// what a completed delivery was, without its payload and headers (the
// history is an audit trail of runs, not a second copy of the events).
// Its _id is the delivery's.
type historyDoc struct {
	ID             bson.ObjectID `bson:"_id"`
	EventID        string        `bson:"eventId"`
	Handler        string        `bson:"handler"`
	EventType      string        `bson:"eventType"`
	Key            string        `bson:"key,omitempty"`
	Sequence       int64         `bson:"sequence,omitempty"`
	EventCreatedAt time.Time     `bson:"eventCreatedAt"`
	Attempts       int64         `bson:"attempts"` // the number of the attempt that succeeded
	MaxAttempts    int64         `bson:"maxAttempts"`
	LaneID         int32         `bson:"laneId"`
	CreatedAt      time.Time     `bson:"createdAt"`
	CompletedAt    time.Time     `bson:"completedAt"`
}

// headersToDoc turns headers into sorted pairs; nil for none.
func headersToDoc(h map[string]string) []headerDoc {
	if len(h) == 0 {
		return nil
	}
	out := make([]headerDoc, 0, len(h))
	for k, v := range h {
		out = append(out, headerDoc{K: k, V: v})
	}
	sortHeaders(out)
	return out
}

func sortHeaders(hs []headerDoc) {
	// Insertion sort: at most driver.MaxHeaders entries.
	for i := 1; i < len(hs); i++ {
		for j := i; j > 0 && hs[j].K < hs[j-1].K; j-- {
			hs[j], hs[j-1] = hs[j-1], hs[j]
		}
	}
}

// headersFromDoc is the inverse of headersToDoc; nil for none.
func headersFromDoc(hs []headerDoc) map[string]string {
	if len(hs) == 0 {
		return nil
	}
	out := make(map[string]string, len(hs))
	for _, h := range hs {
		out[h.K] = h.V
	}
	return out
}

// newEventDoc builds the events document of e, which has been validated,
// with the handlers it gets deliveries for. BSON dates keep milliseconds:
// every time this store writes is cut to the millisecond, and reads
// return UTC.
func newEventDoc(e *relaytype.Event, seq int64, handlers []string) eventDoc {
	hs := append([]string{}, handlers...)
	return eventDoc{
		ID:        e.ID,
		Type:      e.Type,
		Key:       e.Key,
		Sequence:  seq,
		Payload:   cloneBytes(e.Payload),
		Headers:   headersToDoc(e.Headers),
		CreatedAt: e.CreatedAt,
		Handlers:  &hs,
	}
}

// newDeliveryDoc builds a pending delivery of ev for spec, due at now, in
// the claim index, in the lane of its key (or event id).
func newDeliveryDoc(id bson.ObjectID, ev *eventDoc, spec driver.DeliverySpec, now time.Time) deliveryDoc {
	return deliveryDoc{
		ID:             id,
		EventID:        ev.ID,
		Handler:        spec.Handler,
		EventType:      ev.Type,
		Key:            ev.Key,
		Sequence:       ev.Sequence,
		Payload:        ev.Payload,
		Headers:        ev.Headers,
		EventCreatedAt: ev.CreatedAt,
		Status:         string(relaytype.StatusPending),
		Attempts:       0,
		MaxAttempts:    int64(spec.MaxAttempts),
		DueAt:          now,
		LaneID:         int32(driver.LaneOf(ev.Key, ev.ID)),
		Claims:         0,
		Suspect:        false,
		Queue:          queueReady,
		CreatedAt:      now,
		UpdatedAt:      now,
	}
}

// toDelivery converts a stored delivery into the caller's value, as it
// is at rest: pending, dead, or (0.1.0 rows) completed. A delivery in
// flight is shown by asProcessing. Nothing is shared with d.
func (d *deliveryDoc) toDelivery() *relaytype.Delivery {
	return &relaytype.Delivery{
		ID:             d.ID.Hex(),
		EventID:        d.EventID,
		EventType:      d.EventType,
		Key:            d.Key,
		Sequence:       d.Sequence,
		Payload:        cloneBytes(d.Payload),
		Headers:        headersFromDoc(d.Headers),
		EventCreatedAt: utc(d.EventCreatedAt),
		Handler:        d.Handler,
		Status:         relaytype.Status(d.Status),
		Attempts:       int(d.Attempts),
		MaxAttempts:    int(d.MaxAttempts),
		AvailableAt:    utc(d.DueAt),
		LastError:      d.LastError,
		Suspect:        d.Suspect,
		CreatedAt:      utc(d.CreatedAt),
		UpdatedAt:      utc(d.UpdatedAt),
		CompletedAt:    utc(d.CompletedAt),
	}
}

// asProcessing converts a delivery that is in the inFlight list of a
// lane held at epoch under owner until expiresAt: status processing, the
// lease of its claim, and Attempts the number of the attempt that runs
// (the stored count is of attempts that have ended), as a claim returns
// it.
func (d *deliveryDoc) asProcessing(epoch int64, owner string, expiresAt time.Time) *relaytype.Delivery {
	out := d.toDelivery()
	out.Status = relaytype.StatusProcessing
	out.Attempts = int(d.Attempts) + 1
	out.LeaseOwner = owner
	out.LeaseToken = driver.LaneToken{Lane: int(d.LaneID), Epoch: epoch, Claims: d.Claims}.String()
	out.FencingToken = epoch
	out.LeaseExpiresAt = utc(expiresAt)
	return out
}

// newHistoryDoc is the history document of d, completed at now.
func newHistoryDoc(d *deliveryDoc, now time.Time) historyDoc {
	return historyDoc{
		ID:             d.ID,
		EventID:        d.EventID,
		Handler:        d.Handler,
		EventType:      d.EventType,
		Key:            d.Key,
		Sequence:       d.Sequence,
		EventCreatedAt: d.EventCreatedAt,
		Attempts:       d.Attempts + 1,
		MaxAttempts:    d.MaxAttempts,
		LaneID:         d.LaneID,
		CreatedAt:      d.CreatedAt,
		CompletedAt:    now,
	}
}

// toDelivery converts a history document: a completed delivery, without
// payload and headers (the history keeps neither), converted as a stored
// delivery is (deliveryDoc.toDelivery), so one function says how a
// document becomes the caller's value.
func (h *historyDoc) toDelivery() *relaytype.Delivery {
	d := deliveryDoc{
		ID:             h.ID,
		EventID:        h.EventID,
		Handler:        h.Handler,
		EventType:      h.EventType,
		Key:            h.Key,
		Sequence:       h.Sequence,
		EventCreatedAt: h.EventCreatedAt,
		Status:         string(relaytype.StatusCompleted),
		Attempts:       h.Attempts,
		MaxAttempts:    h.MaxAttempts,
		LaneID:         h.LaneID,
		CreatedAt:      h.CreatedAt,
		UpdatedAt:      h.CompletedAt,
		CompletedAt:    h.CompletedAt,
	}
	return d.toDelivery()
}

// utc returns t in UTC, keeping the zero time zero.
func utc(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return t.UTC()
}

// bsonTime is t as MongoDB stores it: milliseconds, UTC. Filters compare
// stored dates with times cut the same way, so "due at or before now"
// means the same in the filter and in the caller's terms.
func bsonTime(t time.Time) time.Time {
	return time.UnixMilli(t.UnixMilli()).UTC()
}

func cloneBytes(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append([]byte{}, b...)
}
