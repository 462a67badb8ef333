package batch

import (
	"context"
	"errors"
)

// Batcher batches one stream of inputs; up to MaxInFlight batches run at
// once, so batches may finish out of order. Build it with New.
type Batcher[In, Out any] struct {
	pk *PerKey[struct{}, In, Out]
}

// New starts a batcher. A batch closes when it holds cfg.MaxSize items,
// when the next item would take it over cfg.MaxWeight, or when its
// oldest item has waited cfg.Linger. fn must return one result per item,
// in order, or an error for the whole batch; it must not keep the items
// slice after it returns. Call Close to stop it.
func New[In, Out any](cfg Config[In], fn func(ctx context.Context, items []In) ([]Out, error)) (*Batcher[In, Out], error) {
	if fn == nil {
		return nil, errors.New("batch: nil batch function")
	}
	// One lane that may be taken MaxInFlight times at once: the per-key
	// machinery with the one-batch-per-key guard relaxed.
	pk, err := newPerKey(cfg, cfg.MaxInFlight, func(ctx context.Context, _ struct{}, items []In) ([]Out, error) {
		return fn(ctx, items)
	})
	if err != nil {
		return nil, err
	}
	return &Batcher[In, Out]{pk: pk}, nil
}

// Submit adds item to the stream and waits for its result; see
// PerKey.Submit for the errors.
func (b *Batcher[In, Out]) Submit(ctx context.Context, item In) (Out, error) {
	return b.pk.Submit(ctx, struct{}{}, item)
}

// Enqueue adds item to the stream and returns once it is admitted; its
// result is dropped. See PerKey.Enqueue.
func (b *Batcher[In, Out]) Enqueue(ctx context.Context, item In) error {
	return b.pk.Enqueue(ctx, struct{}{}, item)
}

// Close stops admission and waits for queued batches; see PerKey.Close.
func (b *Batcher[In, Out]) Close(ctx context.Context) error { return b.pk.Close(ctx) }

// Stats returns a snapshot of the batcher's state.
func (b *Batcher[In, Out]) Stats() Stats { return b.pk.Stats() }
