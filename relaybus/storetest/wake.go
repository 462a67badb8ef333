package storetest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/berkcansavur/relaybus/relaybus/driver"
)

// wakeWaitMax bounds how long the wake-up tests wait for a wake-up that
// must come. These are the suite's only tests on the real clock: a
// wake-up is sent and heard in real time. A store's wake-ups arrive in
// milliseconds; the bound is for a loaded machine.
const wakeWaitMax = 10 * time.Second

// testWake holds a store that offers wake-ups (driver.Waker) to what the
// Bus relies on: a commit that added deliveries wakes a listener, and the
// claim that wake-up makes sees them; WakeSend wakes it; the listener
// ends with its context; bad params are ErrInvalid. A store without the
// capability skips, saying so: the Bus polls on it.
func testWake[TTx any](t *testing.T, newEnv func(*testing.T) *env[TTx]) {
	// listen starts the store's listener and waits until it listens; the
	// returned stop cancels it and returns its error.
	listen := func(t *testing.T, e *env[TTx]) (woken <-chan struct{}, stop func() error) {
		t.Helper()
		w, ok := any(e.s).(driver.Waker)
		if !ok {
			t.Skip("the store offers no wake-ups (driver.Waker): a Bus on it polls")
		}
		ctx, cancel := context.WithCancel(e.ctx)
		c := make(chan struct{}, 1)
		listening := make(chan struct{})
		done := make(chan error, 1)
		go func() {
			done <- w.WakeListen(ctx, &driver.WakeListenParams{
				Listening: func() { close(listening) },
				Wake: func() {
					select {
					case c <- struct{}{}:
					default:
					}
				},
			})
		}()
		var once sync.Once
		var stopErr error
		stop = func() error {
			once.Do(func() {
				cancel()
				select {
				case stopErr = <-done:
				case <-time.After(wakeWaitMax):
					stopErr = errors.New("storetest: WakeListen did not return after its context was cancelled")
				}
			})
			return stopErr
		}
		t.Cleanup(func() { _ = stop() })
		select {
		case <-listening:
		case err := <-done:
			t.Fatalf("WakeListen returned before it listened: %v", err)
		case <-time.After(wakeWaitMax):
			t.Fatalf("WakeListen did not call Listening within %v", wakeWaitMax)
		}
		return c, stop
	}
	waitWake := func(t *testing.T, woken <-chan struct{}, what string) {
		t.Helper()
		select {
		case <-woken:
		case <-time.After(wakeWaitMax):
			t.Fatalf("no wake-up within %v after %s", wakeWaitMax, what)
		}
	}

	t.Run("CommitWakes", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		woken, _ := listen(t, e)
		ev, _ := e.publish(&eventOpts{})
		waitWake(t, woken, "a commit")
		// The wake-up came after the commit: the claim it makes sees the
		// delivery.
		d := e.claimOne(&claimOpts{})
		require.Equal(t, ev.ID, d.EventID)
	})

	t.Run("SendWakes", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		woken, _ := listen(t, e)
		require.NoError(t, any(e.s).(driver.Waker).WakeSend(e.ctx, &driver.WakeSendParams{}))
		waitWake(t, woken, "WakeSend")
	})

	t.Run("ListenEndsWithItsContext", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		_, stop := listen(t, e)
		err := stop()
		require.Error(t, err)
		require.True(t, errors.Is(err, context.Canceled), "WakeListen after its context was cancelled: %v", err)
	})

	t.Run("InvalidParams", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		w, ok := any(e.s).(driver.Waker)
		if !ok {
			t.Skip("the store offers no wake-ups (driver.Waker)")
		}
		requireInvalid(t, w.WakeListen(e.ctx, nil), "WakeListen(nil)")
		requireInvalid(t, w.WakeListen(e.ctx, &driver.WakeListenParams{}), "WakeListen without Wake")
		requireInvalid(t, w.WakeSend(e.ctx, nil), "WakeSend(nil)")
	})
}
