// Package mongometrics reads what a window cost a MongoDB replica set:
// oplog entries and bytes, journal bytes and opcounters, from two
// snapshots around the window.
//
// Written against the MongoDB manual (serverStatus, the oplog) and not
// run: no MongoDB server is reachable where this harness was built, and
// the window runner does not drive MongoDB yet.
package mongometrics

import (
	"context"
	"fmt"
	"regexp"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/berkcansavur/relaybus/bench/result"
)

// Snapshot is a MongoDB server's cumulative counters at one instant.
type Snapshot struct {
	// OplogTs is the newest oplog entry's timestamp; entries after the
	// "before" one and up to the "after" one belong to the window.
	OplogTs bson.Timestamp
	// JournalBytes is serverStatus wiredTiger.log "log bytes written".
	JournalBytes int64
	// Ops is the sum of serverStatus opcounters (insert, query, update,
	// delete, getmore, command); Updates is opcounters.update.
	Ops, Updates int64
}

// ReadSnapshot reads the counters through client.
func ReadSnapshot(ctx context.Context, client *mongo.Client) (*Snapshot, error) {
	var status struct {
		Opcounters map[string]int64 `bson:"opcounters"`
		WiredTiger struct {
			Log map[string]any `bson:"log"`
		} `bson:"wiredTiger"`
	}
	if err := client.Database("admin").RunCommand(ctx, bson.D{{Key: "serverStatus", Value: 1}}).Decode(&status); err != nil {
		return nil, fmt.Errorf("mongometrics: serverStatus: %w", err)
	}
	s := &Snapshot{Updates: status.Opcounters["update"]}
	for _, k := range []string{"insert", "query", "update", "delete", "getmore", "command"} {
		s.Ops += status.Opcounters[k]
	}
	s.JournalBytes = toInt64(status.WiredTiger.Log["log bytes written"])
	var last struct {
		Ts bson.Timestamp `bson:"ts"`
	}
	err := client.Database("local").Collection("oplog.rs").FindOne(ctx, bson.D{},
		options.FindOne().SetSort(bson.D{{Key: "$natural", Value: -1}})).Decode(&last)
	if err != nil {
		return nil, fmt.Errorf("mongometrics: reading the oplog (a replica set is required): %w", err)
	}
	s.OplogTs = last.Ts
	return s, nil
}

// Oplog sums the entries and BSON bytes of the oplog between two
// snapshots for one database's namespaces, excluding no-ops (op "n": the
// periodic no-op writes of an idle primary).
func Oplog(ctx context.Context, client *mongo.Client, db string, before, after *Snapshot) (entries, bytes int64, err error) {
	pipeline := mongo.Pipeline{
		{{Key: "$match", Value: bson.D{
			{Key: "ts", Value: bson.D{{Key: "$gt", Value: before.OplogTs}, {Key: "$lte", Value: after.OplogTs}}},
			{Key: "op", Value: bson.D{{Key: "$ne", Value: "n"}}},
			// Transactions are one applyOps command entry in admin.$cmd;
			// count those too, as the store commits in transactions.
			{Key: "ns", Value: bson.D{{Key: "$regex", Value: "^(" + regexp.QuoteMeta(db) + `\.|admin\.\$cmd$)`}}},
		}}},
		{{Key: "$group", Value: bson.D{{Key: "_id", Value: nil},
			{Key: "entries", Value: bson.D{{Key: "$sum", Value: 1}}},
			{Key: "bytes", Value: bson.D{{Key: "$sum", Value: bson.D{{Key: "$bsonSize", Value: "$$ROOT"}}}}}}}},
	}
	cur, err := client.Database("local").Collection("oplog.rs").Aggregate(ctx, pipeline)
	if err != nil {
		return 0, 0, fmt.Errorf("mongometrics: summing the oplog: %w", err)
	}
	defer cur.Close(ctx)
	var res struct {
		Entries int64 `bson:"entries"`
		Bytes   int64 `bson:"bytes"`
	}
	if cur.Next(ctx) {
		if err := cur.Decode(&res); err != nil {
			return 0, 0, fmt.Errorf("mongometrics: summing the oplog: %w", err)
		}
	}
	return res.Entries, res.Bytes, cur.Err()
}

// WindowMetrics turns two snapshots and the oplog sums into
// per-delivery metrics.
func WindowMetrics(m map[string]float64, before, after *Snapshot, oplogEntries, oplogBytes int64, units float64, perEvent bool) {
	if units <= 0 {
		return
	}
	if perEvent {
		m[result.MetricOplogBytesPerEvent] = float64(oplogBytes) / units
		return
	}
	m[result.MetricOplogBytesPerDelivery] = float64(oplogBytes) / units
	m[result.MetricOplogEntriesPerDelivery] = float64(oplogEntries) / units
	m[result.MetricJournalBytesPerDelivery] = float64(after.JournalBytes-before.JournalBytes) / units
	m[result.MetricOpsPerDelivery] = float64(after.Ops-before.Ops) / units
	m[result.MetricMongoUpdatesPerDelivery] = float64(after.Updates-before.Updates) / units
}

func toInt64(v any) int64 {
	switch n := v.(type) {
	case int32:
		return int64(n)
	case int64:
		return n
	case float64:
		return int64(n)
	}
	return 0
}
