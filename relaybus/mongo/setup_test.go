package mongo

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/berkcansavur/relaybus/relaybus/driver"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// indexOptions applies an index model's option setters, as the driver
// does before it sends createIndexes.
func indexOptions(t *testing.T, m mongo.IndexModel) *options.IndexOptions {
	t.Helper()
	o := &options.IndexOptions{}
	for _, set := range m.Options.List() {
		if err := set(o); err != nil {
			t.Fatal(err)
		}
	}
	if o.Name == nil {
		t.Fatalf("index %v has no name", m.Keys)
	}
	return o
}

func TestDeliveryIndexes(t *testing.T) {
	t.Parallel()
	byName := map[string]mongo.IndexModel{}
	for _, m := range deliveryIndexes() {
		name := *indexOptions(t, m).Name
		if _, dup := byName[name]; dup {
			t.Fatalf("index name %q used twice", name)
		}
		if slices.Contains(obsoleteIndexes, name) {
			t.Fatalf("0.2.0 index %q has the name of one the upgrade drops", name)
		}
		byName[name] = m
	}
	want := map[string]struct{ keys, partial string }{
		indexClaimLane:       {`{"queue":1,"laneId":1,"dueAt":1,"_id":1}`, `{"status":"pending"}`},
		indexKeyOrderPending: {`{"handler":1,"key":1,"sequence":1}`, `{"key":{"$exists":true},"status":"pending"}`},
		indexEventHandler:    {`{"eventId":1,"handler":1}`, ``},
		indexPurgeDead:       {`{"updatedAt":1,"_id":1}`, `{"status":"dead"}`},
	}
	if len(byName) != len(want) {
		t.Fatalf("%d indexes, want %d", len(byName), len(want))
	}
	for name, w := range want {
		m, ok := byName[name]
		if !ok {
			t.Fatalf("index %q missing", name)
		}
		o := indexOptions(t, m)
		if got := extJSON(t, m.Keys); got != w.keys {
			t.Errorf("%s keys %s, want %s", name, got, w.keys)
		}
		got := ""
		if o.PartialFilterExpression != nil {
			got = extJSON(t, o.PartialFilterExpression)
		}
		if got != w.partial {
			t.Errorf("%s partial filter %s, want %s", name, got, w.partial)
		}
	}
	if o := indexOptions(t, byName[indexEventHandler]); o.Unique == nil || !*o.Unique {
		t.Error("(eventId, handler) is not unique")
	}
	// The happy path writes no delivery field an index contains: a claim
	// writes lanes, a completion deletes. Fields written only on the rare
	// paths (reschedule: dueAt; bury, requeue: status; park: queue) may be
	// indexed; the lease fields of 0.1.0 must not be.
	for name, m := range byName {
		keys := extJSON(t, m.Keys)
		for _, f := range []string{fLeaseOwner, fLeaseToken, fLeaseExpiresAt, fClaims, fSuspect, fAttempts} {
			if strings.Contains(keys, `"`+f+`"`) {
				t.Errorf("index %s contains %s", name, f)
			}
		}
	}
}

func TestOtherIndexes(t *testing.T) {
	t.Parallel()
	ev := eventIndexes()
	if len(ev) != 1 || extJSON(t, ev[0].Keys) != `{"createdAt":1,"_id":1}` || *indexOptions(t, ev[0]).Name != indexEventsCreated {
		t.Errorf("event indexes: %v", ev)
	}
	h := historyIndexes()
	if len(h) != 1 || extJSON(t, h[0].Keys) != `{"completedAt":1}` || *indexOptions(t, h[0]).Name != indexHistoryCompleted {
		t.Errorf("history indexes: %v", h)
	}
}

