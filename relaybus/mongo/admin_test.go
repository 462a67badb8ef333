package mongo

import (
	"reflect"
	"testing"
	"time"

	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
	"go.mongodb.org/mongo-driver/v2/bson"
)

func TestInFlightIndex(t *testing.T) {
	t.Parallel()
	o := "w1"
	exp := testNow.Add(time.Minute)
	idx := newInFlightIndex([]laneDoc{
		{ID: 1, Epoch: 4, Owner: &o, LeaseExpiresAt: &exp, InFlight: []bson.ObjectID{oid(1), oid(2)}},
		{ID: 2, Epoch: 1, InFlight: []bson.ObjectID{oid(3)}}, // no owner: not in flight
	})
	if !reflect.DeepEqual(idx.ids, []bson.ObjectID{oid(1), oid(2)}) {
		t.Fatalf("ids %v", idx.ids)
	}
	pending := &deliveryDoc{ID: oid(1), Status: statusPending, LaneID: 1, Claims: 2, Attempts: 1}
	if d := idx.show(pending); d.Status != relaytype.StatusProcessing || d.LeaseOwner != "w1" || d.LeaseToken != "1:4:2" ||
		!d.LeaseExpiresAt.Equal(exp) || d.Attempts != 2 {
		t.Errorf("in flight: %+v", d)
	}
	dead := &deliveryDoc{ID: oid(2), Status: statusDead}
	if d := idx.show(dead); d.Status != relaytype.StatusDead {
		t.Errorf("a dead delivery still listed in flight shows as %s", d.Status)
	}
	other := &deliveryDoc{ID: oid(3), Status: statusPending}
	if d := idx.show(other); d.Status != relaytype.StatusPending || d.LeaseToken != "" {
		t.Errorf("not in flight: %+v", d)
	}
}

func TestListSources(t *testing.T) {
	t.Parallel()
	inFlight := []bson.ObjectID{testID2}
	render := func(srcs []listSource) []string {
		var out []string
		for _, s := range srcs {
			prefix := "deliveries "
			if s.history {
				prefix = "history "
			}
			out = append(out, prefix+extJSON(t, s.filter))
		}
		return out
	}
	after := `"_id":{"$gt":` + id1JSON + `}`
	tests := []struct {
		status  relaytype.Status
		history bool
		inFl    []bson.ObjectID
		want    []string
	}{
		{"", false, inFlight, []string{`deliveries {"handler":"h",` + after + `}`}},
		{"", true, inFlight, []string{`deliveries {"handler":"h",` + after + `}`, `history {"handler":"h",` + after + `}`}},
		{relaytype.StatusPending, true, inFlight, []string{`deliveries {"handler":"h",` + after + `,"status":"pending","$and":[{"_id":{"$nin":[` + id2JSON + `]}}]}`}},
		{relaytype.StatusPending, false, nil, []string{`deliveries {"handler":"h",` + after + `,"status":"pending"}`}},
		{relaytype.StatusProcessing, true, inFlight, []string{`deliveries {"handler":"h",` + after + `,"status":"pending","$and":[{"_id":{"$in":[` + id2JSON + `]}}]}`}},
		{relaytype.StatusProcessing, true, nil, nil},
		{relaytype.StatusCompleted, false, nil, []string{`deliveries {"handler":"h",` + after + `,"status":"completed"}`}},
		{relaytype.StatusCompleted, true, nil, []string{`deliveries {"handler":"h",` + after + `,"status":"completed"}`, `history {"handler":"h",` + after + `}`}},
		{relaytype.StatusDead, true, nil, []string{`deliveries {"handler":"h",` + after + `,"status":"dead"}`}},
	}
	for _, tt := range tests {
		p := &driver.DeliveryListParams{Status: tt.status, Handler: "h"}
		if got := render(listSources(p, &testID1, tt.inFl, tt.history)); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("status %q history %v:\n got %v\nwant %v", tt.status, tt.history, got, tt.want)
		}
	}
}

