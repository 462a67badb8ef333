package mongo

import (
	"strings"
	"testing"
	"time"

	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// extJSON renders a filter, update or pipeline as relaxed Extended JSON,
// the form MongoDB's documentation uses, so expectations read like the
// manual.
func extJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := bson.MarshalExtJSON(bson.D{{Key: "v", Value: v}}, false, false)
	if err != nil {
		t.Fatalf("marshal %v: %v", v, err)
	}
	s := string(b)
	return s[len(`{"v":`) : len(s)-1]
}

const (
	nowJSON = `{"$date":"2031-01-01T12:00:00Z"}`
	id1JSON = `{"$oid":"65f000000000000000000001"}`
	id2JSON = `{"$oid":"65f000000000000000000002"}`
)

var (
	testNow = time.Date(2031, 1, 1, 12, 0, 0, 0, time.UTC)
	testID1 = mustOID("65f000000000000000000001")
	testID2 = mustOID("65f000000000000000000002")
)

func mustOID(hex string) bson.ObjectID {
	id, err := bson.ObjectIDFromHex(hex)
	if err != nil {
		panic(err)
	}
	return id
}

func TestDeliveryFilters(t *testing.T) {
	t.Parallel()
	ref := leaseRef{id: testID1, tok: driver.LaneToken{Lane: 7, Epoch: 3, Claims: 2}}
	tests := []struct {
		name string
		got  any
		want string
	}{
		{"candidates: ready, held lanes, pending, due, handlers, not in flight",
			candidateFilter([]int32{1, 2}, []string{"h1"}, testNow, []bson.ObjectID{testID1}),
			`{"queue":"ready","laneId":{"$in":[1,2]},"status":"pending","dueAt":{"$lte":` + nowJSON + `},"handler":{"$in":["h1"]},"_id":{"$nin":[` + id1JSON + `]}}`},
		{"candidates: nothing to leave out, no $nin",
			candidateFilter([]int32{1}, []string{"h1"}, testNow, nil),
			`{"queue":"ready","laneId":{"$in":[1]},"status":"pending","dueAt":{"$lte":` + nowJSON + `},"handler":{"$in":["h1"]}}`},
		{"candidate order", candidateSort, `{"dueAt":1,"_id":1}`},
		{"probe of free lanes", probeFilter([]int32{3}, []string{"h1"}, testNow),
			`{"queue":"ready","laneId":{"$in":[3]},"status":"pending","dueAt":{"$lte":` + nowJSON + `},"handler":{"$in":["h1"]}}`},
		{"a key's pending deliveries", keyHeadFilter("h1", "k"), `{"handler":"h1","key":"k","status":"pending"}`},
		{"a key's head: lowest sequence", keyHeadSort, `{"sequence":1}`},
		{"predecessors: one $or branch per head, grouped by key",
			predecessorPipeline([]keyHead{{"h1", "k", 4}, {"h2", "k2", 9}}),
			`[{"$match":{"$or":[{"handler":"h1","key":"k","sequence":{"$lt":4},"status":"pending"},{"handler":"h2","key":"k2","sequence":{"$lt":9},"status":"pending"}]}},{"$group":{"_id":{"h":"$handler","k":"$key"}}}]`},
		{"picks: still pending", picksFilter([]bson.ObjectID{testID1}), `{"_id":{"$in":[` + id1JSON + `]},"status":"pending"}`},
		{"charge: lost ids of the lane, still pending", chargeFilter([]bson.ObjectID{testID1}, 7),
			`{"_id":{"$in":[` + id1JSON + `]},"laneId":7,"status":"pending"}`},
		{"charge: an attempt, a claim, suspect, dead when the budget is spent and it was a suspect already",
			chargePipeline(testNow),
			`[{"$set":{"attempts":{"$add":["$attempts",1]},"claims":{"$add":["$claims",1]},"suspect":true,` +
				`"status":{"$cond":[{"$and":[{"$eq":["$suspect",true]},{"$gte":[{"$add":["$attempts",1]},"$maxAttempts"]}]},{"$literal":"dead"},"$status"]},` +
				`"lastError":{"$cond":[{"$and":[{"$eq":["$suspect",true]},{"$gte":[{"$add":["$attempts",1]},"$maxAttempts"]}]},{"$literal":"lease expired after the final attempt"},"$lastError"]},` +
				`"updatedAt":` + nowJSON + `}}]`},
		{"fence on the delivery: lane, claims, pending", fencedDeliveryFilter(ref),
			`{"_id":` + id1JSON + `,"laneId":7,"claims":2,"status":"pending"}`},
		{"reschedule: attempt and claim counted, due later, not suspect",
			rescheduleUpdate("boom", testNow.Add(time.Second), testNow),
			`{"$inc":{"attempts":1,"claims":1},"$set":{"dueAt":{"$date":"2031-01-01T12:00:01Z"},"lastError":"boom","suspect":false,"updatedAt":` + nowJSON + `}}`},
		{"bury: attempt and claim counted, dead", buryUpdate("boom", testNow),
			`{"$inc":{"attempts":1,"claims":1},"$set":{"status":"dead","lastError":"boom","suspect":false,"updatedAt":` + nowJSON + `}}`},
		{"release: only the claim ends", releaseUpdate(testNow, time.Time{}),
			`{"$inc":{"claims":1},"$set":{"updatedAt":` + nowJSON + `}}`},
		{"release to fill a batch: due no sooner than given", releaseUpdate(testNow, testNow.Add(time.Second)),
			`{"$inc":{"claims":1},"$set":{"updatedAt":` + nowJSON + `},"$max":{"dueAt":{"$date":"2031-01-01T12:00:01Z"}}}`},
		{"relinquish: what still exists and is pending", releaseManyFilter([]bson.ObjectID{testID1}),
			`{"_id":{"$in":[` + id1JSON + `]},"status":"pending"}`},
		{"requeue filter: dead only", requeueFilter(testID1), `{"_id":` + id1JSON + `,"status":"dead"}`},
		{"requeue: pending now, ready, fresh budget, old tokens stale", requeueUpdate(testNow),
			`{"$set":{"status":"pending","attempts":0,"dueAt":` + nowJSON + `,"suspect":false,"queue":"ready","updatedAt":` + nowJSON + `},"$inc":{"claims":1}}`},
		{"park: the ready backlog behind the head", parkFilter(7, "h1", "k", 4),
			`{"laneId":7,"handler":"h1","key":"k","status":"pending","queue":"ready","sequence":{"$gt":4}}`},
		{"park update", parkUpdate, `{"$set":{"queue":"parked"}}`},
		{"oldest due, not in flight", oldestDueFilter(testNow, []bson.ObjectID{testID1}),
			`{"status":"pending","dueAt":{"$lte":` + nowJSON + `},"_id":{"$nin":[` + id1JSON + `]}}`},
		{"oldest due per handler, not in flight", oldestDuePipeline(testNow, []bson.ObjectID{testID1}),
			`[{"$match":{"status":"pending","dueAt":{"$lte":` + nowJSON + `},"_id":{"$nin":[` + id1JSON + `]}}},{"$group":{"_id":"$handler","due":{"$min":"$dueAt"}}}]`},
		{"statistics: history documents have no status and count as completed", statisticsPipeline(),
			`[{"$group":{"_id":{"h":"$handler","s":{"$ifNull":["$status","completed"]}},"n":{"$sum":1}}}]`},
		{"key counter", keyCounterUpdate(3), `{"$inc":{"seq":3}}`},
		{"more handlers on an event", addHandlersUpdate([]string{"h1", "h2"}), `{"$addToSet":{"handlers":{"$each":["h1","h2"]}}}`},
		{"purge 0.1.0 completed", purgeCompletedFilter(testNow), `{"status":"completed","completedAt":{"$lt":` + nowJSON + `}}`},
		{"purge history", purgeHistoryFilter(testNow), `{"completedAt":{"$lt":` + nowJSON + `}}`},
		{"purge dead", purgeDeadFilter(testNow), `{"status":"dead","updatedAt":{"$lt":` + nowJSON + `}}`},
		{"purge delete repeats the condition", purgeDeleteFilter(bson.A{testID1}, purgeDeadFilter(testNow)),
			`{"_id":{"$in":[` + id1JSON + `]},"status":"dead","updatedAt":{"$lt":` + nowJSON + `}}`},
		{"sweep: first page", sweepEventsFilter(testNow, nil, ""), `{"createdAt":{"$lt":` + nowJSON + `}}`},
		{"sweep: after (createdAt, _id)", sweepEventsFilter(testNow, &testNow, "e1"),
			`{"createdAt":{"$lt":` + nowJSON + `},"$or":[{"createdAt":{"$gt":` + nowJSON + `}},{"createdAt":` + nowJSON + `,"_id":{"$gt":"e1"}}]}`},
		{"list: every filter and the cursor",
			listFilter(&driver.DeliveryListParams{Status: relaytype.StatusDead, Handler: "h", Key: "k", EventID: "e"}, &testID1),
			`{"handler":"h","key":"k","eventId":"e","_id":{"$gt":` + id1JSON + `}}`},
		{"list: no filter", listFilter(&driver.DeliveryListParams{}, nil), `{}`},
	}
	for _, tt := range tests {
		if got := extJSON(t, tt.got); got != tt.want {
			t.Errorf("%s:\n got %s\nwant %s", tt.name, got, tt.want)
		}
	}
}

