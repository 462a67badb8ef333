package relaybus_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/berkcansavur/relaybus/relaybus"
	"github.com/berkcansavur/relaybus/relaybus/memory"
)

// workClock is a Config.Now that moves only when told: Work reschedules
// a failure by this clock, so a test decides when it is due again.
type workClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *workClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *workClock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// workBundle is what setupWork returns beside the bus.
type workBundle struct {
	store *memory.Store
	clock *workClock
}

// setupWork returns a bus on a fresh memory store whose clock only the
// test moves, with no jitter, so that retry times are exact.
func setupWork(t *testing.T) (*relaybus.Bus[*memory.Tx], *workBundle) {
	t.Helper()
	tb := &workBundle{store: memory.New(nil), clock: &workClock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}}
	bus, err := relaybus.New[*memory.Tx](tb.store, relaybus.Config{
		Owner:          "work-test",
		Now:            tb.clock.Now,
		RetryBaseDelay: time.Minute,
		RetryJitter:    relaybus.Disabled,
	})
	require.NoError(t, err)
	return bus, tb
}

// TestWorkRunsDueDeliveriesInKeyOrder: one Work call runs every due
// delivery, a key's in sequence order (each completion is written before
// the next claim, so the key's next one is due in the same call), and
// leaves nothing pending.
func TestWorkRunsDueDeliveriesInKeyOrder(t *testing.T) {
	t.Parallel()
	bus, _ := setupWork(t)
	var got []string
	require.NoError(t, bus.Handle("order.placed", "mailer", func(_ context.Context, d *relaybus.Delivery) error {
		got = append(got, string(d.Payload))
		return nil
	}, nil))
	for i := range 3 {
		require.NoError(t, bus.Publish(t.Context(), &relaybus.Event{Type: "order.placed", Key: "customer-1", Payload: fmt.Appendf(nil, "k%d", i)}))
	}
	require.NoError(t, bus.Publish(t.Context(), &relaybus.Event{Type: "order.placed", Payload: []byte("unkeyed")}))

	res, err := bus.Work(t.Context(), nil)
	require.NoError(t, err)
	require.Len(t, res.Worked, 4)
	require.False(t, res.LimitReached)
	for _, w := range res.Worked {
		require.Equal(t, relaybus.FinishCompleted, w.Outcome, "delivery %s", w.Delivery.ID)
		require.NoError(t, w.HandlerErr)
	}
	var keyed []string
	for _, p := range got {
		if p != "unkeyed" {
			keyed = append(keyed, p)
		}
	}
	require.Equal(t, []string{"k0", "k1", "k2"}, keyed)
	require.Contains(t, got, "unkeyed")

	st, err := bus.Statistics(t.Context())
	require.NoError(t, err)
	require.Zero(t, st.Pending+st.Processing+st.Dead, "%+v", st.Counts)

	// Nothing is due now: a second call runs nothing.
	res, err = bus.Work(t.Context(), nil)
	require.NoError(t, err)
	require.Empty(t, res.Worked)
}

// TestWorkRetryIsDueByTheBusClock: a failure is rescheduled by the bus's
// clock plus its backoff; it runs again only in a call made after the
// clock has passed that time, as attempt 2.
func TestWorkRetryIsDueByTheBusClock(t *testing.T) {
	t.Parallel()
	bus, tb := setupWork(t)
	calls := 0
	require.NoError(t, bus.Handle("order.placed", "flaky", func(context.Context, *relaybus.Delivery) error {
		calls++
		if calls == 1 {
			return errors.New("smtp: connection refused")
		}
		return nil
	}, nil))
	require.NoError(t, bus.Publish(t.Context(), &relaybus.Event{Type: "order.placed"}))

	res, err := bus.Work(t.Context(), nil)
	require.NoError(t, err)
	require.Len(t, res.Worked, 1)
	require.Equal(t, relaybus.FinishRescheduled, res.Worked[0].Outcome)
	require.EqualError(t, res.Worked[0].HandlerErr, "smtp: connection refused")
	require.Equal(t, 1, res.Worked[0].Delivery.Attempts)

	tb.clock.Add(time.Minute - time.Nanosecond)
	res, err = bus.Work(t.Context(), nil)
	require.NoError(t, err)
	require.Empty(t, res.Worked, "the retry is not due before its backoff has passed")

	tb.clock.Add(time.Nanosecond)
	res, err = bus.Work(t.Context(), nil)
	require.NoError(t, err)
	require.Len(t, res.Worked, 1)
	require.Equal(t, relaybus.FinishCompleted, res.Worked[0].Outcome)
	require.Equal(t, 2, res.Worked[0].Delivery.Attempts)
}

