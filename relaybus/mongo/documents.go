package mongo

import (
	"time"

	"github.com/berkcansavur/relaybus/relaybus"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// Field names. One place, so filters, updates, indexes and the decoder
// cannot disagree.
const (
	fID             = "_id"
	fType           = "type"
	fKey            = "key"
	fSequence       = "sequence"
	fPayload        = "payload"
	fHeaders        = "headers"
	fCreatedAt      = "createdAt"
	fEventID        = "eventId"
	fHandler        = "handler"
	fEventType      = "eventType"
	fEventCreatedAt = "eventCreatedAt"
	fStatus         = "status"
	fAttempts       = "attempts"
	fMaxAttempts    = "maxAttempts"
	fDueAt          = "dueAt"
	fLeaseOwner     = "leaseOwner"
	fLeaseToken     = "leaseToken"
	fLeaseExpiresAt = "leaseExpiresAt"
	fLastError      = "lastError"
	fUpdatedAt      = "updatedAt"
	fCompletedAt    = "completedAt"
	fSeq            = "seq" // keys collection: the last sequence of a key
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
// without another unique index.
type eventDoc struct {
	ID        string      `bson:"_id"`
	Type      string      `bson:"type"`
	Key       string      `bson:"key,omitempty"`
	Sequence  int64       `bson:"sequence,omitempty"`
	Payload   []byte      `bson:"payload"`
	Headers   []headerDoc `bson:"headers,omitempty"`
	CreatedAt time.Time   `bson:"createdAt"`
}

// deliveryDoc is a deliveries document. It carries a copy of its event's
// type, key, sequence, payload, headers and creation time: a claim then
// returns a complete relaybus.Delivery from its one findOneAndUpdate round
// trip (no $lookup, no second read per delivery), and a delivery does not
// depend on its event document, which Purge may delete. The price is the
// payload stored once per handler instead of once per event.
//
// key is absent (not "") on unkeyed deliveries, so the partial per-key
// index ({key: {$exists: true}}) holds keyed deliveries only. The lease
// fields exist only while the delivery is processing.
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
	LeaseOwner     string        `bson:"leaseOwner,omitempty"`
	LeaseToken     string        `bson:"leaseToken,omitempty"`
	LeaseExpiresAt time.Time     `bson:"leaseExpiresAt,omitempty"`
	LastError      string        `bson:"lastError,omitempty"`
	CreatedAt      time.Time     `bson:"createdAt"`
	UpdatedAt      time.Time     `bson:"updatedAt"`
	CompletedAt    time.Time     `bson:"completedAt,omitempty"`
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
	// Insertion sort: at most relaybus.MaxHeaders entries.
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

// newEventDoc builds the events document of e, which has been validated.
// BSON dates keep milliseconds: every time this store writes is cut to the
// millisecond, and reads return UTC.
func newEventDoc(e *relaybus.Event, seq int64) eventDoc {
	return eventDoc{
		ID:        e.ID,
		Type:      e.Type,
		Key:       e.Key,
		Sequence:  seq,
		Payload:   cloneBytes(e.Payload),
		Headers:   headersToDoc(e.Headers),
		CreatedAt: e.CreatedAt,
	}
}

// newDeliveryDoc builds a pending delivery of ev for spec, due at now.
func newDeliveryDoc(id bson.ObjectID, ev *eventDoc, spec relaybus.DeliverySpec, now time.Time) deliveryDoc {
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
		Status:         string(relaybus.StatusPending),
		Attempts:       0,
		MaxAttempts:    int64(spec.MaxAttempts),
		DueAt:          now,
		CreatedAt:      now,
		UpdatedAt:      now,
	}
}

// toDelivery converts a stored delivery into the caller's value. Nothing
// is shared with d.
func (d *deliveryDoc) toDelivery() *relaybus.Delivery {
	return &relaybus.Delivery{
		ID:             d.ID.Hex(),
		EventID:        d.EventID,
		EventType:      d.EventType,
		Key:            d.Key,
		Sequence:       d.Sequence,
		Payload:        cloneBytes(d.Payload),
		Headers:        headersFromDoc(d.Headers),
		EventCreatedAt: utc(d.EventCreatedAt),
		Handler:        d.Handler,
		Status:         relaybus.Status(d.Status),
		Attempts:       int(d.Attempts),
		MaxAttempts:    int(d.MaxAttempts),
		AvailableAt:    utc(d.DueAt),
		LastError:      d.LastError,
		LeaseOwner:     d.LeaseOwner,
		LeaseToken:     d.LeaseToken,
		LeaseExpiresAt: utc(d.LeaseExpiresAt),
		CreatedAt:      utc(d.CreatedAt),
		UpdatedAt:      utc(d.UpdatedAt),
		CompletedAt:    utc(d.CompletedAt),
	}
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
