package batch

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// hangLimit only bounds how long a test may hang; no test asserts timing.
const hangLimit = 20 * time.Second

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(hangLimit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func testConfig() Config[int] {
	return Config[int]{MaxSize: 4, Linger: time.Hour, MaxInFlight: 2, MaxQueued: 1000}
}

func closeOK(t *testing.T, c interface{ Close(context.Context) error }) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangLimit)
	defer cancel()
	if err := c.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

func double(_ context.Context, items []int) ([]int, error) {
	out := make([]int, len(items))
	for i, v := range items {
		out[i] = 2 * v
	}
	return out, nil
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	weigh := func(int) int64 { return 1 }
	tests := []struct {
		name   string
		change func(*Config[int])
		want   string
	}{
		{"MaxSize0", func(c *Config[int]) { c.MaxSize = 0 }, "batch: MaxSize 0 out of range [1, 65536]"},
		{"MaxSizeBig", func(c *Config[int]) { c.MaxSize = MaxSizeLimit + 1 }, "batch: MaxSize 65537 out of range [1, 65536]"},
		{"MaxWeightNeg", func(c *Config[int]) { c.MaxWeight = -1; c.Weigh = weigh }, "batch: MaxWeight -1 out of range [0, 1099511627776]"},
		{"LingerNeg", func(c *Config[int]) { c.Linger = -time.Second }, "batch: Linger -1s out of range [0s, 1h0m0s]"},
		{"LingerBig", func(c *Config[int]) { c.Linger = 2 * time.Hour }, "batch: Linger 2h0m0s out of range [0s, 1h0m0s]"},
		{"MaxInFlight0", func(c *Config[int]) { c.MaxInFlight = 0 }, "batch: MaxInFlight 0 out of range [1, 4096]"},
		{"MaxInFlightBig", func(c *Config[int]) { c.MaxInFlight = 5000 }, "batch: MaxInFlight 5000 out of range [1, 4096]"},
		{"MaxQueued0", func(c *Config[int]) { c.MaxQueued = 0 }, "batch: MaxQueued 0 out of range [1, 16777216]"},
		{"MaxQueuedWeightNeg", func(c *Config[int]) { c.MaxQueuedWeight = -5; c.Weigh = weigh }, "batch: MaxQueuedWeight -5 out of range [0, 1125899906842624]"},
		{"WhenFull", func(c *Config[int]) { c.WhenFull = 7 }, "batch: WhenFull FullPolicy(7) is neither Block nor Reject"},
		{"WeightNoWeigh", func(c *Config[int]) { c.MaxWeight = 10 }, "batch: MaxWeight and MaxQueuedWeight need Weigh"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := DefaultConfig[int]()
			tt.change(&cfg)
			if _, err := New(cfg, double); err == nil || err.Error() != tt.want {
				t.Fatalf("New: %v, want %q", err, tt.want)
			}
			if _, err := NewPerKey(cfg, func(context.Context, string, []int) ([]int, error) { return nil, nil }); err == nil || err.Error() != tt.want {
				t.Fatalf("NewPerKey: %v, want %q", err, tt.want)
			}
		})
	}
	if _, err := New[int, int](DefaultConfig[int](), nil); err == nil || !strings.HasPrefix(err.Error(), "batch: ") {
		t.Fatalf("New(nil fn): %v", err)
	}
}

// submitAll submits items concurrently and returns each caller's result.
func submitAll(t *testing.T, submit func(context.Context, int) (int, error), items []int) ([]int, []error) {
	t.Helper()
	outs := make([]int, len(items))
	errs := make([]error, len(items))
	var wg sync.WaitGroup
	for i, v := range items {
		wg.Go(func() { outs[i], errs[i] = submit(context.Background(), v) })
	}
	wg.Wait()
	return outs, errs
}

