package mongo

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

// TestWakePipeline: the change stream passes inserts of this store's
// deliveries and hand-backs of its lanes, and projects the documents
// away. Without a server: the stream itself was never run here.
func TestWakePipeline(t *testing.T) {
	t.Parallel()
	s := offlineInternalStore(t)
	b, err := bson.MarshalExtJSON(bson.D{{Key: "p", Value: s.wakePipeline()}}, false, false)
	if err != nil {
		t.Fatal(err)
	}
	got := string(b)
	for _, want := range []string{
		`{"ns.coll":"relaybus_deliveries","operationType":"insert"}`,
		`{"ns.coll":"relaybus_lanes","operationType":"update","updateDescription.updatedFields.owner":{"$type":"null"}}`,
		`{"$project":{"_id":1,"operationType":1,"ns":1}}`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("pipeline %s lacks %s", got, want)
		}
	}
}

// TestWakeListenOffline: bad params are ErrInvalid; a server that cannot
// be reached ends the listening with an error the Bus retries (not
// ErrWakeUnavailable, which would stop it for good), without calling
// Listening.
func TestWakeListenOffline(t *testing.T) {
	t.Parallel()
	s := offlineInternalStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.WakeListen(ctx, nil); !errors.Is(err, relaytype.ErrInvalid) {
		t.Fatalf("nil params: %v", err)
	}
	listening := false
	err := s.WakeListen(ctx, &driver.WakeListenParams{Listening: func() { listening = true }, Wake: func() {}})
	if err == nil || errors.Is(err, driver.ErrWakeUnavailable) || ctx.Err() != nil {
		t.Fatalf("offline: %v (ctx %v)", err, ctx.Err())
	}
	if listening {
		t.Fatal("Listening called without a stream")
	}
	if err := s.WakeSend(ctx, &driver.WakeSendParams{}); err != nil {
		t.Fatal(err)
	}
}
