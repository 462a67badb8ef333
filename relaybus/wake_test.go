package relaybus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/berkcansavur/relaybus/relaybus/driver"
)

// scriptedWaker is a store with a driver.Waker the test drives: the n-th
// call of WakeListen (from 0) runs listens[n], and once the script is
// used up a call listens until its context is done. wake, when a listen
// of the script passes it on, lets the test send wake-ups.
type scriptedWaker struct {
	Store[*fakeTx]
	listens []func(ctx context.Context, p *driver.WakeListenParams) error

	mu      sync.Mutex
	calls   int // WakeListen calls so far
	open    int // WakeListen calls that have not returned
	sends   int // WakeSend calls
	current *driver.WakeListenParams
}

func (w *scriptedWaker) WakeListen(ctx context.Context, p *driver.WakeListenParams) error {
	if err := p.Validate(); err != nil {
		return err
	}
	w.mu.Lock()
	n := w.calls
	w.calls++
	w.open++
	w.current = p
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		w.open--
		w.mu.Unlock()
	}()
	if n < len(w.listens) {
		return w.listens[n](ctx, p)
	}
	return listenUntilDone(ctx, p)
}

func (w *scriptedWaker) WakeSend(_ context.Context, p *driver.WakeSendParams) error {
	if err := p.Validate(); err != nil {
		return err
	}
	w.mu.Lock()
	w.sends++
	w.mu.Unlock()
	return nil
}

// wake sends a wake-up to the listen running now.
func (w *scriptedWaker) wake() {
	w.mu.Lock()
	p := w.current
	w.mu.Unlock()
	p.Wake()
}

func (w *scriptedWaker) counts() (calls, open, sends int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.calls, w.open, w.sends
}

// listenUntilDone is a listener that works and hears nothing.
func listenUntilDone(ctx context.Context, p *driver.WakeListenParams) error {
	p.Listening()
	<-ctx.Done()
	return ctx.Err()
}

// wakeSetup is setup with the store wrapped in w.
func wakeSetup(t *testing.T, cfg Config, w *scriptedWaker) *bundle {
	t.Helper()
	tb := setup(t, cfg)
	w.Store = tb.spy
	b, err := New[*fakeTx](w, cfg)
	require.NoError(t, err)
	tb.bus = b
	require.NoError(t, b.Handle("t", "h", noop, nil))
	return tb
}

// waitListening waits until w's listener is open and the claim loop has
// claimed since (Listening makes it claim): with a long poll it is then
// idle, waiting for a wake-up.
func (tb *bundle) waitListening(t *testing.T, w *scriptedWaker) {
	t.Helper()
	waitFor(t, "the listener", func() bool { _, open, _ := w.counts(); return open == 1 })
	waitFor(t, "a claim", func() bool { return tb.claimCalls() >= 1 })
	time.Sleep(20 * time.Millisecond) // past the claim Listening asked for, into the wait
}

// TestWakeupWakesIdleClaimLoop: a wake-up makes an idle claim loop claim
// at once; with an hour's poll nothing else would.
func TestWakeupWakesIdleClaimLoop(t *testing.T) {
	t.Parallel()
	w := &scriptedWaker{}
	tb := wakeSetup(t, longPoll(testConfig()), w)
	tb.start(t)
	tb.waitListening(t, w)
	before := tb.claimCalls()
	publishN(t, tb.bus, "t", 1, nil)
	time.Sleep(20 * time.Millisecond)
	require.Equal(t, before, tb.claimCalls(), "no claim without a wake-up (the poll is an hour)")
	w.wake()
	waitFor(t, "the delivery completed after the wake-up", func() bool { return tb.countStatus(StatusCompleted) == 1 })
}

// TestWakeupLostIsFoundByPoll: a listener that never hears the publish
// (a lost notification) costs latency, not the delivery: the poll finds
// it.
func TestWakeupLostIsFoundByPoll(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.PollInterval = 50 * time.Millisecond
	w := &scriptedWaker{}
	tb := wakeSetup(t, cfg, w)
	tb.start(t)
	waitFor(t, "the listener", func() bool { _, open, _ := w.counts(); return open == 1 })
	publishN(t, tb.bus, "t", 3, nil)
	waitFor(t, "the poll to find every delivery", func() bool { return tb.countStatus(StatusCompleted) == 3 })
}

