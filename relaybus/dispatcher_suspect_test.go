package relaybus

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// runLog records which handlers run at once, and every time a suspect
// shared the dispatcher with another handler.
type runLog struct {
	mu       sync.Mutex
	running  map[string]bool // event ID -> suspect
	overlaps []string
	started  chan string
	gates    map[string]chan struct{} // a handler waits for its gate, if any
}

func newRunLog(gated ...string) *runLog {
	l := &runLog{running: map[string]bool{}, started: make(chan string, 100), gates: map[string]chan struct{}{}}
	for _, id := range gated {
		l.gates[id] = make(chan struct{})
	}
	return l
}

func (l *runLog) handler(ctx context.Context, d *Delivery) error {
	l.mu.Lock()
	for other, suspect := range l.running {
		if suspect || d.Suspect {
			l.overlaps = append(l.overlaps, fmt.Sprintf("%s (suspect %v) beside %s (suspect %v)", d.EventID, d.Suspect, other, suspect))
		}
	}
	l.running[d.EventID] = d.Suspect
	l.mu.Unlock()
	l.started <- d.EventID
	var err error
	if g := l.gates[d.EventID]; g != nil {
		select {
		case <-g:
		case <-ctx.Done():
			err = ctx.Err()
		}
	}
	l.mu.Lock()
	delete(l.running, d.EventID)
	l.mu.Unlock()
	return err
}

// none checks that no handler starts for a while: what the dispatcher
// must not do is start one, so a short wait can only miss it, never
// report it wrongly.
func (l *runLog) none(t *testing.T, why string) {
	t.Helper()
	select {
	case id := <-l.started:
		t.Fatalf("%s started, but %s", id, why)
	case <-time.After(30 * time.Millisecond):
	}
}

func (l *runLog) noOverlaps(t *testing.T) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	require.Empty(t, l.overlaps)
}

func (tb *bundle) markSuspect(eventIDs ...string) {
	tb.store.mu.Lock()
	defer tb.store.mu.Unlock()
	for _, id := range eventIDs {
		tb.store.suspectEvents[id] = true
	}
}

// TestSuspectRunsAlone: a suspect that is the oldest due delivery is not
// claimed while anything else runs (a busy claim gets nothing), so the
// dispatcher drains; then it runs with nothing beside it, and only then
// does the dispatcher claim again.
func TestSuspectRunsAlone(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.Concurrency = 4
	cfg.BatchSize = 4
	tb := setup(t, cfg)
	tb.markSuspect("s")
	log := newRunLog("a1", "a2", "s")
	require.NoError(t, tb.bus.Handle("t", "h", log.handler, nil))
	ctx := context.Background()
	require.NoError(t, tb.bus.Publish(ctx, &Event{ID: "a1", Type: "t"}, &Event{ID: "a2", Type: "t"}))
	stop := tb.start(t)
	require.ElementsMatch(t, []string{"a1", "a2"}, []string{<-log.started, <-log.started})

	// The suspect is the oldest due delivery, so the busy dispatcher's
	// claims get nothing; b1 stays for later.
	require.NoError(t, tb.bus.Publish(ctx, &Event{ID: "s", Type: "t"}, &Event{ID: "b1", Type: "t"}))
	log.none(t, "a1 and a2 still run")
	for _, d := range tb.store.snapshot() {
		if d.EventID == "s" || d.EventID == "b1" {
			require.Equal(t, StatusPending, d.Status, "%s claimed by a busy dispatcher", d.EventID)
		}
	}
	close(log.gates["a1"])
	close(log.gates["a2"])
	require.Equal(t, "s", <-log.started)
	require.Equal(t, 2, tb.countStatus(StatusCompleted), "the suspect started before the others' completions were written")
	log.none(t, "the suspect runs")
	close(log.gates["s"])
	require.Equal(t, "b1", <-log.started)
	waitFor(t, "all completed", func() bool { return tb.countStatus(StatusCompleted) == 4 })
	stop()
	log.noOverlaps(t)
}