// TestWorkBuriesPermanentErrorsAndPanics: a Permanent error and a panic
// with a budget of one attempt make dead letters; the result says why,
// and the panic does not escape Work.
func TestWorkBuriesPermanentErrorsAndPanics(t *testing.T) {
	t.Parallel()
	bus, _ := setupWork(t)
	require.NoError(t, bus.Handle("order.placed", "permanent", func(context.Context, *relaybus.Delivery) error {
		return relaybus.Permanent(errors.New("unknown customer"))
	}, nil))
	require.NoError(t, bus.Handle("order.placed", "panics", func(context.Context, *relaybus.Delivery) error {
		panic("nil map")
	}, &relaybus.HandlerOptions{MaxAttempts: 1}))
	require.NoError(t, bus.Publish(t.Context(), &relaybus.Event{Type: "order.placed"}))

	res, err := bus.Work(t.Context(), nil)
	require.NoError(t, err)
	require.Len(t, res.Worked, 2)
	byHandler := map[string]*relaybus.Worked{}
	for _, w := range res.Worked {
		byHandler[w.Delivery.Handler] = w
		require.Equal(t, relaybus.FinishBuried, w.Outcome, w.Delivery.Handler)
	}
	require.True(t, relaybus.IsPermanent(byHandler["permanent"].HandlerErr))
	require.EqualError(t, byHandler["panics"].HandlerErr, "relaybus: handler panicked: nil map")

	dead, err := bus.ListDeliveries(t.Context(), &relaybus.DeliveryListParams{Status: relaybus.StatusDead})
	require.NoError(t, err)
	require.Len(t, dead.Deliveries, 2)
	st, err := bus.Statistics(t.Context())
	require.NoError(t, err)
	require.EqualValues(t, 2, st.Dead)
}

// TestWorkHandlersAndLimit: WorkParams.Handlers runs only the handlers
// named; Limit stops the call and says so (a handler that publishes an
// event of its own type would otherwise keep it running).
func TestWorkHandlersAndLimit(t *testing.T) {
	t.Parallel()
	bus, _ := setupWork(t)
	ran := map[string]int{}
	require.NoError(t, bus.Handle("tick", "again", func(ctx context.Context, d *relaybus.Delivery) error {
		ran["again"]++
		return bus.Publish(ctx, &relaybus.Event{Type: "tick"})
	}, nil))
	require.NoError(t, bus.Handle("tick", "other", func(context.Context, *relaybus.Delivery) error {
		ran["other"]++
		return nil
	}, nil))
	require.NoError(t, bus.Publish(t.Context(), &relaybus.Event{Type: "tick"}))

	res, err := bus.Work(t.Context(), &relaybus.WorkParams{Handlers: []string{"again"}, Limit: 5})
	require.NoError(t, err)
	require.True(t, res.LimitReached)
	require.Len(t, res.Worked, 5)
	require.Equal(t, map[string]int{"again": 5}, ran)

	res, err = bus.Work(t.Context(), &relaybus.WorkParams{Handlers: []string{"other"}})
	require.NoError(t, err)
	require.False(t, res.LimitReached)
	require.Len(t, res.Worked, 6, "one tick published first, five by the handler")
}

// TestWorkTxHandler: a transactional handler runs in its own transaction,
// its completion committed in it; what it publishes there commits with
// it and runs in the same call.
func TestWorkTxHandler(t *testing.T) {
	t.Parallel()
	bus, _ := setupWork(t)
	var shipped []string
	require.NoError(t, bus.HandleTx("order.placed", "reserve", func(ctx context.Context, tx *memory.Tx, d *relaybus.Delivery) error {
		return bus.PublishTx(ctx, tx, &relaybus.Event{Type: "stock.reserved", Key: d.Key})
	}, nil))
	require.NoError(t, bus.Handle("stock.reserved", "ship", func(_ context.Context, d *relaybus.Delivery) error {
		shipped = append(shipped, d.Key)
		return nil
	}, nil))
	require.NoError(t, bus.Publish(t.Context(), &relaybus.Event{Type: "order.placed", Key: "order-9"}))

	res, err := bus.Work(t.Context(), nil)
	require.NoError(t, err)
	require.Len(t, res.Worked, 2)
	require.Equal(t, "reserve", res.Worked[0].Delivery.Handler)
	require.Equal(t, relaybus.FinishCompleted, res.Worked[0].Outcome)
	require.Equal(t, []string{"order-9"}, shipped)
}