func TestLaneFilters(t *testing.T) {
	t.Parallel()
	ref := leaseRef{id: testID1, tok: driver.LaneToken{Lane: 7, Epoch: 3, Claims: 2}}
	key := parkedKey{Handler: "h1", Key: "k"}
	inFlightMinus := func(dropJSON string) string {
		return `{"$filter":{"input":{"$ifNull":["$inFlight",[]]},"as":"v","cond":{"$not":[{"$in":["$$v",{"$literal":` + dropJSON + `}]}]}}}`
	}
	parkedMinus := func(dropJSON string) string {
		return `{"$filter":{"input":{"$ifNull":["$parkedKeys",[]]},"as":"v","cond":{"$not":[{"$in":["$$v",{"$literal":` + dropJSON + `}]}]}}}`
	}
	tests := []struct {
		name string
		got  any
		want string
	}{
		{"seed: only when the upsert inserts", seedLaneUpdate,
			`{"$setOnInsert":{"epoch":0,"owner":null,"holder":null,"leaseExpiresAt":null,"inFlight":[],"lost":[],"parkedKeys":[]}}`},
		{"held: owner, holder, live lease", heldLanesFilter("o", "hid", testNow),
			`{"owner":"o","holder":"hid","leaseExpiresAt":{"$gt":` + nowJSON + `}}`},
		{"free or expired", freeOrExpired(testNow),
			`{"$or":[{"owner":null},{"leaseExpiresAt":{"$lte":` + nowJSON + `}}]}`},
		{"take: still free or expired, at the epoch read", takeLaneFilter(7, 3, testNow),
			`{"_id":7,"epoch":3,"$or":[{"owner":null},{"leaseExpiresAt":{"$lte":` + nowJSON + `}}]}`},
		{"take: epoch + 1, new lease, inFlight moved into lost in the same write",
			takeLanePipeline("$o", "hid", testNow.Add(time.Minute)),
			`[{"$set":{"epoch":{"$add":["$epoch",1]},"owner":{"$literal":"$o"},"holder":{"$literal":"hid"},` +
				`"leaseExpiresAt":{"$date":"2031-01-01T12:01:00Z"},` +
				`"lost":{"$concatArrays":[{"$ifNull":["$lost",[]]},{"$ifNull":["$inFlight",[]]}]},"inFlight":{"$literal":[]}}}]`},
		{"this holder at this epoch", laneOfHolderFilter(7, 3, "hid"), `{"_id":7,"epoch":3,"holder":"hid"}`},
		{"charged ids leave lost", clearLostUpdate([]bson.ObjectID{testID1}), `{"$pullAll":{"lost":[` + id1JSON + `]}}`},
		{"record: owner, holder, epoch read", recordLaneFilter(7, 3, "o", "hid"),
			`{"_id":7,"epoch":3,"owner":"o","holder":"hid"}`},
		{"record: drop gone ids, add picks, expiry at least, drained keys out",
			recordLanePipeline([]bson.ObjectID{testID1}, []bson.ObjectID{testID2}, []parkedKey{key}, testNow),
			`[{"$set":{"inFlight":{"$concatArrays":[` + inFlightMinus(`[`+id1JSON+`]`) + `,{"$literal":[` + id2JSON + `]}]},` +
				`"leaseExpiresAt":{"$max":["$leaseExpiresAt",` + nowJSON + `]},` +
				`"parkedKeys":` + parkedMinus(`[{"h":"h1","k":"k"}]`) + `}}]`},
		{"record: nil lists become empty arrays, never null",
			recordLanePipeline(nil, nil, nil, testNow),
			`[{"$set":{"inFlight":{"$concatArrays":[` + inFlightMinus(`[]`) + `,{"$literal":[]}]},` +
				`"leaseExpiresAt":{"$max":["$leaseExpiresAt",` + nowJSON + `]},"parkedKeys":` + parkedMinus(`[]`) + `}}]`},
		{"hand back: held, nothing lost, everything listed is gone",
			handBackFilter(7, 3, "o", "hid", []bson.ObjectID{testID1}),
			`{"_id":7,"epoch":3,"owner":"o","holder":"hid","lost":{"$size":0},"$expr":{"$setIsSubset":[{"$ifNull":["$inFlight",[]]},{"$literal":[` + id1JSON + `]}]}}`},
		{"hand back: no owner, holder or expiry; epoch kept", handBackPipeline(nil),
			`[{"$set":{"owner":null,"holder":null,"leaseExpiresAt":null,"inFlight":{"$literal":[]},"parkedKeys":` + parkedMinus(`[]`) + `}}]`},
		{"give back", giveBackUpdate([]bson.ObjectID{testID1}), `{"$pullAll":{"inFlight":[` + id1JSON + `]}}`},
		{"renew: owner, holder, each lane at its epoch", renewFilter("o", "hid", []laneEpoch{{7, 3}, {8, 1}}),
			`{"owner":"o","holder":"hid","$or":[{"_id":7,"epoch":3},{"_id":8,"epoch":1}]}`},
		{"renew: never shorten", renewUpdate(testNow), `{"$max":{"leaseExpiresAt":` + nowJSON + `}}`},
		{"lanes by number", lanesFilter([]int32{7, 8}), `{"_id":{"$in":[7,8]}}`},
		{"fence read: only the ids asked about", fenceProjection([]bson.ObjectID{testID1}),
			`{"epoch":1,"owner":1,"holder":1,"leaseExpiresAt":1,"inFlight":{"$filter":{"input":{"$ifNull":["$inFlight",[]]},"as":"v","cond":{"$in":["$$v",{"$literal":[` + id1JSON + `]}]}}}}`},
		{"fence on the lane: epoch, still in flight", fenceLaneFilter(ref), `{"_id":7,"epoch":3,"inFlight":` + id1JSON + `}`},
		{"end a claim in its lane", pullInFlightUpdate(testID1), `{"$pull":{"inFlight":` + id1JSON + `}}`},
		{"owned, live or expired", ownedLanesFilter("o", "hid"), `{"owner":"o","holder":"hid"}`},
		{"relinquish: lost and parked keys stay", relinquishLaneUpdate,
			`{"$set":{"owner":null,"holder":null,"leaseExpiresAt":null,"inFlight":[]}}`},
		{"park in the lane: held, key listed or room for it", parkLaneFilter(7, 3, "hid", key),
			`{"_id":7,"epoch":3,"holder":"hid","$or":[{"parkedKeys":{"h":"h1","k":"k"}},{"parkedKeys.15":{"$exists":false}}]}`},
		{"list the key", parkLaneUpdate(key), `{"$addToSet":{"parkedKeys":{"h":"h1","k":"k"}}}`},
		{"lanes that have an owner", ownedFilter, `{"owner":{"$ne":null}}`},
	}
	for _, tt := range tests {
		if got := extJSON(t, tt.got); got != tt.want {
			t.Errorf("%s:\n got %s\nwant %s", tt.name, got, tt.want)
		}
	}
}