func TestPageOf(t *testing.T) {
	t.Parallel()
	row := func(n byte) listed { return listed{id: oid(n), d: &relaytype.Delivery{ID: oid(n).Hex()}} }
	// Two sources, merged by ID; a duplicate (a delivery completed under
	// 0.1.0 is never in the history too, but merging must not care) once.
	rows := []listed{row(5), row(1), row(3), row(2), row(3)}
	page, next := pageOf(rows, 3)
	if len(page) != 3 || page[0].ID != oid(1).Hex() || page[2].ID != oid(3).Hex() || next == nil || *next != oid(3) {
		t.Fatalf("page %v next %v", page, next)
	}
	page, next = pageOf([]listed{row(1)}, 3)
	if len(page) != 1 || next != nil {
		t.Fatalf("last page %v next %v", page, next)
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
		row("h1", "pending", 3), row("h2", "completed", 5), row("h2", "dead", 2),
		row("h3", "someday", 9), row("h1", "completed", 1),
	}, map[string]int64{"h1": 2, "gone": 4})
	if want := (relaytype.Counts{Pending: 1, Processing: 2, Completed: 6, Dead: 2}); st.Counts != want {
		t.Errorf("totals %+v, want %+v", st.Counts, want)
	}
	wantHandlers := map[string]relaytype.Counts{
		"h1": {Pending: 1, Processing: 2, Completed: 1},
		"h2": {Completed: 5, Dead: 2},
	}
	if !reflect.DeepEqual(st.Handlers, wantHandlers) {
		t.Errorf("per handler %+v, want %+v (an unknown status is not counted)", st.Handlers, wantHandlers)
	}
	// More running than pending (a race between the two reads) never
	// makes a count negative.
	st = foldStatistics([]statisticsRow{row("h", "pending", 1)}, map[string]int64{"h": 5})
	if st.Pending != 0 || st.Processing != 1 {
		t.Errorf("clamped: %+v", st.Counts)
	}
}

func TestFoldOldestDue(t *testing.T) {
	t.Parallel()
	now := time.Date(2031, 1, 1, 12, 0, 0, 0, time.UTC)
	st := &relaytype.Statistics{Handlers: map[string]relaytype.Counts{"h1": {Pending: 2}, "h2": {Pending: 1}, "h3": {Dead: 1}}}
	foldOldestDue(st, []oldestDueRow{
		{Handler: "h1", Due: now.Add(-time.Minute)},
		{Handler: "h2", Due: now.Add(-time.Hour)},
		{Handler: "late", Due: now.Add(-2 * time.Hour)}, // published between the reads
		{Handler: "h3", Due: now.Add(time.Second)},      // a clock behind the server's: never negative
	}, now)
	want := map[string]relaytype.Counts{
		"h1": {Pending: 2, OldestDueAge: time.Minute},
		"h2": {Pending: 1, OldestDueAge: time.Hour},
		"h3": {Dead: 1},
	}
	if !reflect.DeepEqual(st.Handlers, want) {
		t.Errorf("per handler %+v, want %+v", st.Handlers, want)
	}
	if st.OldestDueAge != 2*time.Hour {
		t.Errorf("oldest of all %v, want 2h (the late handler's delivery exists)", st.OldestDueAge)
	}
}

func TestOrphanEvents(t *testing.T) {
	t.Parallel()
	got := orphanEvents([]string{"a", "b", "c"}, map[string]bool{"b": true})
	if !reflect.DeepEqual(got, []string{"a", "c"}) {
		t.Fatalf("orphans %v", got)
	}
	if orphanEvents([]string{"a"}, map[string]bool{"a": true}) != nil {
		t.Fatal("an event with a delivery is an orphan")
	}
}

func TestFreshHandlers(t *testing.T) {
	t.Parallel()
	specs := []driver.DeliverySpec{{Handler: "a", MaxAttempts: 1}, {Handler: "b", MaxAttempts: 2}}
	if got := freshHandlers(specs, map[string]bool{"a": true}); len(got) != 1 || got[0].Handler != "b" {
		t.Errorf("fresh %v", got)
	}
	if got := freshHandlers(specs, nil); len(got) != 2 {
		t.Errorf("a new event gets every handler: %v", got)
	}
}

func TestGrowHandlersModel(t *testing.T) {
	t.Parallel()
	listed := &eventDoc{ID: "e", Handlers: &[]string{"a"}}
	if growHandlersModel(listed, map[string]bool{"a": true}, nil) != nil {
		t.Error("nothing fresh: no write")
	}
	_, u := updateOf(t, growHandlersModel(listed, map[string]bool{"a": true}, []driver.DeliverySpec{{Handler: "b"}}))
	if u != `{"$addToSet":{"handlers":{"$each":["b"]}}}` {
		t.Errorf("listed event: %s", u)
	}
	// A 0.1.0 event not upgraded yet: the write that creates its list
	// lists what it had too, even when nothing is fresh.
	legacy := &eventDoc{ID: "e"}
	_, u = updateOf(t, growHandlersModel(legacy, map[string]bool{"z": true, "a": true}, nil))
	if u != `{"$addToSet":{"handlers":{"$each":["a","z"]}}}` {
		t.Errorf("0.1.0 event: %s", u)
	}
}
