package relaybus

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var errBoom = errors.New("boom")

// seen records handler calls per (event, handler).
type seen struct {
	mu    sync.Mutex
	calls map[string]int
}

func (s *seen) add(d *Delivery) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.calls == nil {
		s.calls = map[string]int{}
	}
	s.calls[d.EventID+"/"+d.Handler]++
}

func (s *seen) snapshot() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int{}
	for k, v := range s.calls {
		out[k] = v
	}
	return out
}

func publishN(t *testing.T, b *Bus[*fakeTx], typ string, n int, key func(i int) string) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range n {
		e := &Event{ID: fmt.Sprintf("%s-%03d", typ, i), Type: typ}
		if key != nil {
			e.Key = key(i)
		}
		require.NoError(t, b.Publish(context.Background(), e))
		ids[i] = e.ID
	}
	return ids
}

func TestDispatchRunsEveryHandlerForEveryEvent(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.Concurrency = 4
	cfg.BatchSize = 3
	tb := setup(t, cfg)
	var s seen
	h := func(_ context.Context, d *Delivery) error { s.add(d); return nil }
	require.NoError(t, tb.bus.Handle("a", "a1", h, nil))
	require.NoError(t, tb.bus.Handle("a", "a2", h, nil))
	require.NoError(t, tb.bus.Handle("b", "b1", h, nil))
	aIDs := publishN(t, tb.bus, "a", 40, nil)
	bIDs := publishN(t, tb.bus, "b", 20, nil)
	stop := tb.start(t)
	waitFor(t, "all completed", func() bool { return tb.countStatus(StatusCompleted) == 100 })
	stop() // counters are final once the dispatcher has stopped

	want := map[string]int{}
	for _, id := range aIDs {
		want[id+"/a1"], want[id+"/a2"] = 1, 1
	}
	for _, id := range bIDs {
		want[id+"/b1"] = 1
	}
	require.Equal(t, want, s.snapshot())
	st := tb.bus.DispatcherStats()
	require.Equal(t, int64(100), st.Claimed)
	require.Equal(t, int64(100), st.Succeeded)
	require.Equal(t, int64(100), st.Completed)
	require.Zero(t, st.Failed+st.Buried+st.Rescheduled+st.LeasesLost+st.Panics)
	require.Positive(t, st.Claims)
}

func TestDispatchRespectsConcurrency(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.Concurrency = 3
	cfg.BatchSize = 10
	tb := setup(t, cfg)
	var running, peak atomic.Int64
	require.NoError(t, tb.bus.Handle("t", "h", func(context.Context, *Delivery) error {
		n := running.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		time.Sleep(2 * time.Millisecond)
		running.Add(-1)
		return nil
	}, nil))
	publishN(t, tb.bus, "t", 30, nil)
	stop := tb.start(t)
	waitFor(t, "all completed", func() bool { return tb.countStatus(StatusCompleted) == 30 })
	stop() // counters are final once the dispatcher has stopped
	require.LessOrEqual(t, peak.Load(), int64(3))
	require.Equal(t, int64(3), peak.Load(), "the slots were used")
}

func TestKeyedOrderingEndToEnd(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.Concurrency = 8
	cfg.BatchSize = 5
	tb := setup(t, cfg)
	var mu sync.Mutex
	lastSeq := map[string]int64{} // handler/key -> last sequence handled successfully
	violations := 0
	h := func(name string) HandlerFunc {
		return func(_ context.Context, d *Delivery) error {
			mu.Lock()
			defer mu.Unlock()
			k := name + "/" + d.Key
			if d.Sequence <= lastSeq[k] {
				violations++
			}
			// Every fifth event fails once: a retry must hold back its key.
			if d.Sequence%5 == 0 && d.Attempts == 1 {
				return errBoom
			}
			lastSeq[k] = d.Sequence
			return nil
		}
	}
	require.NoError(t, tb.bus.Handle("t", "h1", h("h1"), nil))
	require.NoError(t, tb.bus.Handle("t", "h2", h("h2"), nil))
	publishN(t, tb.bus, "t", 60, func(i int) string { return fmt.Sprintf("k%d", i%3) })
	stop := tb.start(t)
	waitFor(t, "all completed", func() bool { return tb.countStatus(StatusCompleted) == 120 })
	stop() // counters are final once the dispatcher has stopped
	mu.Lock()
	defer mu.Unlock()
	require.Zero(t, violations)
	for _, name := range []string{"h1", "h2"} {
		for k := range 3 {
			require.Equal(t, int64(20), lastSeq[fmt.Sprintf("%s/k%d", name, k)])
		}
	}
}
