package relaybus

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/berkcansavur/relaybus/relaybus/driver"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testConfig is fast: tiny poll interval and backoff, no jitter.
func testConfig() Config {
	return Config{
		Owner:          "test-owner",
		PollInterval:   time.Millisecond,
		RetryBaseDelay: time.Millisecond,
		RetryMaxDelay:  4 * time.Millisecond,
		RetryJitter:    Disabled,
		LeaseDuration:  5 * time.Second,
		Logger:         testLogger(),
	}
}

// testLogger logs to stderr with RELAYBUS_TEST_LOG=1, else discards.
func testLogger() *slog.Logger {
	if os.Getenv("RELAYBUS_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

type bundle struct {
	bus   *Bus[*fakeTx]
	spy   *spyStore[*fakeTx]
	store *fakeStore
}

func setup(t *testing.T, cfg Config) *bundle {
	t.Helper()
	fs := newFakeStore()
	sp := spy[*fakeTx](fs)
	b, err := New[*fakeTx](sp, cfg)
	require.NoError(t, err)
	return &bundle{bus: b, spy: sp, store: fs}
}

// start runs the bus until the test ends (or stop is called).
func (tb *bundle) start(t *testing.T) (stop func()) {
	t.Helper()
	require.NoError(t, tb.bus.Start(context.Background()))
	var once sync.Once
	stop = func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			require.NoError(t, tb.bus.Stop(ctx))
		})
	}
	t.Cleanup(stop)
	return stop
}

// waitFor polls cond until it holds, failing the test after 5s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func (tb *bundle) countStatus(st Status) int {
	n := 0
	for _, d := range tb.store.snapshot() {
		if d.Status == st {
			n++
		}
	}
	return n
}

func noop(context.Context, *Delivery) error { return nil }

func TestPublishValidation(t *testing.T) {
	t.Parallel()
	tb := setup(t, Config{MaxPayloadBytes: 8})
	require.NoError(t, tb.bus.Handle("t", "h", noop, nil))
	ctx := context.Background()

	for name, e := range map[string]*Event{
		"no handler":        {Type: "unknown"},
		"empty type":        {},
		"key with NUL":      {Type: "t", Key: "k\x00"},
		"key too long":      {Type: "t", Key: strings.Repeat("k", MaxKeyBytes+1)},
		"key not UTF-8":     {Type: "t", Key: "\xff"},
		"id too long":       {Type: "t", ID: strings.Repeat("i", MaxEventIDBytes+1)},
		"payload too big":   {Type: "t", Payload: make([]byte, 9)},
		"empty header name": {Type: "t", Headers: map[string]string{"": "v"}},
		"header not UTF-8":  {Type: "t", Headers: map[string]string{"h": "\xff"}},
		"header too long":   {Type: "t", Headers: map[string]string{"h": strings.Repeat("v", MaxHeaderBytes+1)}},
	} {
		good := &Event{Type: "t"}
		err := tb.bus.Publish(ctx, good, e)
		require.ErrorIs(t, err, ErrInvalid, name)
		require.Empty(t, good.ID, "%s: the valid event was changed although nothing was written", name)
		require.True(t, good.CreatedAt.IsZero(), name)
	}
	require.ErrorIs(t, tb.bus.Publish(ctx, &Event{Type: "t", ID: "x"}, &Event{Type: "t", ID: "x"}), ErrInvalid)
	require.ErrorIs(t, tb.bus.Publish(ctx, &Event{Type: "t"}, nil), ErrInvalid)
	tooMany := make([]*Event, MaxEventsPerPublish+1)
	for i := range tooMany {
		tooMany[i] = &Event{Type: "t"}
	}
	require.ErrorIs(t, tb.bus.Publish(ctx, tooMany...), ErrInvalid)
	headers := map[string]string{}
	for i := range MaxHeaders + 1 {
		headers[strings.Repeat("h", i+1)] = "v"
	}
	require.ErrorIs(t, tb.bus.Publish(ctx, &Event{Type: "t", Headers: headers}), ErrInvalid)
	require.Empty(t, tb.store.snapshot(), "an invalid publish wrote something")

	// Nothing to publish is not an error and writes nothing.
	require.NoError(t, tb.bus.Publish(ctx))
	require.Empty(t, tb.store.snapshot())

	// A valid publish gets a UUIDv7 and CreatedAt, written back.
	e := &Event{Type: "t", Key: "k", Payload: []byte("12345678")}
	require.NoError(t, tb.bus.Publish(ctx, e))
	id, err := uuid.Parse(e.ID)
	require.NoError(t, err)
	require.Equal(t, uuid.Version(7), id.Version())
	require.False(t, e.CreatedAt.IsZero())
	ds := tb.store.snapshot()
	require.Len(t, ds, 1)
	require.Equal(t, e.ID, ds[0].EventID)
	require.Equal(t, DefaultMaxAttempts, ds[0].MaxAttempts)
}

