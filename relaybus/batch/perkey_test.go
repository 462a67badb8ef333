package batch

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// recorder is a batch function that records the order batches ran in
// and holds the first batch of each gated key until released.
type recorder struct {
	mu      sync.Mutex
	batches []string                 // "key:items"
	gates   map[string]chan struct{} // gates not yet met
	all     map[string]chan struct{}
	started chan string
}

func (r *recorder) release(key string) { close(r.all[key]) }

func newRecorder(gated ...string) *recorder {
	r := &recorder{gates: map[string]chan struct{}{}, all: map[string]chan struct{}{}, started: make(chan string, 100)}
	for _, k := range gated {
		r.gates[k] = make(chan struct{})
		r.all[k] = r.gates[k]
	}
	return r
}

func (r *recorder) fn(ctx context.Context, key string, items []int) ([]int, error) {
	r.mu.Lock()
	r.batches = append(r.batches, fmt.Sprint(key, ":", items))
	g := r.gates[key]
	delete(r.gates, key) // gate the first batch only
	r.mu.Unlock()
	r.started <- key
	if g != nil {
		<-g
	}
	return double(ctx, items)
}

func (r *recorder) order() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.batches)
}

// submitInOrder admits items one at a time (each is queued before the
// next is submitted), so their admission order is known.
func submitInOrder[K comparable](t *testing.T, b *PerKey[K, int, int], wg *sync.WaitGroup, errs chan<- error, keys []K, items []int) {
	t.Helper()
	for i, k := range keys {
		before := b.Stats().Queued
		wg.Go(func() {
			out, err := b.Submit(context.Background(), k, items[i])
			if err == nil && out != 2*items[i] {
				err = fmt.Errorf("key %v item %d: got %d", k, items[i], out)
			}
			errs <- err
		})
		waitFor(t, "admission", func() bool { return b.Stats().Queued > before })
	}
}

// TestPerKeyReadyLineOrder: with one worker busy on key x, keys become
// ready in admission order and are served first come, first served; a
// lane with more input rejoins the back of the line.
func TestPerKeyReadyLineOrder(t *testing.T) {
	t.Parallel()
	r := newRecorder("x")
	cfg := Config[int]{MaxSize: 2, Linger: 0, MaxInFlight: 1, MaxQueued: 100}
	b, err := NewPerKey(cfg, r.fn)
	if err != nil {
		t.Fatal(err)
	}
	defer closeOK(t, b)
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	wg.Go(func() { _, err := b.Submit(context.Background(), "x", 0); errs <- err })
	<-r.started
	submitInOrder(t, b, &wg, errs,
		[]string{"a", "a", "a", "b", "x", "c", "a"},
		[]int{1, 2, 3, 4, 5, 6, 7})
	r.release("x")
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	// x ran first. a, b and c joined the line as they were admitted; x
	// was busy when 5 came, so it joined only when its batch completed,
	// behind c; a's rest rejoined the back of the line after a's batch.
	want := []string{"x:[0]", "a:[1 2]", "b:[4]", "c:[6]", "x:[5]", "a:[3 7]"}
	if got := r.order(); !slices.Equal(got, want) {
		t.Fatalf("batches %v\nwant    %v", got, want)
	}
}

// TestPerKeyConcurrent: many goroutines, few keys, several workers: never
// two batches of one key at once, each key's batches in admission order,
// every caller its own result.
func TestPerKeyConcurrent(t *testing.T) {
	t.Parallel()
	const keys, perKey = 8, 200
	var running [keys]atomic.Int32
	var mu sync.Mutex
	seen := map[int][]int{}
	var overlap atomic.Bool
	cfg := Config[int]{MaxSize: 7, Linger: 50 * time.Microsecond, MaxInFlight: 4, MaxQueued: 64}
	b, err := NewPerKey(cfg, func(ctx context.Context, key int, items []int) ([]int, error) {
		if running[key].Add(1) != 1 {
			overlap.Store(true)
		}
		defer running[key].Add(-1)
		mu.Lock()
		seen[key] = append(seen[key], items...)
		mu.Unlock()
		return double(ctx, items)
	})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	// One submitter per key submits its items one after another, so the
	// key's admission order is its submission order.
	for k := range keys {
		wg.Go(func() {
			var inner sync.WaitGroup
			for i := range perKey {
				v := k*perKey + i
				inner.Go(func() {
					if out, err := b.Submit(context.Background(), k, v); err != nil || out != 2*v {
						t.Errorf("key %d item %d: (%d, %v)", k, v, out, err)
					}
				})
				if i%10 == 9 {
					inner.Wait() // let batches form and complete meanwhile
				}
			}
			inner.Wait()
		})
	}
	wg.Wait()
	closeOK(t, b)
	if overlap.Load() {
		t.Fatal("two batches of one key ran at once")
	}
	for k := range keys {
		if len(seen[k]) != perKey {
			t.Fatalf("key %d: %d items ran, want %d", k, len(seen[k]), perKey)
		}
	}
	if st := b.Stats(); st != (Stats{}) {
		t.Fatalf("stats after close %+v", st)
	}
}

