package mongo

import (
	"strings"
	"testing"
	"time"

	"github.com/berkcansavur/relaybus/relaybus"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// extJSON renders a filter or update as relaxed Extended JSON, the form
// MongoDB's documentation uses, so expectations read like the manual.
func extJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := bson.MarshalExtJSON(v, false, false)
	if err != nil {
		t.Fatalf("marshal %v: %v", v, err)
	}
	return string(b)
}

func TestFiltersAndUpdates(t *testing.T) {
	t.Parallel()
	now := time.Date(2031, 1, 1, 12, 0, 0, 0, time.UTC)
	id, err := bson.ObjectIDFromHex("65f000000000000000000001")
	if err != nil {
		t.Fatal(err)
	}
	const (
		nowJSON   = `{"$date":"2031-01-01T12:00:00Z"}`
		idJSON    = `{"$oid":"65f000000000000000000001"}`
		unsetJSON = `"$unset":{"leaseOwner":"","leaseToken":"","leaseExpiresAt":""}`
	)
	tests := []struct {
		name string
		got  any
		want string
	}{
		{"candidates: handlers, due pending or expired processing", candidateFilter([]string{"h1", "h2"}, now),
			`{"handler":{"$in":["h1","h2"]},"$or":[{"status":"pending","dueAt":{"$lte":` + nowJSON + `}},{"status":"processing","leaseExpiresAt":{"$lte":` + nowJSON + `}}]}`},
		{"claim: still claimable, takeover only with budget left", claimFilter(id, now),
			`{"_id":` + idJSON + `,"$or":[{"status":"pending","dueAt":{"$lte":` + nowJSON + `}},{"status":"processing","leaseExpiresAt":{"$lte":` + nowJSON + `},"$expr":{"$lt":["$attempts","$maxAttempts"]}}]}`},
		{"claim update: processing, attempt counted, new lease", claimUpdate("w1", "tok", now.Add(time.Minute), now),
			`{"$set":{"status":"processing","leaseOwner":"w1","leaseToken":"tok","leaseExpiresAt":{"$date":"2031-01-01T12:01:00Z"},"updatedAt":` + nowJSON + `},"$inc":{"attempts":1}}`},
		{"takeover burial: the lease seen, expired, budget spent", takeoverBuryFilter(id, "tok", now),
			`{"_id":` + idJSON + `,"status":"processing","leaseToken":"tok","leaseExpiresAt":{"$lte":` + nowJSON + `},"$expr":{"$gte":["$attempts","$maxAttempts"]}}`},
		{"predecessor: unfinished, same handler and key, lower sequence", predecessorFilter("h1", "k", 3),
			`{"handler":"h1","key":"k","sequence":{"$lt":3},"status":{"$in":["pending","processing"]}}`},
		{"fenced: processing under the token", fencedFilter(id, "tok"),
			`{"_id":` + idJSON + `,"status":"processing","leaseToken":"tok"}`},
		{"extend: fenced and the owner", extendFilter(id, "tok", "w1"),
			`{"_id":` + idJSON + `,"status":"processing","leaseToken":"tok","leaseOwner":"w1"}`},
		{"extend update", extendUpdate(now.Add(time.Minute), now),
			`{"$set":{"leaseExpiresAt":{"$date":"2031-01-01T12:01:00Z"},"updatedAt":` + nowJSON + `}}`},
		{"complete: completed, lease removed", completeUpdate(now),
			`{"$set":{"status":"completed","completedAt":` + nowJSON + `,"updatedAt":` + nowJSON + `},` + unsetJSON + `}`},
		{"release: pending, attempt given back, due time kept", releaseUpdate(now),
			`{"$set":{"status":"pending","updatedAt":` + nowJSON + `},"$inc":{"attempts":-1},` + unsetJSON + `}`},
		{"reschedule: pending at the new time with the error", rescheduleUpdate("boom", now.Add(time.Second), now),
			`{"$set":{"status":"pending","dueAt":{"$date":"2031-01-01T12:00:01Z"},"lastError":"boom","updatedAt":` + nowJSON + `},` + unsetJSON + `}`},
		{"bury: dead with the error", buryUpdate("boom", now),
			`{"$set":{"status":"dead","lastError":"boom","updatedAt":` + nowJSON + `},` + unsetJSON + `}`},
		{"relinquish: what the owner holds", relinquishFilter("w1"), `{"status":"processing","leaseOwner":"w1"}`},
		{"requeue filter: dead only", requeueFilter(id), `{"_id":` + idJSON + `,"status":"dead"}`},
		{"requeue: pending now, fresh budget", requeueUpdate(now),
			`{"$set":{"status":"pending","attempts":0,"dueAt":` + nowJSON + `,"updatedAt":` + nowJSON + `}}`},
		{"list: every filter and the cursor", listFilter(&relaybus.DeliveryListParams{Status: relaybus.StatusDead, Handler: "h", Key: "k", EventID: "e"}, &id),
			`{"status":"dead","handler":"h","key":"k","eventId":"e","_id":{"$gt":` + idJSON + `}}`},
		{"list: no filter", listFilter(&relaybus.DeliveryListParams{}, nil), `{}`},
		{"purge completed", purgeCompletedFilter(now), `{"status":"completed","completedAt":{"$lt":` + nowJSON + `}}`},
		{"purge dead", purgeDeadFilter(now), `{"status":"dead","updatedAt":{"$lt":` + nowJSON + `}}`},
		{"purge delete repeats the condition", purgeDeleteFilter(bson.A{id}, purgeDeadFilter(now)),
			`{"_id":{"$in":[` + idJSON + `]},"status":"dead","updatedAt":{"$lt":` + nowJSON + `}}`},
		{"oldest due", oldestDueFilter(now), `{"status":"pending","dueAt":{"$lte":` + nowJSON + `}}`},
		{"statistics", bson.D{{Key: "pipeline", Value: statisticsPipeline()}},
			`{"pipeline":[{"$group":{"_id":{"h":"$handler","s":"$status"},"n":{"$sum":1}}}]}`},
		{"key counter", keyCounterUpdate(3), `{"$inc":{"seq":3}}`},
	}
	for _, tt := range tests {
		if got := extJSON(t, tt.got); got != tt.want {
			t.Errorf("%s:\n got %s\nwant %s", tt.name, got, tt.want)
		}
	}
}