func TestBatcherSizeAndResults(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var sizes []int
	b, err := New(testConfig(), func(ctx context.Context, items []int) ([]int, error) {
		mu.Lock()
		sizes = append(sizes, len(items))
		mu.Unlock()
		return double(ctx, items)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer closeOK(t, b)
	items := make([]int, 40)
	for i := range items {
		items[i] = i
	}
	// Linger is an hour: only full batches can run, so 40 items make ten
	// batches of four, and every caller must get its own item's result.
	outs, errs := submitAll(t, b.Submit, items)
	for i := range items {
		if errs[i] != nil || outs[i] != 2*i {
			t.Fatalf("item %d: (%d, %v), want (%d, nil)", i, outs[i], errs[i], 2*i)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(sizes) != 10 || slices.ContainsFunc(sizes, func(n int) bool { return n != 4 }) {
		t.Fatalf("batch sizes %v, want ten of 4", sizes)
	}
}

func TestBatcherLinger(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.Linger = time.Millisecond
	b, err := New(cfg, double)
	if err != nil {
		t.Fatal(err)
	}
	defer closeOK(t, b)
	// One item never fills a batch of four: only the linger deadline can
	// send it.
	if out, err := b.Submit(context.Background(), 21); err != nil || out != 42 {
		t.Fatalf("Submit: (%d, %v)", out, err)
	}
}

func TestBatcherWeight(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var weights []int
	cfg := testConfig()
	cfg.MaxSize = 100
	cfg.MaxWeight = 10
	cfg.Linger = time.Millisecond
	cfg.Weigh = func(v int) int64 { return int64(v) }
	b, err := New(cfg, func(ctx context.Context, items []int) ([]int, error) {
		w := 0
		for _, v := range items {
			w += v
		}
		mu.Lock()
		weights = append(weights, w)
		mu.Unlock()
		return double(ctx, items)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer closeOK(t, b)
	items := []int{4, 4, 4, 3, 3, 3, 1, 1, 9, 10, 0}
	outs, errs := submitAll(t, b.Submit, items)
	for i, v := range items {
		if errs[i] != nil || outs[i] != 2*v {
			t.Fatalf("item %d: (%d, %v)", v, outs[i], errs[i])
		}
	}
	mu.Lock()
	for _, w := range weights {
		if w > 10 {
			t.Errorf("batch weight %d > MaxWeight 10 (all %v)", w, weights)
		}
	}
	mu.Unlock()
	for _, w := range []int{11, -1} {
		if _, err := b.Submit(context.Background(), w); !errors.Is(err, ErrWeight) {
			t.Errorf("Submit weight %d: %v, want ErrWeight", w, err)
		}
	}
}

func TestBatcherErrors(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	tests := []struct {
		name  string
		fn    func(context.Context, []int) ([]int, error)
		check func(error) bool
	}{
		{"error", func(context.Context, []int) ([]int, error) { return nil, boom }, func(err error) bool { return errors.Is(err, boom) }},
		{"count", func(context.Context, []int) ([]int, error) { return []int{1}, nil }, func(err error) bool { return errors.Is(err, ErrResultCount) }},
		{"panic", func(context.Context, []int) ([]int, error) { panic("kaboom") }, func(err error) bool {
			var pe *PanicError
			return errors.As(err, &pe) && pe.Value == "kaboom" && len(pe.Stack) > 0
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b, err := New(testConfig(), tt.fn)
			if err != nil {
				t.Fatal(err)
			}
			defer closeOK(t, b)
			_, errs := submitAll(t, b.Submit, []int{1, 2, 3, 4, 5, 6, 7, 8})
			for i, err := range errs {
				if !tt.check(err) {
					t.Fatalf("caller %d: %v", i, err)
				}
			}
			// The batcher survives: a later batch still runs its function.
			_, errs = submitAll(t, b.Submit, []int{1, 2, 3, 4})
			if !tt.check(errs[0]) {
				t.Fatalf("after failure: %v", errs[0])
			}
		})
	}
}

// TestBatcherMaxInFlight: exactly MaxInFlight batches run at once, never more.
func TestBatcherMaxInFlight(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.MaxSize, cfg.Linger, cfg.MaxInFlight = 1, 0, 3
	var running, peak atomic.Int32
	release := make(chan struct{})
	b, err := New(cfg, func(ctx context.Context, items []int) ([]int, error) {
		n := running.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		<-release
		running.Add(-1)
		return double(ctx, items)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer closeOK(t, b)
	var releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(release) }) }
	defer unblock() // a failing check must not leave batches blocked for Close
	var wg sync.WaitGroup
	for i := range 10 {
		wg.Go(func() { _, _ = b.Submit(context.Background(), i) })
	}
	// The submitters race the workers: wait until all ten are in, three
	// running and seven queued, and never more than three running.
	waitFor(t, "3 batches running and 7 queued", func() bool {
		st := b.Stats()
		return running.Load() == 3 && st.InFlight == 3 && st.Queued == 7
	})
	unblock()
	wg.Wait()
	if p := peak.Load(); p != 3 {
		t.Fatalf("peak concurrency %d, want 3", p)
	}
}

func TestBatcherClose(t *testing.T) {
	t.Parallel()
	b, err := New(testConfig(), double)
	if err != nil {
		t.Fatal(err)
	}
	// Two items wait for a batch of four and an hour's linger; Close must
	// run them now rather than wait.
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range 2 {
		wg.Go(func() { _, errs[i] = b.Submit(context.Background(), i) })
	}
	waitFor(t, "2 queued", func() bool { return b.Stats().Queued == 2 })
	closeOK(t, b)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("caller %d: %v", i, err)
		}
	}
	if _, err := b.Submit(context.Background(), 1); !errors.Is(err, ErrClosed) {
		t.Fatalf("Submit after Close: %v, want ErrClosed", err)
	}
	closeOK(t, b) // a second Close is harmless
}

// TestBatcherCloseGivesUp: when Close's context ends, every caller, queued
// or in a running batch, gets ErrClosed, and the batch function's context
// is cancelled.
func TestBatcherCloseGivesUp(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.MaxSize, cfg.Linger, cfg.MaxInFlight = 1, 0, 1
	started := make(chan struct{}, 1)
	b, err := New(cfg, func(ctx context.Context, items []int) ([]int, error) {
		started <- struct{}{}
		<-ctx.Done() // a slow batch: ends only when Close gives up
		return nil, ctx.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range 3 {
		wg.Go(func() { _, errs[i] = b.Submit(context.Background(), i) })
	}
	<-started
	waitFor(t, "2 queued", func() bool { return b.Stats().Queued == 2 })
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := b.Close(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Close: %v, want context.Canceled", err)
	}
	wg.Wait()
	for i, err := range errs {
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("caller %d: %v, want ErrClosed", i, err)
		}
	}
	closeOK(t, b) // now the workers have exited
}

func TestBatcherCancelWaiting(t *testing.T) {
	t.Parallel()
	b, err := New(testConfig(), double)
	if err != nil {
		t.Fatal(err)
	}
	defer closeOK(t, b)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { _, err := b.Submit(ctx, 1); done <- err }()
	waitFor(t, "1 queued", func() bool { return b.Stats().Queued == 1 })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Submit: %v, want context.Canceled", err)
	}
	// Withdrawn, not left behind: nothing queued, no lane kept.
	if st := b.Stats(); st.Queued != 0 || st.Lanes != 0 {
		t.Fatalf("stats %+v after cancel", st)
	}
	if _, err := b.Submit(ctx, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("Submit with a done ctx: %v", err)
	}
}

func TestBatcherCancelInFlight(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.MaxSize = 2
	started := make(chan struct{})
	release := make(chan struct{})
	b, err := New(cfg, func(ctx context.Context, items []int) ([]int, error) {
		close(started)
		<-release
		return double(ctx, items)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer closeOK(t, b)
	ctx, cancel := context.WithCancel(context.Background())
	mine := make(chan error)
	other := make(chan int)
	go func() { _, err := b.Submit(ctx, 1); mine <- err }()
	waitFor(t, "1 queued", func() bool { return b.Stats().Queued == 1 })
	go func() { out, _ := b.Submit(context.Background(), 2); other <- out }()
	<-started
	cancel()
	if err := <-mine; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled caller: %v", err)
	}
	close(release)
	// The batch still ran for the other caller.
	if out := <-other; out != 4 {
		t.Fatalf("other caller got %d, want 4", out)
	}
}

func TestBatcherWhenFull(t *testing.T) {
	t.Parallel()
	for _, policy := range []FullPolicy{Reject, Block} {
		t.Run(policy.String(), func(t *testing.T) {
			t.Parallel()
			cfg := testConfig()
			cfg.MaxQueued = 2
			cfg.WhenFull = policy
			b, err := New(cfg, double)
			if err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			errs := make([]error, 2)
			for i := range 2 {
				wg.Go(func() { _, errs[i] = b.Submit(context.Background(), i) })
			}
			waitFor(t, "2 queued", func() bool { return b.Stats().Queued == 2 })
			if policy == Reject {
				if _, err := b.Submit(context.Background(), 3); !errors.Is(err, ErrFull) {
					t.Fatalf("Submit when full: %v, want ErrFull", err)
				}
			} else {
				ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
				defer cancel()
				if _, err := b.Submit(ctx, 3); !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("blocked Submit: %v, want DeadlineExceeded", err)
				}
				// A submitter blocked on room is released by Close.
				blocked := make(chan error)
				go func() { _, err := b.Submit(context.Background(), 4); blocked <- err }()
				time.Sleep(time.Millisecond) // let it block; either order is correct
				closeOK(t, b)
				if err := <-blocked; !errors.Is(err, ErrClosed) {
					t.Fatalf("blocked Submit at Close: %v, want ErrClosed", err)
				}
			}
			closeOK(t, b)
			wg.Wait()
			for i, err := range errs {
				if err != nil {
					t.Fatalf("queued caller %d: %v", i, err)
				}
			}
		})
	}
}

// TestBatcherBlockGetsRoom: a blocked submitter gets in once a batch
// leaves the queue.
func TestBatcherBlockGetsRoom(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.MaxSize, cfg.MaxQueued, cfg.Linger = 2, 2, 0
	cfg.MaxInFlight = 1
	release := make(chan struct{})
	b, err := New(cfg, func(ctx context.Context, items []int) ([]int, error) {
		<-release
		return double(ctx, items)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer closeOK(t, b)
	items := make([]int, 20)
	for i := range items {
		items[i] = i
	}
	go func() { time.Sleep(time.Millisecond); close(release) }()
	outs, errs := submitAll(t, b.Submit, items)
	for i := range items {
		if errs[i] != nil || outs[i] != 2*i {
			t.Fatalf("item %d: (%d, %v)", i, outs[i], errs[i])
		}
	}
}

func Example() {
	b, err := New(Config[int]{MaxSize: 10, Linger: time.Millisecond, MaxInFlight: 2, MaxQueued: 100},
		func(ctx context.Context, items []int) ([]int, error) {
			out := make([]int, len(items))
			for i, v := range items {
				out[i] = v * v
			}
			return out, nil
		})
	if err != nil {
		panic(err)
	}
	defer b.Close(context.Background())
	sq, err := b.Submit(context.Background(), 7)
	fmt.Println(sq, err)
	// Output: 49 <nil>
}
