package mongo

import (
	"reflect"
	"testing"
	"time"

	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
	"go.mongodb.org/mongo-driver/v2/bson"
)

func TestHeaders(t *testing.T) {
	t.Parallel()
	if headersToDoc(nil) != nil || headersFromDoc(nil) != nil {
		t.Fatal("no headers must stay nil")
	}
	h := map[string]string{"z": "1", "$weird.name": "2", "a": "", "m": "x"}
	doc := headersToDoc(h)
	for i := 1; i < len(doc); i++ {
		if doc[i-1].K >= doc[i].K {
			t.Fatalf("header pairs not sorted by name: %v", doc)
		}
	}
	if got := headersFromDoc(doc); !reflect.DeepEqual(got, h) {
		t.Fatalf("headers round trip: %v, want %v", got, h)
	}
}

// A delivery document survives BSON and comes back as the Delivery the
// caller expects: copies, UTC, milliseconds, absent fields as zero values.
func TestDeliveryDocumentRoundTrip(t *testing.T) {
	t.Parallel()
	created := time.Date(2031, 1, 1, 12, 0, 0, 123_456_789, time.FixedZone("X", 3600))
	now := created.Add(time.Second)
	ev := &relaytype.Event{ID: "e1", Type: "order.created", Key: "k1", Payload: []byte("p"),
		Headers: map[string]string{"trace": "abc"}, CreatedAt: created}
	evDoc := newEventDoc(ev, 7, []string{"h1"})
	id := bson.NewObjectID()
	d := newDeliveryDoc(id, &evDoc, driver.DeliverySpec{Handler: "h1", MaxAttempts: 3}, now)

	raw, err := bson.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	for _, absent := range []string{fLeaseOwner, fLeaseToken, fLeaseExpiresAt, fLastError, fCompletedAt} {
		if _, err := bson.Raw(raw).LookupErr(absent); err == nil {
			t.Errorf("a pending delivery document has %q", absent)
		}
	}
	// Nothing says who holds a delivery; it starts ready in its lane.
	if v := bson.Raw(raw).Lookup(fLaneID); v.Int32() != int32(driver.LaneOf("k1", "e1")) {
		t.Errorf("laneId = %v, want driver.LaneOf(key, event id) = %d", v, driver.LaneOf("k1", "e1"))
	}
	if v := bson.Raw(raw).Lookup(fQueue); v.StringValue() != queueReady {
		t.Errorf("queue = %v, want %q", v, queueReady)
	}
	if v := bson.Raw(raw).Lookup(fClaims); v.Int64() != 0 {
		t.Errorf("claims = %v, want 0", v)
	}
	var back deliveryDoc
	if err := bson.Unmarshal(raw, &back); err != nil {
		t.Fatal(err)
	}
	got := back.toDelivery()
	ms := func(t time.Time) time.Time { return t.Truncate(time.Millisecond).UTC() }
	want := &relaytype.Delivery{
		ID: id.Hex(), EventID: "e1", EventType: "order.created", Key: "k1", Sequence: 7,
		Payload: []byte("p"), Headers: map[string]string{"trace": "abc"}, EventCreatedAt: ms(created),
		Handler: "h1", Status: relaytype.StatusPending, Attempts: 0, MaxAttempts: 3, AvailableAt: ms(now),
		CreatedAt: ms(now), UpdatedAt: ms(now),
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, want)
	}
	got.Payload[0] = 'X'
	if back.Payload[0] != 'p' || ev.Payload[0] != 'p' {
		t.Fatal("payload shared between the caller and the document")
	}
}

// An unkeyed delivery has no key field at all: the per-key index is
// partial on {key: {$exists: true}}.
func TestUnkeyedDeliveryHasNoKeyField(t *testing.T) {
	t.Parallel()
	evDoc := newEventDoc(&relaytype.Event{ID: "e", Type: "t", CreatedAt: time.Now()}, 0, nil)
	d := newDeliveryDoc(bson.NewObjectID(), &evDoc, driver.DeliverySpec{Handler: "h", MaxAttempts: 1}, time.Now())
	for name, v := range map[string]any{"event": evDoc, "delivery": d} {
		raw, err := bson.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{fKey, fSequence, fHeaders} {
			if _, err := bson.Raw(raw).LookupErr(f); err == nil {
				t.Errorf("unkeyed %s document has %q", name, f)
			}
		}
	}
}

