package relaybus

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestDeliverAt: a delayed keyed event runs no sooner than its
// DeliverAt, and its key's later event waits for it while another key
// runs at once; a DeliverAt past MaxDeliverDelay is refused before the
// store is asked.
func TestDeliverAt(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.PollInterval = 5 * time.Millisecond
	tb := setup(t, cfg)
	var mu sync.Mutex
	ran := map[string]time.Time{}
	var order []string
	require.NoError(t, tb.bus.Handle("t", "h", func(_ context.Context, d *Delivery) error {
		mu.Lock()
		defer mu.Unlock()
		ran[d.EventID] = time.Now()
		order = append(order, d.EventID)
		return nil
	}, nil))
	tb.start(t)
	ctx := context.Background()
	start := time.Now()
	at := start.Add(300 * time.Millisecond)
	require.NoError(t, tb.bus.Publish(ctx, &Event{ID: "delayed", Type: "t", Key: "k", DeliverAt: at}))
	require.NoError(t, tb.bus.Publish(ctx, &Event{ID: "after", Type: "t", Key: "k"}))
	require.NoError(t, tb.bus.Publish(ctx, &Event{ID: "other", Type: "t", Key: "other"}))
	waitFor(t, "every event", func() bool { mu.Lock(); defer mu.Unlock(); return len(ran) == 3 })
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{"other", "delayed", "after"}, order)
	require.False(t, ran["delayed"].Before(at), "ran %v before its DeliverAt", at.Sub(ran["delayed"]))

	err := tb.bus.Publish(ctx, &Event{Type: "t", DeliverAt: time.Now().Add(MaxDeliverDelay + time.Hour)})
	require.ErrorIs(t, err, ErrInvalid)
	require.Contains(t, err.Error(), "over the limit of")
}
