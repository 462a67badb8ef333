package mongo

import (
	"reflect"
	"testing"
	"time"

	"github.com/berkcansavur/relaybus/relaybus"
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
	ev := &relaybus.Event{ID: "e1", Type: "order.created", Key: "k1", Payload: []byte("p"),
		Headers: map[string]string{"trace": "abc"}, CreatedAt: created}
	evDoc := newEventDoc(ev, 7)
	id := bson.NewObjectID()
	d := newDeliveryDoc(id, &evDoc, relaybus.DeliverySpec{Handler: "h1", MaxAttempts: 3}, now)

	raw, err := bson.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	for _, absent := range []string{fLeaseOwner, fLeaseToken, fLeaseExpiresAt, fLastError, fCompletedAt} {
		if _, err := bson.Raw(raw).LookupErr(absent); err == nil {
			t.Errorf("a pending delivery document has %q", absent)
		}
	}
	var back deliveryDoc
	if err := bson.Unmarshal(raw, &back); err != nil {
		t.Fatal(err)
	}
	got := back.toDelivery()
	ms := func(t time.Time) time.Time { return t.Truncate(time.Millisecond).UTC() }
	want := &relaybus.Delivery{
		ID: id.Hex(), EventID: "e1", EventType: "order.created", Key: "k1", Sequence: 7,
		Payload: []byte("p"), Headers: map[string]string{"trace": "abc"}, EventCreatedAt: ms(created),
		Handler: "h1", Status: relaybus.StatusPending, Attempts: 0, MaxAttempts: 3, AvailableAt: ms(now),
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
	evDoc := newEventDoc(&relaybus.Event{ID: "e", Type: "t", CreatedAt: time.Now()}, 0)
	d := newDeliveryDoc(bson.NewObjectID(), &evDoc, relaybus.DeliverySpec{Handler: "h", MaxAttempts: 1}, time.Now())
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
	events := []*relaybus.Event{
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

func TestFoldStatistics(t *testing.T) {
	t.Parallel()
	row := func(h, s string, n int64) statisticsRow {
		var r statisticsRow
		r.ID.Handler, r.ID.Status, r.N = h, s, n
		return r
	}
	st := foldStatistics([]statisticsRow{
		row("h1", "pending", 3), row("h1", "processing", 1), row("h2", "completed", 5),
		row("h2", "dead", 2), row("h3", "someday", 9),
	})
	if want := (relaybus.Counts{Pending: 3, Processing: 1, Completed: 5, Dead: 2}); st.Counts != want {
		t.Errorf("totals %+v, want %+v", st.Counts, want)
	}
	wantHandlers := map[string]relaybus.Counts{
		"h1": {Pending: 3, Processing: 1},
		"h2": {Completed: 5, Dead: 2},
	}
	if !reflect.DeepEqual(st.Handlers, wantHandlers) {
		t.Errorf("per handler %+v, want %+v (an unknown status is not counted)", st.Handlers, wantHandlers)
	}
}