func TestBSONTime(t *testing.T) {
	t.Parallel()
	in := time.Date(2031, 1, 1, 12, 0, 0, 999_999_999, time.FixedZone("X", -7200))
	got := bsonTime(in)
	if got.Location() != time.UTC || got.Nanosecond() != 999_000_000 || !got.Equal(in.Truncate(time.Millisecond)) {
		t.Fatalf("bsonTime(%v) = %v", in, got)
	}
	if !utc(time.Time{}).IsZero() {
		t.Fatal("utc of the zero time is not zero")
	}
}

func TestGroupByKeyAndSequences(t *testing.T) {
	t.Parallel()
	events := []*relaytype.Event{
		{ID: "a", Key: "k1"}, {ID: "b"}, {ID: "c", Key: "k2"}, {ID: "d", Key: "k1"}, {ID: "e", Key: "k1"},
	}
	groups := groupByKey(events)
	want := []keyBatch{{key: "k1", events: []string{"a", "d", "e"}}, {key: "k2", events: []string{"c"}}}
	if !reflect.DeepEqual(groups, want) {
		t.Fatalf("groupByKey = %+v, want %+v", groups, want)
	}
	seqs := map[string]int64{}
	assignSequences(groups[0], 10, seqs) // counter went 7 -> 10
	assignSequences(groups[1], 1, seqs)  // first use of k2
	wantSeqs := map[string]int64{"a": 8, "d": 9, "e": 10, "c": 1}
	if !reflect.DeepEqual(seqs, wantSeqs) {
		t.Fatalf("sequences = %v, want %v", seqs, wantSeqs)
	}
}

// An unkeyed event's deliveries live in the lane of the event id.
func TestUnkeyedLaneIsTheEventIDs(t *testing.T) {
	t.Parallel()
	evDoc := newEventDoc(&relaytype.Event{ID: "evt-42", Type: "t"}, 0, nil)
	d := newDeliveryDoc(bson.NewObjectID(), &evDoc, driver.DeliverySpec{Handler: "h", MaxAttempts: 1}, testNow)
	if d.LaneID != int32(driver.LaneOf("", "evt-42")) {
		t.Fatalf("laneId %d, want %d", d.LaneID, driver.LaneOf("", "evt-42"))
	}
}

// A delivery in flight is shown with the lease of its claim: processing,
// the lane's owner and expiry, the token lane:epoch:claims, and Attempts
// the number of the running attempt.
func TestAsProcessing(t *testing.T) {
	t.Parallel()
	d := deliveryDoc{ID: testID1, EventID: "e", Handler: "h", Status: statusPending, Attempts: 2, MaxAttempts: 5,
		LaneID: 9, Claims: 4, Suspect: true, DueAt: testNow}
	got := d.asProcessing(11, "w1", testNow.Add(time.Minute))
	if got.Status != relaytype.StatusProcessing || got.Attempts != 3 || got.LeaseOwner != "w1" ||
		got.LeaseToken != "9:11:4" || !got.LeaseExpiresAt.Equal(testNow.Add(time.Minute)) || !got.Suspect {
		t.Fatalf("asProcessing = %+v", got)
	}
	tok, err := driver.ParseLaneToken(got.LeaseToken)
	if err != nil || tok != (driver.LaneToken{Lane: 9, Epoch: 11, Claims: 4}) {
		t.Fatalf("the token does not parse back: %v, %v", tok, err)
	}
	if got.FencingToken != 11 {
		t.Fatalf("FencingToken = %d, want the lane's epoch 11", got.FencingToken)
	}
	if at := d.toDelivery(); at.Status != relaytype.StatusPending || at.Attempts != 2 || at.LeaseToken != "" || at.FencingToken != 0 {
		t.Fatalf("toDelivery of the same document = %+v", at)
	}
}

