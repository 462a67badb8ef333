package relaybus

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestMiddleware: Config.Middleware wraps every handler, outermost first,
// outside each handler's own; a middleware sees the delivery and the
// handler's context, decides the outcome with what it returns, and may
// skip the handler; a panic in one is a handler panic; transactional
// handlers run the chain inside their transaction.
func TestMiddleware(t *testing.T) {
	t.Parallel()
	type trace struct {
		mu    sync.Mutex
		calls []string
	}
	record := func(tr *trace, name string) Middleware {
		return func(ctx context.Context, d *Delivery, next func(context.Context) error) error {
			tr.mu.Lock()
			tr.calls = append(tr.calls, name+">"+d.Handler)
			tr.mu.Unlock()
			err := next(ctx)
			tr.mu.Lock()
			tr.calls = append(tr.calls, "<"+name)
			tr.mu.Unlock()
			return err
		}
	}
	t.Run("order and context", func(t *testing.T) {
		t.Parallel()
		var tr trace
		type ctxKey struct{}
		cfg := testConfig()
		cfg.Middleware = []Middleware{record(&tr, "bus1"), record(&tr, "bus2"),
			func(ctx context.Context, _ *Delivery, next func(context.Context) error) error {
				return next(context.WithValue(ctx, ctxKey{}, "from middleware"))
			}}
		tb := setup(t, cfg)
		var seen any
		require.NoError(t, tb.bus.Handle("t", "h", func(ctx context.Context, _ *Delivery) error {
			seen = ctx.Value(ctxKey{})
			tr.mu.Lock()
			tr.calls = append(tr.calls, "handler")
			tr.mu.Unlock()
			return nil
		}, &HandlerOptions{Middleware: []Middleware{record(&tr, "own")}}))
		publishN(t, tb.bus, "t", 1, nil)
		stop := tb.start(t)
		waitFor(t, "completed", func() bool { return tb.countStatus(StatusCompleted) == 1 })
		stop()
		tr.mu.Lock()
		defer tr.mu.Unlock()
		require.Equal(t, []string{"bus1>h", "bus2>h", "own>h", "handler", "<own", "<bus2", "<bus1"}, tr.calls)
		require.Equal(t, "from middleware", seen)
	})
	t.Run("the outcome is the middleware's", func(t *testing.T) {
		t.Parallel()
		cfg := testConfig()
		cfg.MaxAttempts = 2
		cfg.Middleware = []Middleware{func(ctx context.Context, d *Delivery, next func(context.Context) error) error {
			switch d.Handler {
			case "skipped":
				return nil // completes without running the handler
			case "forgiven":
				if err := next(ctx); err != nil {
					return nil
				}
				return errors.New("unreachable")
			case "blamed":
				_ = next(ctx)
				return Permanent(errors.New("refused by middleware"))
			}
			panic("middleware broke")
		}}
		tb := setup(t, cfg)
		var ran sync.Map
		for _, name := range []string{"skipped", "forgiven", "blamed", "panics"} {
			require.NoError(t, tb.bus.Handle("t", name, func(_ context.Context, d *Delivery) error {
				ran.Store(d.Handler, true)
				return fmt.Errorf("handler %s fails", d.Handler)
			}, nil))
		}
		publishN(t, tb.bus, "t", 1, nil)
		stop := tb.start(t)
		waitFor(t, "all ended", func() bool {
			return tb.countStatus(StatusCompleted) == 2 && tb.countStatus(StatusDead) == 2
		})
		stop()
		status := map[string]Status{}
		for _, d := range tb.store.snapshot() {
			status[d.Handler] = d.Status
		}
		require.Equal(t, map[string]Status{"skipped": StatusCompleted, "forgiven": StatusCompleted, "blamed": StatusDead, "panics": StatusDead}, status)
		_, skippedRan := ran.Load("skipped")
		require.False(t, skippedRan)
		require.Equal(t, int64(2), tb.bus.DispatcherStats().Panics, "the middleware's panic, recovered at each of 2 attempts")
	})
	t.Run("transactional handlers", func(t *testing.T) {
		t.Parallel()
		var tr trace
		cfg := testConfig()
		cfg.Middleware = []Middleware{record(&tr, "bus")}
		tb := setup(t, cfg)
		require.NoError(t, tb.bus.HandleTx("t", "h", func(_ context.Context, tx *fakeTx, d *Delivery) error {
			tx.Write(d.EventID)
			return nil
		}, nil))
		publishN(t, tb.bus, "t", 1, nil)
		stop := tb.start(t)
		waitFor(t, "completed", func() bool { return tb.countStatus(StatusCompleted) == 1 })
		stop()
		tr.mu.Lock()
		defer tr.mu.Unlock()
		require.Equal(t, []string{"bus>h", "<bus"}, tr.calls)
	})
	t.Run("nil middleware is refused", func(t *testing.T) {
		t.Parallel()
		cfg := testConfig()
		cfg.Middleware = []Middleware{nil}
		_, err := New[*fakeTx](spy[*fakeTx](newFakeStore()), cfg)
		require.ErrorIs(t, err, ErrInvalid)
		require.ErrorContains(t, err, "Config.Middleware")
		tb := setup(t, testConfig())
		err = tb.bus.Handle("t", "h", noop, &HandlerOptions{Middleware: []Middleware{nil}})
		require.ErrorIs(t, err, ErrInvalid)
		require.ErrorContains(t, err, `handler "h": a nil Middleware`)
	})
	t.Run("a handler's own list does not alias the bus's", func(t *testing.T) {
		t.Parallel()
		var tr trace
		cfg := testConfig()
		cfg.Middleware = make([]Middleware, 1, 4) // spare capacity an append would share
		cfg.Middleware[0] = record(&tr, "bus")
		tb := setup(t, cfg)
		require.NoError(t, tb.bus.Handle("t", "a", noop, &HandlerOptions{Middleware: []Middleware{record(&tr, "a")}}))
		require.NoError(t, tb.bus.Handle("t", "b", noop, &HandlerOptions{Middleware: []Middleware{record(&tr, "b")}}))
		publishN(t, tb.bus, "t", 1, nil)
		stop := tb.start(t)
		waitFor(t, "completed", func() bool { return tb.countStatus(StatusCompleted) == 2 })
		stop()
		tr.mu.Lock()
		defer tr.mu.Unlock()
		require.True(t, slices.Contains(tr.calls, "a>a") && slices.Contains(tr.calls, "b>b"), "%v", tr.calls)
		require.False(t, slices.Contains(tr.calls, "b>a") || slices.Contains(tr.calls, "a>b"), "%v", tr.calls)
	})
}