// TestWakeupListenerReconnects: a listener whose connection is lost is
// started again after a backoff, each loss and the return logged, and
// the claim loop claims at once when it is back: what was published while
// nobody listened runs then, without a wake-up and within an hour's poll.
func TestWakeupListenerReconnects(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	cfg := longPoll(testConfig())
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	drop := make(chan struct{})
	var tb *bundle
	w := &scriptedWaker{listens: []func(context.Context, *driver.WakeListenParams) error{
		func(ctx context.Context, p *driver.WakeListenParams) error {
			p.Listening()
			select {
			case <-drop:
				return errors.New("connection reset by peer")
			case <-ctx.Done():
				return ctx.Err()
			}
		},
		func(context.Context, *driver.WakeListenParams) error {
			// While it is down, an event is published: its wake-up is lost.
			publishN(t, tb.bus, "t", 1, nil)
			return errors.New("connection refused")
		},
	}}
	tb = wakeSetup(t, cfg, w)
	tb.start(t)
	tb.waitListening(t, w)
	close(drop)
	waitFor(t, "the listener back", func() bool { calls, open, _ := w.counts(); return calls == 3 && open == 1 })
	waitFor(t, "the delivery published while it was down", func() bool { return tb.countStatus(StatusCompleted) == 1 })
	out := logs.String()
	require.Equal(t, 2, strings.Count(out, "wake-up listener lost"), out)
	require.Contains(t, out, "connection reset by peer")
	require.Contains(t, out, "errors_in_a_row=2")
	require.Equal(t, 1, strings.Count(out, "wake-up listener back"), out)
}

// TestWakeupUnavailableSaidOnce: a store that finds wake-ups cannot work
// here (a pooler without sessions) is said so once, at Warn, and the
// dispatcher polls.
func TestWakeupUnavailableSaidOnce(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	cfg := testConfig()
	cfg.PollInterval = 20 * time.Millisecond
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	unavailable := func(context.Context, *driver.WakeListenParams) error {
		return errors.Join(driver.ErrWakeUnavailable, errors.New("no notification came back"))
	}
	w := &scriptedWaker{listens: []func(context.Context, *driver.WakeListenParams) error{unavailable, unavailable}}
	tb := wakeSetup(t, cfg, w)
	tb.start(t)
	publishN(t, tb.bus, "t", 2, nil)
	waitFor(t, "the poll to find the deliveries", func() bool { return tb.countStatus(StatusCompleted) == 2 })
	out := logs.String()
	require.Equal(t, 1, strings.Count(out, "wake-ups unavailable here"), out)
	require.Contains(t, out, "level=WARN")
	require.Contains(t, out, "no notification came back")
	calls, _, _ := w.counts()
	require.Equal(t, 1, calls, "it checks again only after wakeUnavailableRetry")
}

// TestWakeupsDisabled: with DisableWakeups the dispatcher neither listens
// nor announces the lanes it hands back.
func TestWakeupsDisabled(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.DisableWakeups = true
	w := &scriptedWaker{}
	tb := wakeSetup(t, cfg, w)
	stop := tb.start(t)
	publishN(t, tb.bus, "t", 1, nil)
	waitFor(t, "the poll to find the delivery", func() bool { return tb.countStatus(StatusCompleted) == 1 })
	stop()
	calls, _, sends := w.counts()
	require.Zero(t, calls, "WakeListen")
	require.Zero(t, sends, "WakeSend")
}

// TestWakeupShutdownWithListenerOpen: the shutdown ends the listener
// (its context is cancelled) and waits for it, and then announces the
// lanes it handed back; Stop returns promptly. goleak (TestMain) checks
// that no goroutine is left behind.
func TestWakeupShutdownWithListenerOpen(t *testing.T) {
	t.Parallel()
	w := &scriptedWaker{}
	tb := wakeSetup(t, longPoll(testConfig()), w)
	stop := tb.start(t)
	waitFor(t, "the listener", func() bool { _, open, _ := w.counts(); return open == 1 })
	start := time.Now()
	stop()
	require.Less(t, time.Since(start), 2*time.Second, "Stop with the listener open")
	calls, open, sends := w.counts()
	require.Equal(t, 1, calls)
	require.Zero(t, open, "the listener returned before Stop did")
	require.Equal(t, 1, sends, "one wake-up for the lanes handed back")
}