// A history document records the attempt that succeeded, not the
// payload.
func TestHistoryDocument(t *testing.T) {
	t.Parallel()
	d := deliveryDoc{ID: testID1, EventID: "e", Handler: "h", EventType: "t", Key: "k", Sequence: 3, Payload: []byte("p"),
		Status: statusPending, Attempts: 1, MaxAttempts: 5, LaneID: 9, CreatedAt: testNow, EventCreatedAt: testNow}
	h := newHistoryDoc(&d, testNow.Add(time.Second))
	raw, err := bson.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	for _, absent := range []string{fPayload, fHeaders, fStatus} {
		if _, err := bson.Raw(raw).LookupErr(absent); err == nil {
			t.Errorf("a history document has %q", absent)
		}
	}
	var back historyDoc
	if err := bson.Unmarshal(raw, &back); err != nil {
		t.Fatal(err)
	}
	got := back.toDelivery()
	if got.ID != testID1.Hex() || got.Status != relaytype.StatusCompleted || got.Attempts != 2 || got.Key != "k" ||
		got.Sequence != 3 || !got.CompletedAt.Equal(testNow.Add(time.Second)) || !got.UpdatedAt.Equal(got.CompletedAt) ||
		got.MaxAttempts != 5 || got.EventType != "t" || got.Handler != "h" || !got.CreatedAt.Equal(testNow) ||
		!got.AvailableAt.IsZero() || got.Payload != nil || got.Headers != nil || got.LastError != "" || got.Suspect {
		t.Fatalf("history round trip = %+v", got)
	}
}

// A lane document as Setup seeds it (nulls, empty arrays) and as a claim
// leaves it decodes; parked keys encode h before k, the order the
// $addToSet, $pull and $in comparisons of parkedKeys depend on.
func TestLaneDocument(t *testing.T) {
	t.Parallel()
	var seeded laneDoc
	raw, err := bson.Marshal(append(bson.D{{Key: fID, Value: int32(5)}}, seedLaneUpdate[0].Value.(bson.D)...))
	if err != nil {
		t.Fatal(err)
	}
	if err := bson.Unmarshal(raw, &seeded); err != nil {
		t.Fatal(err)
	}
	if seeded.ID != 5 || seeded.Epoch != 0 || seeded.Owner != nil || seeded.Holder != nil || seeded.LeaseExpiresAt != nil ||
		len(seeded.InFlight) != 0 || len(seeded.Lost) != 0 || len(seeded.ParkedKeys) != 0 {
		t.Fatalf("seeded lane = %+v", seeded)
	}
	owner, holder, exp := "w", "hid", testNow
	held := laneDoc{ID: 5, Epoch: 2, Owner: &owner, Holder: &holder, LeaseExpiresAt: &exp,
		InFlight: []bson.ObjectID{testID1}, ParkedKeys: []parkedKey{{Handler: "h", Key: "k"}}}
	raw, err = bson.Marshal(held)
	if err != nil {
		t.Fatal(err)
	}
	var back laneDoc
	if err := bson.Unmarshal(raw, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back.InFlight, held.InFlight) || *back.Owner != "w" || !back.LeaseExpiresAt.Equal(exp) {
		t.Fatalf("lane round trip = %+v", back)
	}
	if got := extJSON(t, held.ParkedKeys[0]); got != `{"h":"h","k":"k"}` {
		t.Fatalf("parked key encodes as %s", got)
	}
}

// An event's handlers field tells a 0.1.0 event (absent) from one with no
// handlers (empty).
func TestEventHandlersField(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		doc  bson.D
		want *[]string
	}{
		"0.1.0, absent": {bson.D{{Key: fID, Value: "e"}}, nil},
		"empty":         {bson.D{{Key: fID, Value: "e"}, {Key: fHandlers, Value: bson.A{}}}, &[]string{}},
		"listed":        {bson.D{{Key: fID, Value: "e"}, {Key: fHandlers, Value: bson.A{"h1"}}}, &[]string{"h1"}},
	} {
		raw, err := bson.Marshal(tc.doc)
		if err != nil {
			t.Fatal(err)
		}
		var ev eventDoc
		if err := bson.Unmarshal(raw, &ev); err != nil {
			t.Fatal(err)
		}
		if (ev.Handlers == nil) != (tc.want == nil) || (tc.want != nil && len(*ev.Handlers) != len(*tc.want)) {
			t.Errorf("%s: handlers = %v, want %v", name, ev.Handlers, tc.want)
		}
	}
	doc := newEventDoc(&relaytype.Event{ID: "e", Type: "t"}, 0, nil)
	raw, err := bson.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := bson.Raw(raw).LookupErr(fHandlers); err != nil || v.Type != bson.TypeArray {
		t.Fatalf("a new event without deliveries stores handlers %v (%v), want an empty array", v, err)
	}
}
