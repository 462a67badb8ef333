package postgres_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/berkcansavur/relaybus/internal/dbenv/dbtest"
	"github.com/berkcansavur/relaybus/relaybus"
	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/postgres"
)

// The wake-up tests run a Bus on the store. With a poll of an hour
// (relaybus.MaxPollInterval), whatever runs within a test ran because
// of a wake-up or a (re)connect of the listener; with a short poll, the
// poll finds what a lost notification did not announce.

// wakeWait bounds every wait of these tests for something that must
// happen: wake-ups take milliseconds, the listener's probe behind a
// pooler seconds; the rest is room for a loaded machine.
const wakeWait = 20 * time.Second

// logLines collects a Bus's log while it runs.
type logLines struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logLines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *logLines) count(s string) int { return strings.Count(l.String(), s) }

// wakeBus is a running Bus on s with poll, logging to logs at Debug,
// whose handler of type "t" counts into handled. It is stopped when the
// test ends, before the pool closes.
type wakeBus struct {
	bus     *relaybus.Bus[pgx.Tx]
	logs    *logLines
	handled atomic.Int32
	stop    func()
}

func startWakeBus(t *testing.T, s *postgres.Store, poll time.Duration) *wakeBus {
	t.Helper()
	w := &wakeBus{logs: &logLines{}}
	bus, err := relaybus.New[pgx.Tx](s, relaybus.Config{
		Owner:        "wake-test",
		PollInterval: poll,
		Logger:       slog.New(slog.NewTextHandler(w.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	require.NoError(t, err)
	require.NoError(t, bus.Handle("t", "h", func(context.Context, *relaybus.Delivery) error {
		w.handled.Add(1)
		return nil
	}, nil))
	w.bus = bus
	require.NoError(t, bus.Start(context.Background()))
	var once sync.Once
	w.stop = func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), wakeWait)
			defer cancel()
			require.NoError(t, bus.Stop(ctx))
		})
	}
	t.Cleanup(w.stop)
	return w
}

func (w *wakeBus) publish(t *testing.T) {
	t.Helper()
	require.NoError(t, w.bus.Publish(t.Context(), &relaybus.Event{Type: "t"}))
}

// waitLog waits until the log holds s at least n times.
func (w *wakeBus) waitLog(t *testing.T, s string, n int) {
	t.Helper()
	eventually(t, fmt.Sprintf("%d× %q in the log", n, s), func() bool { return w.logs.count(s) >= n }, w.logs.String)
}

// waitHandled waits until n deliveries were handled.
func (w *wakeBus) waitHandled(t *testing.T, n int32) {
	t.Helper()
	eventually(t, fmt.Sprintf("%d handled", n), func() bool { return w.handled.Load() >= n }, w.logs.String)
}

func eventually(t *testing.T, what string, cond func() bool, context func() string) {
	t.Helper()
	deadline := time.Now().Add(wakeWait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s; the log:\n%s", wakeWait, what, context())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// proxiedStore is a set-up store on a fresh database whose connections
// all go through a listenProxy.
func proxiedStore(t *testing.T) (*postgres.Store, *listenProxy) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dbtest.TestDatabase(t))
	require.NoError(t, err)
	p := startListenProxy(t, fmt.Sprintf("%s:%d", cfg.ConnConfig.Host, cfg.ConnConfig.Port))
	cfg.ConnConfig.Host, cfg.ConnConfig.Port = "127.0.0.1", uint16(p.addr().Port)
	// In clear, whatever the URL's sslmode: the proxy reads the LISTEN.
	cfg.ConnConfig.TLSConfig, cfg.ConnConfig.Fallbacks = nil, nil
	cfg.MaxConns = testPoolMaxConns
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s, err := postgres.New(pool, nil)
	require.NoError(t, err)
	require.NoError(t, s.Setup(t.Context()))
	return s, p
}

// TestWakeupClaimsAtOnce: an idle Bus runs each publish as it commits,
// with a poll of an hour.
func TestWakeupClaimsAtOnce(t *testing.T) {
	t.Parallel()
	s, _ := setup(t, nil)
	w := startWakeBus(t, s, relaybus.MaxPollInterval)
	w.waitLog(t, "wake-ups on", 1)
	var worst time.Duration
	for i := range 5 {
		start := time.Now()
		w.publish(t)
		w.waitHandled(t, int32(i+1))
		worst = max(worst, time.Since(start))
		time.Sleep(20 * time.Millisecond) // idle again
	}
	t.Logf("publish to handled, worst of 5: %v", worst.Round(time.Microsecond))
}

// TestWakeupLostNotificationIsFoundByPoll: a notification that never
// reaches the listener costs latency, not the delivery: the poll runs it.
func TestWakeupLostNotificationIsFoundByPoll(t *testing.T) {
	t.Parallel()
	s, proxy := proxiedStore(t)
	w := startWakeBus(t, s, 300*time.Millisecond)
	w.waitLog(t, "wake-ups on", 1)
	release := proxy.hold() // nothing the server sends the listener arrives
	defer release()
	w.publish(t)
	w.waitHandled(t, 1)
}

// TestWakeupListenerReconnects: the listener's connection is cut, and the
// next ones are refused at their LISTEN for a while. Each loss is logged;
// a publish made meanwhile is announced to nobody; when the listener is
// back the Bus claims at once and runs it, within an hour's poll.
func TestWakeupListenerReconnects(t *testing.T) {
	t.Parallel()
	s, proxy := proxiedStore(t)
	w := startWakeBus(t, s, relaybus.MaxPollInterval)
	w.waitLog(t, "wake-ups on", 1)
	proxy.setRefuseListen(true)
	require.Equal(t, 1, proxy.dropListeners(), "one listener connection")
	w.waitLog(t, "wake-up listener lost", 2) // the cut, then a refused LISTEN
	w.publish(t)
	time.Sleep(100 * time.Millisecond)
	require.Zero(t, w.handled.Load(), "run while no one listened and the poll is an hour away")
	proxy.setRefuseListen(false)
	w.waitHandled(t, 1)
	w.waitLog(t, "wake-up listener back", 1)
	out := w.logs.String()
	require.Contains(t, out, "errors_in_a_row=2")
	// And it listens again: the next publish runs at once.
	w.publish(t)
	w.waitHandled(t, 2)
}