// TestPerKeyOrderWithinKey: items admitted in a known order run in that
// order, across batches, even with spare workers.
func TestPerKeyOrderWithinKey(t *testing.T) {
	t.Parallel()
	r := newRecorder("k")
	cfg := Config[int]{MaxSize: 3, Linger: 0, MaxInFlight: 4, MaxQueued: 100}
	b, err := NewPerKey(cfg, r.fn)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	wg.Go(func() { _, err := b.Submit(context.Background(), "k", 0); errs <- err })
	<-r.started
	keys := make([]string, 10)
	items := make([]int, 10)
	for i := range keys {
		keys[i], items[i] = "k", i+1
	}
	submitInOrder(t, b, &wg, errs, keys, items)
	// Three workers are idle, yet k is busy: nothing else may start.
	if st := b.Stats(); st.InFlight != 1 || st.Queued != 10 {
		t.Fatalf("stats %+v, want 1 in flight, 10 queued", st)
	}
	r.release("k")
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	closeOK(t, b)
	want := []string{"k:[0]", "k:[1 2 3]", "k:[4 5 6]", "k:[7 8 9]", "k:[10]"}
	if got := r.order(); !slices.Equal(got, want) {
		t.Fatalf("batches %v, want %v", got, want)
	}
}

// TestPerKeyLanesGoAway: lanes exist only while a key has work.
func TestPerKeyLanesGoAway(t *testing.T) {
	t.Parallel()
	cfg := Config[int]{MaxSize: 4, Linger: 0, MaxInFlight: 4, MaxQueued: 1000}
	b, err := NewPerKey(cfg, func(ctx context.Context, key int, items []int) ([]int, error) { return double(ctx, items) })
	if err != nil {
		t.Fatal(err)
	}
	defer closeOK(t, b)
	var wg sync.WaitGroup
	for k := range 5000 {
		wg.Go(func() {
			if out, err := b.Submit(context.Background(), k, k); err != nil || out != 2*k {
				t.Errorf("key %d: (%d, %v)", k, out, err)
			}
		})
	}
	wg.Wait()
	// A caller has its result just before its worker records the batch
	// complete, so wait for the last completion.
	waitFor(t, "no batch in flight", func() bool { return b.Stats().InFlight == 0 })
	if st := b.Stats(); st != (Stats{}) {
		t.Fatalf("stats after 5000 keys came and went: %+v", st)
	}
}

// TestPerKeyFailingKeyStrandsNobody: a key whose batches panic or fail
// does not hold up other keys, and its own callers all get an error.
func TestPerKeyFailingKeyStrandsNobody(t *testing.T) {
	t.Parallel()
	cfg := Config[int]{MaxSize: 3, Linger: 0, MaxInFlight: 2, MaxQueued: 1000}
	b, err := NewPerKey(cfg, func(ctx context.Context, key string, items []int) ([]int, error) {
		switch key {
		case "panic":
			panic("bad key")
		case "error":
			return nil, errors.New("batch failed")
		}
		return double(ctx, items)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer closeOK(t, b)
	var wg sync.WaitGroup
	var failed, ok atomic.Int32
	for i := range 300 {
		key := []string{"panic", "error", "good"}[i%3]
		wg.Go(func() {
			out, err := b.Submit(context.Background(), key, i)
			switch {
			case key == "good" && err == nil && out == 2*i:
				ok.Add(1)
			case key != "good" && err != nil:
				failed.Add(1)
			default:
				t.Errorf("key %s item %d: (%d, %v)", key, i, out, err)
			}
		})
	}
	wg.Wait()
	if ok.Load() != 100 || failed.Load() != 200 {
		t.Fatalf("%d ok, %d failed; want 100, 200", ok.Load(), failed.Load())
	}
}

// TestPerKeyCloseUnderLoad: Close while submitters run: every call
// returns exactly once, with a result or ErrClosed.
func TestPerKeyCloseUnderLoad(t *testing.T) {
	t.Parallel()
	cfg := Config[int]{MaxSize: 5, Linger: time.Millisecond, MaxInFlight: 3, MaxQueued: 50, WhenFull: Block}
	b, err := NewPerKey(cfg, func(ctx context.Context, key int, items []int) ([]int, error) { return double(ctx, items) })
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var results, closed atomic.Int32
	for i := range 400 {
		wg.Go(func() {
			out, err := b.Submit(context.Background(), i%13, i)
			switch {
			case err == nil && out == 2*i:
				results.Add(1)
			case errors.Is(err, ErrClosed):
				closed.Add(1)
			default:
				t.Errorf("item %d: (%d, %v)", i, out, err)
			}
		})
	}
	time.Sleep(time.Millisecond)
	closeOK(t, b)
	wg.Wait()
	if results.Load()+closed.Load() != 400 {
		t.Fatalf("%d results + %d closed != 400", results.Load(), closed.Load())
	}
}
