package batch

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
)

// seenItems is a batch function that records what it was given, and holds
// each batch until gate is closed (a nil gate holds nothing).
type seenItems struct {
	mu    sync.Mutex
	items []int
	gate  chan struct{}
}

func (s *seenItems) fn(_ context.Context, items []int) ([]int, error) {
	if s.gate != nil {
		<-s.gate
	}
	s.mu.Lock()
	s.items = append(s.items, items...)
	s.mu.Unlock()
	return items, nil
}

func (s *seenItems) sorted() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(slices.Values(s.items))
}

// TestBatcherEnqueue: Enqueue returns once an item is admitted, before its
// batch runs; the items are batched like submitted ones, and Close runs
// what is queued.
func TestBatcherEnqueue(t *testing.T) {
	t.Parallel()
	seen := &seenItems{gate: make(chan struct{})}
	b, err := New(testConfig(), seen.fn) // batches of 4, an hour's linger
	if err != nil {
		t.Fatal(err)
	}
	for i := range 6 {
		// Returns although the first batch is held at the gate: nothing
		// waits for a result.
		if err := b.Enqueue(context.Background(), i); err != nil {
			t.Fatalf("Enqueue(%d): %v", i, err)
		}
	}
	waitFor(t, "a batch in flight, 2 queued", func() bool {
		st := b.Stats()
		return st.InFlight == 1 && st.Queued == 2
	})
	close(seen.gate)
	closeOK(t, b) // runs the last two without waiting out the linger
	if got := seen.sorted(); !slices.Equal(got, []int{0, 1, 2, 3, 4, 5}) {
		t.Fatalf("batch function saw %v, want 0..5", got)
	}
	if err := b.Enqueue(context.Background(), 9); !errors.Is(err, ErrClosed) {
		t.Fatalf("Enqueue after Close: %v, want ErrClosed", err)
	}
}

// TestBatcherEnqueueNotAdmitted: an item that is refused or whose context
// ends while it waits for room is never given to the batch function.
func TestBatcherEnqueueNotAdmitted(t *testing.T) {
	t.Parallel()
	for _, policy := range []FullPolicy{Reject, Block} {
		t.Run(policy.String(), func(t *testing.T) {
			t.Parallel()
			cfg := testConfig()
			cfg.MaxQueued = 2
			cfg.WhenFull = policy
			seen := &seenItems{}
			b, err := New(cfg, seen.fn)
			if err != nil {
				t.Fatal(err)
			}
			for i := range 2 {
				if err := b.Enqueue(context.Background(), i); err != nil {
					t.Fatal(err)
				}
			}
			ctx, cancel := context.WithCancel(context.Background())
			want := ErrFull
			if policy == Block {
				cancel() // ends the wait for room at once
				want = context.Canceled
			}
			if err := b.Enqueue(ctx, 99); !errors.Is(err, want) {
				t.Fatalf("Enqueue when full: %v, want %v", err, want)
			}
			cancel()
			closeOK(t, b)
			if got := seen.sorted(); !slices.Equal(got, []int{0, 1}) {
				t.Fatalf("batch function saw %v, want [0 1]", got)
			}
		})
	}
}

// TestBatcherEnqueueCloseGivesUp: a Close that gives up drops enqueued
// items (no one waits for them) and still releases the callers of Submit.
func TestBatcherEnqueueCloseGivesUp(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.MaxSize, cfg.Linger, cfg.MaxInFlight = 1, 0, 1
	started := make(chan struct{}, 1)
	b, err := New(cfg, func(ctx context.Context, items []int) ([]int, error) {
		started <- struct{}{}
		<-ctx.Done()
		return nil, ctx.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Enqueue(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	<-started
	if err := b.Enqueue(context.Background(), 2); err != nil {
		t.Fatal(err)
	}
	submitted := make(chan error)
	go func() { _, err := b.Submit(context.Background(), 3); submitted <- err }()
	waitFor(t, "2 queued", func() bool { return b.Stats().Queued == 2 })
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := b.Close(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Close: %v, want context.Canceled", err)
	}
	if err := <-submitted; !errors.Is(err, ErrClosed) {
		t.Fatalf("Submit: %v, want ErrClosed", err)
	}
	closeOK(t, b)
}