func TestUpgradeMarker(t *testing.T) {
	t.Parallel()
	if obsoleteIndexes[len(obsoleteIndexes)-1] != indexLeaseExpiry010 {
		t.Fatal("the 0.1.0 marker index is not dropped last: an interrupted upgrade would not run again")
	}
	if !upgradeNeeded([]string{"_id_", indexClaim010, indexLeaseExpiry010}) {
		t.Error("a 0.1.0 index set is not recognised")
	}
	if upgradeNeeded([]string{"_id_", indexClaim010}) {
		t.Error("a partly upgraded index set (marker dropped) asks for the upgrade again")
	}
	var fresh []string
	for _, m := range deliveryIndexes() {
		fresh = append(fresh, *indexOptions(t, m).Name)
	}
	if upgradeNeeded(append(fresh, "_id_")) {
		t.Error("a 0.2.0 index set asks for the upgrade")
	}
	// The 0.1.0 index names are spelled as 0.1.0 created them.
	for _, n := range []string{"claim_status_dueAt", "lease_status_leaseExpiresAt", "order_handler_key_sequence",
		"list_status_id", "list_handler_id", "purge_status_completedAt"} {
		if !slices.Contains(obsoleteIndexes, n) {
			t.Errorf("0.1.0 index %q is not dropped", n)
		}
	}
}