func TestPublishOneDeliveryPerHandler(t *testing.T) {
	t.Parallel()
	tb := setup(t, testConfig())
	require.NoError(t, tb.bus.Handle("a", "h1", noop, &HandlerOptions{MaxAttempts: 3}))
	require.NoError(t, tb.bus.Declare("a", "remote", &HandlerOptions{MaxAttempts: 7}))
	require.NoError(t, tb.bus.Handle("b", "h3", noop, nil))
	tx, err := tb.store.TxBegin(context.Background())
	require.NoError(t, err)
	require.NoError(t, tb.bus.PublishTx(context.Background(), tx, &Event{ID: "e1", Type: "a"}, &Event{ID: "e2", Type: "b"}))
	require.Empty(t, tb.store.snapshot(), "visible before commit")
	require.NoError(t, tb.store.TxCommit(context.Background(), tx))
	got := map[string]int{}
	for _, d := range tb.store.snapshot() {
		got[d.EventID+"/"+d.Handler] = d.MaxAttempts
	}
	require.Equal(t, map[string]int{"e1/h1": 3, "e1/remote": 7, "e2/h3": DefaultMaxAttempts}, got)
}

func TestStartStopLifecycle(t *testing.T) {
	t.Parallel()
	tb := setup(t, testConfig())
	require.NoError(t, tb.bus.Stop(context.Background()), "stop before start")
	require.NoError(t, tb.bus.Declare("t", "remote", nil))
	require.ErrorIs(t, tb.bus.Start(context.Background()), ErrInvalid, "nothing to run")
	require.NoError(t, tb.bus.Handle("t", "h", noop, nil))
	stop := tb.start(t)
	require.ErrorIs(t, tb.bus.Start(context.Background()), ErrAlreadyRunning)
	require.ErrorIs(t, tb.bus.Handle("t", "late", noop, nil), ErrInvalid)
	stop()
	require.ErrorIs(t, tb.bus.Start(context.Background()), ErrClosed)
	require.ErrorIs(t, tb.bus.Run(context.Background()), ErrClosed)
	require.NoError(t, tb.bus.Stop(context.Background()), "second stop")
}

func TestRunReturnsWhenContextDone(t *testing.T) {
	t.Parallel()
	tb := setup(t, testConfig())
	require.NoError(t, tb.bus.Handle("t", "h", noop, nil))
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- tb.bus.Run(ctx) }()
	require.NoError(t, tb.bus.Publish(context.Background(), &Event{Type: "t"}))
	waitFor(t, "completion", func() bool { return tb.countStatus(StatusCompleted) == 1 })
	cancel()
	require.NoError(t, <-errc)
}