// TestWakeRetryDelay: the listener's backoff doubles from wakeRetryMin,
// spread by at most wakeRetryJitter, and never passes wakeRetryMax.
func TestWakeRetryDelay(t *testing.T) {
	t.Parallel()
	for n := 1; n <= 20; n++ {
		d := wakeRetryDelay(n)
		want := min(wakeRetryMin<<min(n-1, 30), wakeRetryMax)
		lo := time.Duration(float64(want) * (1 - wakeRetryJitter))
		require.GreaterOrEqual(t, d, lo, "failure %d", n)
		require.LessOrEqual(t, d, wakeRetryMax, "failure %d", n)
		require.LessOrEqual(t, d, time.Duration(float64(want)*(1+wakeRetryJitter)), "failure %d", n)
	}
}

// TestWakeClaimGap: a wake-up claims no sooner than the last claim took
// after it ended, and waits at most wakeClaimGapMax.
func TestWakeClaimGap(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_000_000, 0)
	var w wakeups
	require.LessOrEqual(t, w.gap(t0), time.Duration(0), "no claim yet")
	w.claimed(t0, t0.Add(5*time.Millisecond))
	require.Equal(t, 5*time.Millisecond, w.gap(t0.Add(5*time.Millisecond)))
	require.Equal(t, 2*time.Millisecond, w.gap(t0.Add(8*time.Millisecond)))
	require.LessOrEqual(t, w.gap(t0.Add(20*time.Millisecond)), time.Duration(0))
	w.claimed(t0, t0.Add(time.Second))
	require.Equal(t, wakeClaimGapMax, w.gap(t0.Add(time.Second)), "a slow claim")
}

// TestWakeupDisabledInStore: a store configured to announce nothing
// (driver.ErrWakeDisabled) is listened to once: the Bus says so at Info,
// never listens again, and polls.
func TestWakeupDisabledInStore(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	cfg := testConfig()
	cfg.PollInterval = 20 * time.Millisecond
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	disabled := func(context.Context, *driver.WakeListenParams) error {
		return fmt.Errorf("store option set: %w", driver.ErrWakeDisabled)
	}
	w := &scriptedWaker{listens: []func(context.Context, *driver.WakeListenParams) error{disabled, disabled}}
	tb := wakeSetup(t, cfg, w)
	stop := tb.start(t)
	publishN(t, tb.bus, "t", 2, nil)
	waitFor(t, "the poll to find the deliveries", func() bool { return tb.countStatus(StatusCompleted) == 2 })
	time.Sleep(5 * wakeRetryMin) // past the first retries a listener that failed makes
	stop()
	out := logs.String()
	require.Equal(t, 1, strings.Count(out, "the store announces no work"), out)
	require.Contains(t, out, "level=INFO")
	require.NotContains(t, out, "level=WARN")
	calls, _, _ := w.counts()
	require.Equal(t, 1, calls, "a store that announces nothing is not listened to again")
}

// TestWakeGapYieldsToAFreedKey: a keyed delivery that finishes while a
// wake-up waits out its claim gap ends the wait (the claim it would have
// made without wake-ups is not held back). The gap is the most a slow
// claim gives (wakeClaimGapMax); the freed key comes once the loop waits
// in it. Before, the wait ran to its end and left the freed key's signal
// for the next idle.
func TestWakeGapYieldsToAFreedKey(t *testing.T) {
	t.Parallel()
	d := &dispatcher[struct{}]{cfg: Config{PollInterval: time.Hour}, keyFreed: make(chan struct{}, 1)}
	w := &wakeups{c: make(chan struct{}, 1)}
	now := time.Now()
	w.claimed(now.Add(-time.Second), now)
	signal(w.c)
	done := make(chan struct{})
	go func() {
		defer close(done)
		d.idle(t.Context(), w)
	}()
	time.Sleep(wakeClaimGapMax / 4) // the loop has taken the wake-up and waits in the gap
	signal(d.keyFreed)
	<-done
	select {
	case <-d.keyFreed:
		t.Fatal("the freed key's signal was left for the next idle: the gap held the claim back")
	default:
	}
}