// A string from a caller reaches an update pipeline only inside $literal:
// a pipeline reads "$x" as a field path, so an owner named "$epoch" must
// not become the lane's epoch.
func TestPipelinesQuoteCallerStrings(t *testing.T) {
	t.Parallel()
	got := extJSON(t, takeLanePipeline("$epoch", "$$ROOT", testNow))
	for _, want := range []string{`"owner":{"$literal":"$epoch"}`, `"holder":{"$literal":"$$ROOT"}`} {
		if !strings.Contains(got, want) {
			t.Errorf("take pipeline %s does not contain %s", got, want)
		}
	}
	// The literal texts of the store's own pipelines do not start with "$"
	// either (they are quoted all the same).
	for _, s := range []string{takeoverBuryError, statusDead, statusPending} {
		if strings.HasPrefix(s, "$") {
			t.Errorf("%q would read as a field path", s)
		}
	}
}

// Every stage of every update pipeline is one MongoDB accepts in an
// update ($set, $unset), and each stage document has exactly one key.
func TestUpdatePipelineStages(t *testing.T) {
	t.Parallel()
	pipelines := map[string]bson.A{
		"charge":     chargePipeline(testNow),
		"take":       takeLanePipeline("o", "h", testNow),
		"record":     recordLanePipeline(nil, nil, nil, testNow),
		"hand back":  handBackPipeline(nil),
		"up pending": upgradePendingPipeline(),
	}
	allowed := map[string]bool{"$set": true, "$addFields": true, "$unset": true, "$project": true, "$replaceRoot": true, "$replaceWith": true}
	for name, p := range pipelines {
		for i, stage := range p {
			d, ok := stage.(bson.D)
			if !ok || len(d) != 1 || !allowed[d[0].Key] {
				t.Errorf("%s: stage %d is %v, not a single update stage", name, i, stage)
			}
		}
	}
}