// TestWorkKeepsConfigHooks: the bus's AfterFinish and BeforeComplete see
// what Work runs, as they see what the dispatcher runs.
func TestWorkKeepsConfigHooks(t *testing.T) {
	t.Parallel()
	var finished []relaybus.FinishOutcome
	var before int
	bus, err := relaybus.New[*memory.Tx](memory.New(nil), relaybus.Config{
		AfterFinish: func(_ context.Context, f relaybus.Finish) { finished = append(finished, f.Outcome) },
		BeforeComplete: func(_ context.Context, ds []*relaybus.Delivery) error {
			before += len(ds)
			return nil
		},
	})
	require.NoError(t, err)
	require.NoError(t, bus.Handle("e", "h", func(context.Context, *relaybus.Delivery) error { return nil }, nil))
	require.NoError(t, bus.Publish(t.Context(), &relaybus.Event{Type: "e"}, &relaybus.Event{Type: "e"}))
	_, err = bus.Work(t.Context(), nil)
	require.NoError(t, err)
	require.Equal(t, []relaybus.FinishOutcome{relaybus.FinishCompleted, relaybus.FinishCompleted}, finished)
	require.Equal(t, 2, before)
}

// TestWorkRefuses: bad params, a handler the bus does not run, Work
// while the dispatcher runs, or after it shut down, and registering a
// handler during Work are refused; after Work the bus registers and
// starts as before.
func TestWorkRefuses(t *testing.T) {
	t.Parallel()
	bus, _ := setupWork(t)
	require.NoError(t, bus.Declare("e", "elsewhere", nil))
	_, err := bus.Work(t.Context(), nil)
	require.ErrorIs(t, err, relaybus.ErrInvalid, "only a declared handler")

	var handleErr error
	require.NoError(t, bus.Handle("e", "h", func(context.Context, *relaybus.Delivery) error {
		handleErr = bus.Handle("e", "late", func(context.Context, *relaybus.Delivery) error { return nil }, nil)
		return nil
	}, nil))
	for _, p := range []*relaybus.WorkParams{
		{Limit: -1},
		{Limit: relaybus.MaxWorkLimit + 1},
		{Handlers: []string{"elsewhere"}},
		{Handlers: []string{"nobody"}},
		{Handlers: []string{"h", "h"}},
	} {
		_, err := bus.Work(t.Context(), p)
		require.ErrorIs(t, err, relaybus.ErrInvalid, "%+v", p)
	}

	require.NoError(t, bus.Publish(t.Context(), &relaybus.Event{Type: "e"}))
	res, err := bus.Work(t.Context(), nil)
	require.NoError(t, err)
	require.Len(t, res.Worked, 1)
	require.ErrorIs(t, handleErr, relaybus.ErrInvalid, "Handle during Work")

	require.NoError(t, bus.Handle("e", "after", func(context.Context, *relaybus.Delivery) error { return nil }, nil))
	ctx, cancel := context.WithCancel(t.Context())
	require.NoError(t, bus.Start(ctx))
	_, err = bus.Work(t.Context(), nil)
	require.ErrorIs(t, err, relaybus.ErrAlreadyRunning)
	cancel()
	require.NoError(t, bus.Stop(t.Context()))
	_, err = bus.Work(t.Context(), nil)
	require.ErrorIs(t, err, relaybus.ErrClosed)
}

// TestWorkContextDone: a cancelled context runs nothing; one cancelled by
// a handler gives back what the claim held and was not run yet, spending
// no attempt.
func TestWorkContextDone(t *testing.T) {
	t.Parallel()
	bus, _ := setupWork(t)
	ctx, cancel := context.WithCancel(t.Context())
	require.NoError(t, bus.Handle("e", "h", func(context.Context, *relaybus.Delivery) error {
		cancel()
		return nil
	}, nil))
	require.NoError(t, bus.Publish(t.Context(), &relaybus.Event{Type: "e"}, &relaybus.Event{Type: "e"}, &relaybus.Event{Type: "e"}))

	res, err := bus.Work(ctx, nil)
	require.ErrorIs(t, err, context.Canceled)
	require.Len(t, res.Worked, 3)
	require.Equal(t, relaybus.FinishCompleted, res.Worked[0].Outcome)
	for _, w := range res.Worked[1:] {
		require.Equal(t, relaybus.FinishReleased, w.Outcome)
	}
	st, err := bus.Statistics(t.Context())
	require.NoError(t, err)
	require.EqualValues(t, 2, st.Pending)

	res, err = bus.Work(ctx, nil)
	require.ErrorIs(t, err, context.Canceled)
	require.Empty(t, res.Worked)
}
