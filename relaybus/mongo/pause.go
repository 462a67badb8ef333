package mongo

import (
	"context"
	"errors"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

// pausedDoc is a document of the paused handlers' collection: one per
// paused handler, its name the _id.
type pausedDoc struct {
	Handler  string    `bson:"_id"`
	Reason   string    `bson:"reason"`
	PausedAt time.Time `bson:"pausedAt"`
}

// HandlerPause records a paused handler: an upsert that sets its fields
// only on insert, so a second pause keeps the first's time and reason.
func (s *Store) HandlerPause(ctx context.Context, params *driver.HandlerPauseParams) error {
	if err := params.Validate(); err != nil {
		return err
	}
	_, err := s.paused.UpdateOne(ctx, bson.D{{Key: "_id", Value: params.Handler}},
		bson.D{{Key: "$setOnInsert", Value: bson.D{{Key: "reason", Value: params.Reason}, {Key: "pausedAt", Value: bsonTime(params.Now)}}}},
		options.UpdateOne().SetUpsert(true))
	if err != nil {
		return errorFrom("pause", err)
	}
	return nil
}

// HandlerResume deletes a handler's pause; it reports whether there was
// one.
func (s *Store) HandlerResume(ctx context.Context, params *driver.HandlerResumeParams) (bool, error) {
	if err := params.Validate(); err != nil {
		return false, err
	}
	res, err := s.paused.DeleteOne(ctx, bson.D{{Key: "_id", Value: params.Handler}})
	if err != nil {
		return false, errorFrom("resume", err)
	}
	return res.DeletedCount == 1, nil
}

// HandlersPaused reads the paused handlers, in name order.
func (s *Store) HandlersPaused(ctx context.Context, params *driver.HandlersPausedParams) ([]relaytype.PausedHandler, error) {
	if err := params.Validate(); err != nil {
		return nil, err
	}
	cur, err := s.paused.Find(ctx, bson.D{}, options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}))
	if err != nil {
		return nil, errorFrom("handlers paused", err)
	}
	var docs []pausedDoc
	if err := cur.All(ctx, &docs); err != nil && !errors.Is(err, mongo.ErrNoDocuments) {
		return nil, errorFrom("handlers paused", err)
	}
	out := make([]relaytype.PausedHandler, len(docs))
	for i, d := range docs {
		out[i] = relaytype.PausedHandler{Handler: d.Handler, Reason: d.Reason, PausedAt: d.PausedAt.UTC()}
	}
	return out, nil
}
