package relaybus

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestPauseHandler: a paused handler's deliveries stay pending, their
// attempts unspent, while the other handler of the same events (same
// lanes, same keys) runs; resumed, they run, in key order, within about
// a poll. The dispatcher says so in its log.
func TestPauseHandler(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	cfg := testConfig()
	cfg.PollInterval = 20 * time.Millisecond
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	tb := setup(t, cfg)
	var mailed, audited atomic.Int32
	var mu sync.Mutex
	var order []string
	require.NoError(t, tb.bus.Handle("t", "mailer", func(_ context.Context, d *Delivery) error {
		mu.Lock()
		order = append(order, d.EventID)
		mu.Unlock()
		mailed.Add(1)
		return nil
	}, nil))
	require.NoError(t, tb.bus.Handle("t", "audit", func(context.Context, *Delivery) error { audited.Add(1); return nil }, nil))
	ctx := context.Background()
	require.NoError(t, tb.bus.PauseHandler(ctx, "mailer", "SMTP outage"))
	ps, err := tb.bus.PausedHandlers(ctx)
	require.NoError(t, err)
	require.Len(t, ps, 1)
	require.Equal(t, "mailer", ps[0].Handler)
	require.Equal(t, "SMTP outage", ps[0].Reason)

	tb.start(t)
	ids := publishN(t, tb.bus, "t", 5, func(int) string { return "k" })
	waitFor(t, "the audit deliveries", func() bool { return audited.Load() == 5 })
	time.Sleep(5 * cfg.PollInterval)
	require.Zero(t, mailed.Load(), "a paused handler ran")
	for _, d := range tb.store.snapshot() {
		if d.Handler == "mailer" {
			require.Equal(t, StatusPending, d.Status)
			require.Zero(t, d.Attempts, "a pause spends no attempt")
		}
	}
	require.Contains(t, logs.String(), "handler paused")

	ok, err := tb.bus.ResumeHandler(ctx, "mailer")
	require.NoError(t, err)
	require.True(t, ok)
	waitFor(t, "the mailer deliveries after the resume", func() bool { return mailed.Load() == 5 })
	mu.Lock()
	require.Equal(t, ids, order, "in key order")
	mu.Unlock()
	require.Contains(t, logs.String(), "handler resumed")
	ok, err = tb.bus.ResumeHandler(ctx, "mailer")
	require.NoError(t, err)
	require.False(t, ok)
}

// TestPauseEveryHandler: with every handler of the dispatcher paused it
// claims nothing at all, and reads the paused handlers about once per
// poll, not once per wake-up or loop.
func TestPauseEveryHandler(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.PollInterval = 50 * time.Millisecond
	tb := setup(t, cfg)
	require.NoError(t, tb.bus.Handle("t", "h", noop, nil))
	require.NoError(t, tb.bus.PauseHandler(context.Background(), "h", ""))
	// A pause of a handler this bus does not run changes nothing here.
	require.NoError(t, tb.bus.PauseHandler(context.Background(), "elsewhere", ""))
	tb.start(t)
	publishN(t, tb.bus, "t", 3, nil)
	time.Sleep(500 * time.Millisecond)
	require.Zero(t, tb.claimCalls(), "claimed with every handler paused")
	require.Equal(t, 3, tb.countStatus(StatusPending))
	tb.store.mu.Lock()
	reads := tb.store.pausedReads
	tb.store.mu.Unlock()
	require.GreaterOrEqual(t, reads, 2)
	require.LessOrEqual(t, reads, 12, "about one reading per poll (10 polls)")

	_, err := tb.bus.ResumeHandler(context.Background(), "h")
	require.NoError(t, err)
	waitFor(t, "the deliveries after the resume", func() bool { return tb.countStatus(StatusCompleted) == 3 })
}

