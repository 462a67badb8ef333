package mongo

import (
	"context"
	"errors"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/berkcansavur/relaybus/relaybus/driver"
)

// Wake-ups (driver.Waker) from a change stream. Written against the
// driver's and the server's documentation and NOT RUN: there is no
// MongoDB server where this was written (as the rest of this store's
// server paths, see the package documentation).
//
// A listener opens a change stream on the store's database that passes
// two kinds of change, and nothing of the documents but their ids (a
// $project, so that a publish of many deliveries sends the listener a
// small event each, not the documents):
//   - an insert into the deliveries collection: a publish (or a republish
//     that added handlers) committed. A change stream shows a
//     transaction's writes only once it has committed, with majority
//     read concern, so a claim the wake-up causes can see the delivery.
//   - an update of the lanes collection that sets a lane's owner to null:
//     a process handed the lane back (at shutdown, or a drained lane),
//     so another may take it now.
//
// Each change is one wake-up (the Bus coalesces them: it signals a
// channel of one). Listening is called once the stream is open: the
// server starts it at the moment of the aggregate's answer, so a change
// committed after that reaches the listener, and one before it is the
// claim's to find (the Bus claims at once after Listening). A change
// stream needs a replica set or a sharded cluster, as this store's
// transactions already do; on a standalone server the stream is refused
// (code 40573) and WakeListen returns ErrWakeUnavailable, after which the
// Bus polls. Any other error ends the listening, and the Bus listens
// again after a backoff (a new stream: what happened in between is the
// claim's to find, as after any reconnect).
//
// WakeSend writes nothing: what the Bus announces with it (lanes handed
// back at shutdown) is in the change stream already, as the lanes'
// updates.

var _ driver.Waker = (*Store)(nil)

// codeChangeStreamUnsupported: "The $changeStream stage is only supported
// on replica sets" (a standalone server).
const codeChangeStreamUnsupported = 40573

// wakePipeline is the change stream's pipeline for the store's
// collections: inserts of deliveries and lane hand-backs, their ids only.
func (s *Store) wakePipeline() mongo.Pipeline {
	match := bson.D{{Key: "$or", Value: bson.A{
		bson.D{{Key: "ns.coll", Value: s.deliveries.Name()}, {Key: "operationType", Value: "insert"}},
		bson.D{{Key: "ns.coll", Value: s.lanes.Name()}, {Key: "operationType", Value: "update"},
			{Key: "updateDescription.updatedFields." + fOwner, Value: bson.D{{Key: "$type", Value: "null"}}}},
	}}}
	// The resume token (_id) must stay; operationType and ns are kept for
	// a reader of the stream, nothing of the documents.
	project := bson.D{{Key: "_id", Value: 1}, {Key: "operationType", Value: 1}, {Key: "ns", Value: 1}}
	return mongo.Pipeline{{{Key: "$match", Value: match}}, {{Key: "$project", Value: project}}}
}

// WakeListen listens for wake-ups on a change stream (see above) until ctx
// is done or the stream fails.
func (s *Store) WakeListen(ctx context.Context, params *driver.WakeListenParams) error {
	if err := params.Validate(); err != nil {
		return err
	}
	cs, err := s.db.Watch(ctx, s.wakePipeline())
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if hasCode(err, codeChangeStreamUnsupported) {
			return fmt.Errorf("relaybus/mongo: wake-ups: change streams need a replica set: %w: %w", driver.ErrWakeUnavailable, err)
		}
		return fmt.Errorf("relaybus/mongo: wake-ups: open the change stream: %w", err)
	}
	defer func() { _ = cs.Close(context.WithoutCancel(ctx)) }()
	if params.Listening != nil {
		params.Listening()
	}
	for cs.Next(ctx) {
		params.Wake()
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err := cs.Err(); err != nil {
		return fmt.Errorf("relaybus/mongo: wake-ups: the change stream ended: %w", err)
	}
	return errors.New("relaybus/mongo: wake-ups: the change stream ended")
}

// WakeSend announces nothing of its own: the lane hand-backs it follows
// are in the change stream as the lanes' updates.
func (s *Store) WakeSend(_ context.Context, params *driver.WakeSendParams) error {
	return params.Validate()
}