// TestSeveralSuspectsInOneClaim: a store that returns suspects together
// (or with other deliveries) still gets each suspect run alone: the first
// waits for the others, every further one is released unstarted, without
// spending an attempt, and runs alone when it is claimed again.
func TestSeveralSuspectsInOneClaim(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.Concurrency = 4
	cfg.BatchSize = 4
	tb := setup(t, cfg)
	tb.markSuspect("s1", "s2")
	tb.store.mixSuspects = true
	log := newRunLog()
	require.NoError(t, tb.bus.Handle("t", "h", log.handler, nil))
	require.NoError(t, tb.bus.Publish(context.Background(),
		&Event{ID: "s1", Type: "t"}, &Event{ID: "s2", Type: "t"}, &Event{ID: "n1", Type: "t"}))
	stop := tb.start(t)
	waitFor(t, "all completed", func() bool { return tb.countStatus(StatusCompleted) == 3 })
	stop()
	log.noOverlaps(t)
	require.GreaterOrEqual(t, tb.bus.DispatcherStats().Released, int64(1))
	for _, d := range tb.store.snapshot() {
		require.Equal(t, 1, d.Attempts, "%s: a release spent an attempt", d.EventID)
	}
}

// TestShutdownWhileASuspectWaits: a suspect that waits for the busy
// dispatcher to drain is never claimed by it; at the shutdown the other
// delivery is released, and both are pending with no attempt spent.
func TestShutdownWhileASuspectWaits(t *testing.T) {
	t.Parallel()
	tb, log, stop := suspectWaits(t)
	require.Equal(t, 1, tb.countStatus(StatusProcessing), "the busy dispatcher claimed the suspect")
	stop()
	requireSuspectUntouched(t, tb, log)
}

// suspectWaits starts a dispatcher that runs a1 until the shutdown
// cancels it, with the suspect s published after a1 started: s waits
// for the dispatcher to drain.
func suspectWaits(t *testing.T) (*bundle, *runLog, func()) {
	t.Helper()
	tb := setup(t, testConfig())
	tb.markSuspect("s")
	log := newRunLog("a1") // returns only when the shutdown cancels it
	require.NoError(t, tb.bus.Handle("t", "h", log.handler, nil))
	require.NoError(t, tb.bus.Publish(context.Background(), &Event{ID: "a1", Type: "t"}))
	stop := tb.start(t)
	require.Equal(t, "a1", <-log.started)
	require.NoError(t, tb.bus.Publish(context.Background(), &Event{ID: "s", Type: "t"}))
	log.none(t, "a1 runs and the suspect waits")
	return tb, log, stop
}

// requireSuspectUntouched checks, after suspectWaits' dispatcher
// stopped, that a1 and s are pending with no attempt spent, s never
// started, and only a1 was released.
func requireSuspectUntouched(t *testing.T, tb *bundle, log *runLog) {
	t.Helper()
	for _, d := range tb.store.snapshot() {
		require.Equal(t, StatusPending, d.Status, d.EventID)
		require.Zero(t, d.Attempts, "%s: a release spent an attempt", d.EventID)
	}
	log.none(t, "the suspect was never started")
	require.Equal(t, int64(1), tb.bus.DispatcherStats().Released, "the suspect was claimed after the shutdown began")
}

// TestShutdownDrainedIsNotIdle: the shutdown cancels the busy handler,
// whose release leaves the dispatcher with nothing in flight; a claim
// loop iteration that was already under way when the shutdown began must
// not take that drained state for idle and claim the waiting suspect (it
// would only release it unstarted). The fake store's HandlersPaused holds
// the iteration until the shutdown has drained the dispatcher, the
// interleaving that made TestShutdownWhileASuspectWaits flaky.
func TestShutdownDrainedIsNotIdle(t *testing.T) {
	t.Parallel()
	tb, log, stop := suspectWaits(t)
	stopped := make(chan struct{})
	var once sync.Once
	tb.store.mu.Lock()
	tb.store.pausedHook = func(ctx context.Context) {
		first := false
		once.Do(func() { first = true })
		if !first {
			return
		}
		go func() { stop(); close(stopped) }()
		<-ctx.Done()
		// Drained: a1 released and its worker's slot freed.
		// Polled here, on the claim loop's goroutine, where t.Fatal
		// must not be called.
		d := tb.bus.disp
		for deadline := time.Now().Add(5 * time.Second); d.inFlight(nil) > 0; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Error("the shutdown did not drain the dispatcher in 5s")
				return
			}
		}
	}
	tb.store.mu.Unlock()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("the claim loop never read the paused handlers, or the shutdown never ended")
	}

	requireSuspectUntouched(t, tb, log)
}