// TestPauseReadFails: a dispatcher that could never read the paused
// handlers claims nothing (it cannot know which are paused) and says so;
// once it can, it claims. A reading that fails later keeps the last one.
func TestPauseReadFails(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	cfg := testConfig()
	cfg.PollInterval = 10 * time.Millisecond
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	tb := setup(t, cfg)
	require.NoError(t, tb.bus.Handle("t", "h", noop, nil))
	require.NoError(t, tb.bus.Handle("t", "paused", noop, nil))
	require.NoError(t, tb.bus.PauseHandler(context.Background(), "paused", ""))
	setErr := func(err error) {
		tb.store.mu.Lock()
		tb.store.pausedErr = err
		tb.store.mu.Unlock()
	}
	setErr(errors.New("connection refused"))
	tb.start(t)
	publishN(t, tb.bus, "t", 2, nil)
	waitFor(t, "the error in the log", func() bool { return strings.Contains(logs.String(), "reading the paused handlers: connection refused") })
	require.Zero(t, tb.claimCalls())

	setErr(nil)
	waitFor(t, "the unpaused handler's deliveries", func() bool { return tb.countStatus(StatusCompleted) == 2 })
	setErr(errors.New("connection reset"))
	waitFor(t, "the warning", func() bool { return strings.Contains(logs.String(), "going on with the last reading") })
	require.NoError(t, tb.bus.Publish(context.Background(), &Event{ID: "later", Type: "t"}))
	waitFor(t, "a delivery published after the failure", func() bool { return tb.countStatus(StatusCompleted) == 3 })
	for _, d := range tb.store.snapshot() {
		if d.Handler == "paused" {
			require.Equal(t, StatusPending, d.Status, "the last reading still holds the pause")
		}
	}
}

// TestPauseWork: Work leaves paused handlers out too, and with every
// handler asked for paused it runs nothing.
func TestPauseWork(t *testing.T) {
	t.Parallel()
	tb := setup(t, testConfig())
	require.NoError(t, tb.bus.Handle("t", "h", noop, nil))
	require.NoError(t, tb.bus.Handle("t", "paused", noop, nil))
	require.NoError(t, tb.bus.PauseHandler(context.Background(), "paused", ""))
	publishN(t, tb.bus, "t", 2, nil)
	res, err := tb.bus.Work(context.Background(), nil)
	require.NoError(t, err)
	require.Len(t, res.Worked, 2)
	for _, w := range res.Worked {
		require.Equal(t, "h", w.Delivery.Handler)
	}
	res, err = tb.bus.Work(context.Background(), &WorkParams{Handlers: []string{"paused"}})
	require.NoError(t, err)
	require.Empty(t, res.Worked)
	require.Equal(t, 2, tb.countStatus(StatusPending))
}

// TestPauseInvalid: bad names and reasons are ErrInvalid, before the
// store is asked.
func TestPauseInvalid(t *testing.T) {
	t.Parallel()
	tb := setup(t, testConfig())
	ctx := context.Background()
	require.ErrorIs(t, tb.bus.PauseHandler(ctx, "", ""), ErrInvalid)
	require.ErrorIs(t, tb.bus.PauseHandler(ctx, "h", strings.Repeat("r", 1025)), ErrInvalid)
	require.ErrorIs(t, tb.bus.PauseHandler(ctx, "h\x00", ""), ErrInvalid)
	_, err := tb.bus.ResumeHandler(ctx, "")
	require.ErrorIs(t, err, ErrInvalid)
	ps, err := tb.bus.PausedHandlers(ctx)
	require.NoError(t, err)
	require.Empty(t, ps)
}

// TestPauseBatchHandler: pausing a batch handler takes its key runs out
// of the claim with it (a claim may ask runs of its own handlers only),
// so the other handler goes on and the batch handler runs once resumed.
func TestPauseBatchHandler(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.PollInterval = 10 * time.Millisecond
	tb := setup(t, cfg)
	var batched, single atomic.Int32
	require.NoError(t, tb.bus.HandleBatch("t", "batch", func(_ context.Context, _ string, ds []*Delivery) []error {
		batched.Add(int32(len(ds)))
		return nil
	}, nil))
	require.NoError(t, tb.bus.Handle("t", "single", func(context.Context, *Delivery) error { single.Add(1); return nil }, nil))
	require.NoError(t, tb.bus.PauseHandler(context.Background(), "batch", ""))
	tb.start(t)
	publishN(t, tb.bus, "t", 4, func(int) string { return "k" })
	waitFor(t, "the single handler", func() bool { return single.Load() == 4 })
	time.Sleep(5 * cfg.PollInterval)
	require.Zero(t, batched.Load())
	_, err := tb.bus.ResumeHandler(context.Background(), "batch")
	require.NoError(t, err)
	waitFor(t, "the batch handler after the resume", func() bool { return batched.Load() == 4 })
}