func TestErrorTextIsTruncated(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", driver.MaxErrorBytes+100)
	for name, update := range map[string]bson.D{
		"reschedule": rescheduleUpdate(long, testNow, testNow),
		"bury":       buryUpdate(long, testNow),
	} {
		var got string
		for _, op := range update {
			if op.Key != "$set" {
				continue
			}
			for _, e := range op.Value.(bson.D) {
				if e.Key == fLastError {
					got = e.Value.(string)
				}
			}
		}
		if len(got) != driver.MaxErrorBytes {
			t.Errorf("%s stores %d bytes of error text, want %d", name, len(got), driver.MaxErrorBytes)
		}
	}
}

// Builders that append to a shared prefix must not share its storage.
func TestFiltersDoNotAlias(t *testing.T) {
	t.Parallel()
	a := handBackFilter(1, 1, "o", "h", []bson.ObjectID{testID1})
	b := handBackFilter(2, 2, "p", "i", []bson.ObjectID{testID2})
	if extJSON(t, a) == extJSON(t, b) {
		t.Fatal("two hand-back filters share storage")
	}
	c := parkLaneFilter(1, 1, "h", parkedKey{"a", "b"})
	d := parkLaneFilter(2, 1, "h", parkedKey{"c", "d"})
	if extJSON(t, c) == extJSON(t, d) {
		t.Fatal("two park filters share storage")
	}
}

// A nil slice encodes as BSON null, which $in, $setIsSubset and
// $concatArrays refuse: the builders send empty arrays instead.
func TestNonNil(t *testing.T) {
	t.Parallel()
	if nonNil(nil) == nil || len(nonNil(nil)) != 0 || nonNilKeys(nil) == nil {
		t.Fatal("nonNil(nil) is nil")
	}
	ids := []bson.ObjectID{testID1}
	if &nonNil(ids)[0] != &ids[0] {
		t.Fatal("nonNil copied a non-nil slice")
	}
}