func TestSeedLaneModels(t *testing.T) {
	t.Parallel()
	models := seedLaneModels()
	if len(models) != driver.LaneCount {
		t.Fatalf("%d lanes, want %d", len(models), driver.LaneCount)
	}
	for i, m := range models {
		u := m.(*mongo.UpdateOneModel)
		if u.Upsert == nil || !*u.Upsert {
			t.Fatalf("lane %d is not an upsert", i)
		}
		if got := extJSON(t, u.Filter); got != `{"_id":`+itoa(i)+`}` {
			t.Fatalf("lane %d filter %s", i, got)
		}
		if extJSON(t, u.Update) != extJSON(t, seedLaneUpdate) {
			t.Fatalf("lane %d update is not $setOnInsert", i)
		}
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

func TestUpgradeDocuments(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		got  any
		want string
	}{
		{"other processing", upgradeProcessingFilter, `{"status":"processing"}`},
		{"pending suspect, attempts kept, no lease", upgradePendingPipeline(),
			`[{"$set":{"status":{"$literal":"pending"},"suspect":true,"updatedAt":"$$NOW"}},{"$unset":["leaseOwner","leaseToken","leaseExpiresAt"]}]`},
		{"any lease field left", upgradeLeaseFieldsFilter,
			`{"$or":[{"leaseOwner":{"$exists":true}},{"leaseToken":{"$exists":true}},{"leaseExpiresAt":{"$exists":true}}]}`},
		{"remove them", upgradeUnsetLease, `{"$unset":{"leaseOwner":"","leaseToken":"","leaseExpiresAt":""}}`},
		{"lane backfill: first page", laneBackfillPage(nil), `{"laneId":{"$exists":false}}`},
		{"lane backfill: next page", laneBackfillPage(&testID1), `{"_id":{"$gt":` + id1JSON + `},"laneId":{"$exists":false}}`},
		{"handlers backfill: first page", handlersBackfillPage("", true), `{"handlers":{"$exists":false}}`},
		{"handlers backfill: next page", handlersBackfillPage("e9", false), `{"_id":{"$gt":"e9"},"handlers":{"$exists":false}}`},
		{"handlers of events", handlersOfEventsPipeline([]string{"e1", "e2"}),
			`[{"$match":{"eventId":{"$in":["e1","e2"]}}},{"$group":{"_id":"$eventId","handlers":{"$addToSet":"$handler"}}}]`},
	}
	for _, tt := range tests {
		if got := extJSON(t, tt.got); got != tt.want {
			t.Errorf("%s:\n got %s\nwant %s", tt.name, got, tt.want)
		}
	}
}

func TestLaneBackfillModels(t *testing.T) {
	t.Parallel()
	rows := []laneBackfillRow{{ID: testID1, EventID: "e1", Key: "k"}, {ID: testID2, EventID: "e2"}}
	models := laneBackfillModels(rows)
	if len(models) != 2 {
		t.Fatalf("%d models", len(models))
	}
	for i, r := range rows {
		u := models[i].(*mongo.UpdateOneModel)
		if u.Upsert != nil && *u.Upsert {
			t.Fatal("a backfill must not upsert")
		}
		wantFilter := `{"_id":` + extJSON(t, r.ID) + `,"laneId":{"$exists":false}}`
		lane := driver.LaneOf(r.Key, r.EventID)
		wantUpdate := `[{"$set":{"laneId":` + itoa(lane) + `,"claims":0,"suspect":{"$ifNull":["$suspect",false]},"queue":{"$literal":"ready"}}}]`
		if got := extJSON(t, u.Filter); got != wantFilter {
			t.Errorf("row %d filter %s, want %s", i, got, wantFilter)
		}
		if got := extJSON(t, u.Update); got != wantUpdate {
			t.Errorf("row %d update %s, want %s", i, got, wantUpdate)
		}
	}
	// The key decides when there is one; the event id otherwise.
	if driver.LaneOf("k", "e1") != driver.LaneOf("k", "other") {
		t.Fatal("the lane of a keyed delivery depends on its event id")
	}
}

func TestHandlersBackfillModels(t *testing.T) {
	t.Parallel()
	models := handlersBackfillModels([]string{"e1", "e2"}, map[string][]string{"e1": {"h2", "h1"}})
	want := []struct{ filter, update string }{
		{`{"_id":"e1","handlers":{"$exists":false}}`, `{"$set":{"handlers":["h1","h2"]}}`},
		{`{"_id":"e2","handlers":{"$exists":false}}`, `{"$set":{"handlers":[]}}`},
	}
	for i, w := range want {
		u := models[i].(*mongo.UpdateOneModel)
		if got := extJSON(t, u.Filter); got != w.filter {
			t.Errorf("event %d filter %s, want %s", i, got, w.filter)
		}
		if got := extJSON(t, u.Update); got != w.update {
			t.Errorf("event %d update %s, want %s (sorted; empty, not null)", i, got, w.update)
		}
	}
}

// The 0.1.0 fixture the upgrade test starts from parses, names exactly
// 0.1.0's seven indexes, and holds each status 0.1.0 stores, with and
// without lease fields.
func TestFixture010(t *testing.T) {
	t.Parallel()
	fx := loadFixture010(t)
	var names []string
	for _, ix := range fx.Indexes {
		names = append(names, dmap(ix)["name"].(string))
	}
	want := append(slices.Clone(obsoleteIndexes), indexEventHandler)
	slices.Sort(names)
	slices.Sort(want)
	if !slices.Equal(names, want) {
		t.Fatalf("fixture indexes %v, want 0.1.0's %v", names, want)
	}
	statuses := map[string]int{}
	leased := 0
	for _, d := range fx.Deliveries {
		m := dmap(d)
		statuses[m[fStatus].(string)]++
		if _, ok := m[fLeaseToken]; ok {
			leased++
		}
		if _, ok := m[fLaneID]; ok {
			t.Fatal("a 0.1.0 delivery has a laneId")
		}
	}
	for _, s := range []string{statusPending, statusProcessing, statusCompleted, statusDead} {
		if statuses[s] == 0 {
			t.Errorf("the fixture has no %s delivery", s)
		}
	}
	if leased == 0 {
		t.Error("the fixture has no delivery with lease fields")
	}
	for _, ev := range fx.Events {
		if _, ok := dmap(ev)[fHandlers]; ok {
			t.Fatal("a 0.1.0 event has handlers")
		}
	}
}

// dmap indexes a document's top-level fields by name.
func dmap(d bson.D) map[string]any {
	m := make(map[string]any, len(d))
	for _, e := range d {
		m[e.Key] = e.Value
	}
	return m
}