func TestErrorTextIsTruncated(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", relaybus.MaxErrorBytes+100)
	now := time.Now()
	for name, update := range map[string]bson.D{
		"reschedule": rescheduleUpdate(long, now, now),
		"bury":       buryUpdate(long, now),
	} {
		set := update[0].Value.(bson.D)
		var got string
		for _, e := range set {
			if e.Key == fLastError {
				got = e.Value.(string)
			}
		}
		if len(got) != relaybus.MaxErrorBytes {
			t.Errorf("%s stores %d bytes of error text, want %d", name, len(got), relaybus.MaxErrorBytes)
		}
	}
}

func TestExtendFilterDoesNotAlias(t *testing.T) {
	t.Parallel()
	id := bson.NewObjectID()
	a := extendFilter(id, "t1", "w1")
	b := extendFilter(id, "t2", "w2")
	if extJSON(t, a) == extJSON(t, b) {
		t.Fatal("two extend filters share storage")
	}
}

func TestClaimScanLimit(t *testing.T) {
	t.Parallel()
	for limit, want := range map[int]int64{
		1:                      1*ClaimScanFactor + ClaimScanSlack,
		100:                    100*ClaimScanFactor + ClaimScanSlack,
		relaybus.MaxClaimLimit: MaxClaimScan,
	} {
		if got := claimScanLimit(limit); got != want {
			t.Errorf("claimScanLimit(%d) = %d, want %d", limit, got, want)
		}
	}
	if claimScanLimit(relaybus.MaxClaimLimit) < int64(relaybus.MaxClaimLimit) {
		t.Error("the scan bound is below the claim limit: a full claim could not be filled")
	}
}

func TestDeliveryIndexes(t *testing.T) {
	t.Parallel()
	idx := deliveryIndexes()
	if len(idx) != 7 {
		t.Fatalf("%d indexes, want 0.1.0's seven", len(idx))
	}
	names := map[string]bool{}
	for _, m := range idx {
		name := *indexOptions(t, m).Name
		if names[name] {
			t.Fatalf("index name %q used twice", name)
		}
		names[name] = true
	}
	unique := indexOptions(t, idx[3])
	if *unique.Name != indexEventHandler || unique.Unique == nil || !*unique.Unique {
		t.Errorf("(eventId, handler) is not unique: %+v", unique)
	}
	keyed := indexOptions(t, idx[2])
	if *keyed.Name != indexKeyOrder || extJSON(t, keyed.PartialFilterExpression) != `{"key":{"$exists":true}}` {
		t.Errorf("per-key index is not partial on keyed deliveries: %+v", keyed)
	}
}

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