// TestWakeupShutdownWithListenerOpen: Stop ends the listener and closes
// its connection; the server has no listener session of the Bus left.
func TestWakeupShutdownWithListenerOpen(t *testing.T) {
	t.Parallel()
	s, pool := setup(t, nil)
	w := startWakeBus(t, s, relaybus.MaxPollInterval)
	w.waitLog(t, "wake-ups on", 1)
	listeners := func() int {
		var n int
		require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND application_name = 'relaybus wake-up listener'`).Scan(&n))
		return n
	}
	require.Equal(t, 1, listeners(), "the listener's session")
	start := time.Now()
	w.stop()
	require.Less(t, time.Since(start), 5*time.Second, "Stop with the listener open")
	eventually(t, "the listener's session to end", func() bool { return listeners() == 0 }, w.logs.String)
}

// bouncedStore is a set-up store whose pool goes through a PgBouncer in
// poolMode. exec mode: PgBouncer 1.18 does not carry named prepared
// statements across transactions (pgx's default caches them).
func bouncedStore(t *testing.T, poolMode string) *postgres.Store {
	t.Helper()
	dsn := startPgBouncer(t, dbtest.TestDatabase(t), poolMode)
	cfg, err := pgxpool.ParseConfig(dsn)
	require.NoError(t, err)
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
	cfg.MaxConns = testPoolMaxConns
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s, err := postgres.New(pool, nil)
	require.NoError(t, err)
	require.NoError(t, s.Setup(t.Context()))
	return s
}

// TestWakeupBehindPgBouncerTransactionPooling: behind PgBouncer in
// transaction pooling, LISTEN keeps no session; the listener finds that
// its own notification does not come back, the Bus says so once, at
// Warn, and polls.
func TestWakeupBehindPgBouncerTransactionPooling(t *testing.T) {
	t.Parallel()
	s := bouncedStore(t, "transaction")
	w := startWakeBus(t, s, 200*time.Millisecond)
	w.publish(t)
	w.waitHandled(t, 1)
	w.waitLog(t, "wake-ups unavailable here", 1)
	for range 3 {
		w.publish(t)
	}
	w.waitHandled(t, 4)
	out := w.logs.String()
	require.Equal(t, 1, strings.Count(out, "wake-ups unavailable here"), out)
	require.Contains(t, out, "level=WARN msg=\"relaybus: wake-ups unavailable here")
	require.Contains(t, out, "did not hear its own NOTIFY")
	require.NotContains(t, out, "wake-ups on")
}

// TestWakeupBehindPgBouncerSessionPooling: in session pooling the
// listener keeps its server connection, and wake-ups work.
func TestWakeupBehindPgBouncerSessionPooling(t *testing.T) {
	t.Parallel()
	s := bouncedStore(t, "session")
	w := startWakeBus(t, s, relaybus.MaxPollInterval)
	w.waitLog(t, "wake-ups on", 1)
	w.publish(t)
	w.waitHandled(t, 1)
	require.NotContains(t, w.logs.String(), "unavailable")
}

// TestWakeupsDisabledInStore: a store with Options.DisableWakeups
// announces nothing: its publishes and its WakeSend wake no listener (a
// Bus on a store of the same tables that announces, polling once an
// hour, runs nothing of them), and a Bus on it does not listen: it says
// so once and polls. The announcing store's next publish wakes the
// listener, and its claim takes everything due.
func TestWakeupsDisabledInStore(t *testing.T) {
	t.Parallel()
	loud, pool := setup(t, nil)
	quiet, err := postgres.New(pool, &postgres.Options{DisableWakeups: true})
	require.NoError(t, err)

	w := startWakeBus(t, loud, relaybus.MaxPollInterval)
	w.waitLog(t, "wake-ups on", 1)
	time.Sleep(200 * time.Millisecond) // past the claim that listening made, into the hour's wait
	pub, err := relaybus.New[pgx.Tx](quiet, relaybus.Config{Owner: "quiet-publisher"})
	require.NoError(t, err)
	require.NoError(t, pub.Declare("t", "h", nil))
	require.NoError(t, pub.Publish(t.Context(), &relaybus.Event{Type: "t"}, &relaybus.Event{Type: "t"}))
	require.NoError(t, quiet.WakeSend(t.Context(), &driver.WakeSendParams{}))
	// Long enough for an announced publish: TestWakeupClaimsAtOnce's
	// take milliseconds.
	time.Sleep(time.Second)
	require.Zero(t, w.handled.Load(), "a publish of a store that announces nothing woke the listener")

	w.publish(t)
	w.waitHandled(t, 3)

	// The announcing bus stops, handing its lanes back: it polls once an
	// hour and could hold the lane of the next event.
	w.stop()
	q := startWakeBus(t, quiet, 50*time.Millisecond)
	q.waitLog(t, "the store announces no work", 1)
	require.NoError(t, q.bus.Publish(t.Context(), &relaybus.Event{Type: "t"}))
	eventually(t, "the quiet bus's poll to run it", func() bool { return q.handled.Load() == 1 }, q.logs.String)
	require.Equal(t, 1, q.logs.count("the store announces no work"), q.logs.String())
	require.Zero(t, q.logs.count("wake-ups on"))
}