func TestAdmin(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	cfg := testConfig()
	cfg.Now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	tb := setup(t, cfg)
	require.NoError(t, tb.bus.Handle("t", "h", func(_ context.Context, d *Delivery) error {
		if d.Key == "bad" {
			return Permanent(errBoom)
		}
		return nil
	}, nil))
	ctx := context.Background()
	require.NoError(t, tb.bus.Publish(ctx, &Event{ID: "ok", Type: "t"}, &Event{ID: "bad", Type: "t", Key: "bad"}))
	stop := tb.start(t)
	waitFor(t, "both finished", func() bool { return tb.countStatus(StatusCompleted)+tb.countStatus(StatusDead) == 2 })
	stop()

	st, err := tb.bus.Statistics(ctx)
	require.NoError(t, err)
	require.Equal(t, Counts{Completed: 1, Dead: 1}, st.Counts)
	page, err := tb.bus.ListDeliveries(ctx, &DeliveryListParams{Status: StatusDead})
	require.NoError(t, err)
	require.Len(t, page.Deliveries, 1)
	require.Equal(t, "bad", page.Deliveries[0].EventID)
	require.Contains(t, page.Deliveries[0].LastError, "boom")
	all, err := tb.bus.ListDeliveries(ctx, nil)
	require.NoError(t, err)
	require.Len(t, all.Deliveries, 2)

	require.ErrorIs(t, tb.bus.Requeue(ctx, "nope"), ErrNotFound)
	for _, d := range all.Deliveries {
		if d.Status == StatusCompleted {
			require.ErrorIs(t, tb.bus.Requeue(ctx, d.ID), ErrNotDead)
		}
	}

	_, err = tb.bus.PurgeExpired(ctx, Retention{Completed: -1})
	require.ErrorIs(t, err, ErrInvalid)
	res, err := tb.bus.PurgeExpired(ctx, Retention{})
	require.NoError(t, err)
	require.Zero(t, res.Deliveries, "zero retention keeps everything")
	mu.Lock()
	now = now.Add(2 * time.Hour)
	mu.Unlock()
	res, err = tb.bus.PurgeExpired(ctx, Retention{Completed: time.Hour})
	require.NoError(t, err)
	require.Equal(t, int64(1), res.Deliveries, "only the completed one")
	res, err = tb.bus.PurgeExpired(ctx, Retention{Dead: time.Hour})
	require.NoError(t, err)
	require.Equal(t, int64(1), res.Deliveries)
}

// retryingPublisher is a store with the EventPublisher capability: its
// first publish fails as a transient conflict would, and it retries.
type retryingPublisher struct {
	Store[*fakeTx]
	calls, attempts int
}

func (r *retryingPublisher) EventPublish(ctx context.Context, p *driver.EventPublishParams) (*driver.EventPublishResult, error) {
	r.calls++
	for {
		r.attempts++
		tx, err := r.TxBegin(ctx)
		if err != nil {
			return nil, err
		}
		res, err := r.EventPublishTx(ctx, tx, p)
		if err != nil {
			return nil, err
		}
		if r.attempts == 1 { // the transient conflict: roll back and retry
			if err := r.TxRollback(ctx, tx); err != nil {
				return nil, err
			}
			continue
		}
		return res, r.TxCommit(ctx, tx)
	}
}

func TestPublishUsesTheStoresEventPublisher(t *testing.T) {
	t.Parallel()
	tb := setup(t, testConfig())
	rp := &retryingPublisher{Store: tb.spy}
	b, err := New[*fakeTx](rp, testConfig())
	require.NoError(t, err)
	require.NoError(t, b.Declare("t", "h", nil))
	require.NoError(t, b.Publish(context.Background(), &Event{ID: "e1", Type: "t"}))
	require.Equal(t, 1, rp.calls, "Publish went around the store's EventPublish")
	require.Equal(t, 2, rp.attempts)
	require.Equal(t, 1, tb.countStatus(StatusPending), "the retried publish is visible once")
}

// TestPublishAfterShutdown: a bus whose dispatcher has shut down refuses
// to publish (ErrClosed) and writes nothing; before it ran, and while it
// runs, it publishes.
func TestPublishAfterShutdown(t *testing.T) {
	t.Parallel()
	tb := setup(t, testConfig())
	require.NoError(t, tb.bus.Handle("t", "h", noop, nil))
	ctx := context.Background()
	require.NoError(t, tb.bus.Publish(ctx, &Event{Type: "t"}), "before the dispatcher ran")
	stop := tb.start(t)
	require.NoError(t, tb.bus.Publish(ctx, &Event{Type: "t"}), "while it runs")
	waitFor(t, "completed", func() bool { return tb.countStatus(StatusCompleted) == 2 })
	stop()
	err := tb.bus.Publish(ctx, &Event{Type: "t"})
	require.ErrorIs(t, err, ErrClosed)
	require.ErrorContains(t, err, "the bus has shut down")
	tx, err := tb.store.TxBegin(ctx)
	require.NoError(t, err)
	require.ErrorIs(t, tb.bus.PublishTx(ctx, tx, &Event{Type: "t"}), ErrClosed)
	require.NoError(t, tb.store.TxRollback(ctx, tx))
	require.Len(t, tb.store.snapshot(), 2, "nothing written after the shutdown")
}
