package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"

	"github.com/berkcansavur/relaybus/relaybus/driver"
)

// Wake-ups (driver.Waker) on LISTEN/NOTIFY.
//
// A publish that adds deliveries announces them with pg_notify on the
// store's channel, queued in its own transaction, so that listeners hear
// of it when, and only if, it commits. That has a price at commit:
// PostgreSQL serialises the commits of notifying transactions (the commit
// takes a database-wide lock before it writes its commit record and holds
// it until the WAL is flushed), so notifying publishes lose group commit,
// and when they come faster than one flush after another they queue for
// the lock. Measured here with pgbench, 32 clients committing one-row
// inserts ran about 3,000 transactions/s without a notification and 650/s
// with one in each; and a store that notified in one publish per 2 ms ran
// 0.73x the publishes of one that did not, with 32 publishers on a loaded
// server whose commits took 25 ms (the harness, P=32 batch=1 pool=34).
//
// So a store has one notifying transaction at a time. A publish tries to
// announce itself when wakeNotifyInterval has passed since the last try:
// its statement (publishWake) notifies only if the store's last notifying
// transaction is no longer in progress (pg_xact_status), and returns the
// transaction id. The first publish after a quiet spell therefore
// announces itself, exactly at its commit. A publish that does not is
// owed: the next one that does covers it (its notification comes after
// the owed publish's statements and, as a rule, after its commit), or
// else a notification sent outside any transaction (wakeNotify: no
// transaction id, no WAL, no flush to wait for) wakeNotifyInterval after
// the last owed publish, and at most wakeOwedMax after the first; and
// once more wakeLateDelay after the last owed publish, for a transaction
// that committed later than those. Announcements are per store instance:
// several publishing processes have one notifying transaction each.
//
// What an announcement can miss, the poll finds: an owed publish whose
// transaction commits more than wakeLateDelay after its statements, when
// nothing is announced after it, waits for the next wake-up or poll. A
// notification is never needed for correctness.
//
// A listener (WakeListen) opens a connection of its own (not one of the
// pool's: a LISTEN must keep its session, and the pool would hand the
// connection to others), with the pool's connection settings, and LISTENs
// on the channel. It then checks that notifications reach it: it sends
// itself one from the pool and waits for it. Behind a pooler in
// transaction or statement mode (PgBouncer) the LISTEN ran on a server
// connection that was handed back as soon as the statement ended, so the
// probe never comes back: that is ErrWakeUnavailable, and the listener
// gives its LISTEN up. While it listens it pings the server every
// wakeKeepaliveInterval, so that a connection lost without a word (a
// network partition, a proxy that keeps the socket) is noticed and the
// Bus connects again.

// Bounds of wake-ups.
const (
	// wakeNotifyInterval is the least time between two publishes of one
	// store that try to announce themselves in their transaction (one
	// statement more in their last round trip), and the wait, after the
	// last owed publish, before the notification sent for it: a commit
	// here takes 1 to 3 ms (fsync about 2 ms), so a short transaction
	// has committed by then.
	wakeNotifyInterval = 2 * time.Millisecond
	// wakeOwedMax bounds the wait of an owed publish while publishes keep
	// coming and none can announce itself (the store's notifying
	// transaction is still open): a notification outside a transaction at
	// least this often. It costs a round trip on the pool each time, so it
	// is several times wakeNotifyInterval.
	wakeOwedMax = 10 * time.Millisecond
	// wakeLateDelay is when, after the last owed publish, the
	// notification for owed publishes is sent once more, for a
	// transaction that committed after the first (a loaded server).
	wakeLateDelay = 100 * time.Millisecond
	// wakeSendTimeout bounds a notification sent outside a publish (an
	// owed one, WakeSend, the probe).
	wakeSendTimeout = 5 * time.Second
	// wakeProbeTimeout bounds the wait for the listener's own probe: a
	// notification arrives in milliseconds; one that has not come in
	// this long is not coming (a pooler without sessions), or the
	// server is so loaded that polling is as good.
	wakeProbeTimeout = 3 * time.Second
	// wakeKeepaliveInterval is how long the listener waits for a
	// notification before it pings the server, and wakePingTimeout how
	// long the ping may take: a connection lost silently is noticed
	// within their sum.
	wakeKeepaliveInterval = 15 * time.Second
	wakePingTimeout       = 5 * time.Second
	// wakeCloseTimeout bounds closing the listener's connection.
	wakeCloseTimeout = 5 * time.Second
	// wakeChannelBytesMax: PostgreSQL channel names are identifiers
	// (NAMEDATALEN - 1 bytes); pg_notify refuses longer ones.
	wakeChannelBytesMax = 63
)

// wakeApplicationName is the listener connection's application_name
// (pg_stat_activity) when the pool's settings name none.
const wakeApplicationName = "relaybus wake-up listener"

// wakeProbePrefix starts the payload of a listener's probe; listeners
// ignore the probes of others.
const wakeProbePrefix = "probe:"

var _ driver.Waker = (*Store)(nil)

// wakeState is a store's wake-up statements and the coalescing of its
// announcements. The zero value is ready: the statements are rendered at
// first use.
type wakeState struct {
	once sync.Once
	sql  wakeQueries
	err  error

	coalesce wakeCoalescer
	// timer sends the notifications of owed publishes (wakeDue); made at
	// the first one, guarded by coalesce.mu.
	timer *time.Timer
}

// wakeQueries are the wake-up statements of a store.
type wakeQueries struct {
	channel  string
	publish  string // publishWake: a publish's try
	notify   string // wakeNotify: outside a publish
	listen   string // wakeListen
	unlisten string // wakeUnlisten
}

// wakeNames is what the wake-up templates are rendered with.
type wakeNames struct{ Channel string }

// wakeChannel is the channel of the validated schema and prefix:
// "<schema>.<prefix>wake", one channel per set of tables, so that the
// stores of other schemas in the database do not wake each other. A
// name too long for PostgreSQL keeps its beginning and ends in a hash of
// the whole.
func wakeChannel(schema, prefix string) string {
	name := schema + "." + prefix + "wake"
	if len(name) <= wakeChannelBytesMax {
		return name
	}
	h := fnv.New64a()
	h.Write([]byte(name))
	return fmt.Sprintf("%s_%016x", name[:wakeChannelBytesMax-17], h.Sum64())
}

// renderWakeQueries renders the wake-up statements for the validated
// schema and prefix.
func renderWakeQueries(schema, prefix string) (wakeQueries, error) {
	n := wakeNames{Channel: wakeChannel(schema, prefix)}
	q := wakeQueries{channel: n.Channel}
	for _, st := range []struct {
		name string
		dst  *string
	}{
		{"publishWake", &q.publish},
		{"wakeNotify", &q.notify},
		{"wakeListen", &q.listen},
		{"wakeUnlisten", &q.unlisten},
	} {
		sql, err := render(st.name, n)
		if err != nil {
			return wakeQueries{}, err
		}
		*st.dst = sql
	}
	return q, nil
}

// wakeQueries returns the store's wake-up statements.
func (s *Store) wakeQueries() (*wakeQueries, error) {
	w := &s.wake
	w.once.Do(func() { w.sql, w.err = renderWakeQueries(s.schema, s.prefix) })
	return &w.sql, w.err
}

// publishWakeTry is a publish's try to announce itself: its statement's
// argument and results, and when it was made.
type publishWakeTry struct {
	at       time.Time
	prev     *string // the store's last notifying transaction, or nil
	xid      string  // the publish's transaction
	notified bool
}

// wakeAtPublish is a publish that adds deliveries: it returns the try
// the publish makes (its batch runs publishWake), or nil when the
// publish is owed. Real time, not a Now of the params: this is a rate,
// like the Bus's timers, and writes no time anywhere.
func (s *Store) wakeAtPublish() *publishWakeTry {
	if s.noWakeups {
		return nil
	}
	now := time.Now()
	prev, try := s.wake.coalesce.publish(now)
	if !try {
		s.wakeArm(now)
		return nil
	}
	t := &publishWakeTry{at: now}
	if prev != "" {
		t.prev = &prev
	}
	return t
}

// wakeTried records how the publish's try went, once its batch ran; a
// batch that failed (err) announced nothing.
func (s *Store) wakeTried(t *publishWakeTry, err error) {
	if err != nil {
		s.wake.coalesce.tried(t.at, "", false, false)
		return
	}
	s.wake.coalesce.tried(t.at, t.xid, t.notified, true)
	s.wakeArm(time.Now())
}

// wakeArm sets the timer for the coalescer's next due notification, if
// it is sooner than the one set.
func (s *Store) wakeArm(now time.Time) {
	w := &s.wake
	w.coalesce.mu.Lock()
	defer w.coalesce.mu.Unlock()
	d, ok := w.coalesce.arm(now)
	if !ok {
		return
	}
	if w.timer == nil {
		w.timer = time.AfterFunc(d, s.wakeDue)
	} else {
		w.timer.Reset(d)
	}
}

// wakeDue runs when a notification of owed publishes may be due: it
// sends it, and sets the timer again for what is still to come.
func (s *Store) wakeDue() {
	now := time.Now()
	send := s.wake.coalesce.due(now)
	s.wakeArm(now)
	if !send {
		return
	}
	q, err := s.wakeQueries()
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), wakeSendTimeout)
	defer cancel()
	// A hint: if it fails (the pool closed, the server down), the poll
	// finds what it announced.
	_, _ = s.pool.Exec(ctx, q.notify, "")
}

// wakeCoalescer decides which publishes try to announce themselves and
// when the notifications of the others are due (see the top of this
// file). Times are the real clock's; the caller holds no lock.
type wakeCoalescer struct {
	mu sync.Mutex
	// triedAt is when a publish last tried to announce itself; trying,
	// that its batch has not come back yet (a try waits for the last
	// one's answer: until then, the store's notifier is not known).
	triedAt time.Time
	trying  bool
	// notifier is the transaction id of the store's last publish that
	// notified; "" for none.
	notifier string
	// firstOwed and lastOwed are the first and last publishes not
	// announced since the last notification; zero when none is.
	firstOwed, lastOwed time.Time
	// lateAt is when the late notification is due; zero when none is.
	lateAt time.Time
	// armedAt is when the timer fires; zero when it is not set. Guarded
	// by mu, as the timer itself.
	armedAt time.Time
}

// publish is a publish at now: it reports whether it tries to announce
// itself, with the store's last notifying transaction for its
// statement; if not, it is owed.
func (c *wakeCoalescer) publish(now time.Time) (prev string, try bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.trying && (c.triedAt.IsZero() || now.Sub(c.triedAt) >= wakeNotifyInterval) {
		c.triedAt, c.trying = now, true
		return c.notifier, true
	}
	c.owe(now)
	return "", false
}

// tried records the outcome of the try made at at: it notified in
// transaction xid, or not (the store's notifying transaction was still
// open), when it is owed; or, when its batch failed (!ran), nothing,
// since its publish will not commit.
func (c *wakeCoalescer) tried(at time.Time, xid string, notified, ran bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.trying = false
	if !ran {
		return
	}
	if !notified {
		c.owe(at)
		return
	}
	c.notifier = xid
	// It covers the publishes owed before it; not those owed while its
	// statement was under way, which may have run after its notify.
	if !c.lastOwed.After(at) {
		c.firstOwed, c.lastOwed = time.Time{}, time.Time{}
	}
}

// owe records a publish at now that was not announced. c.mu is held.
func (c *wakeCoalescer) owe(now time.Time) {
	if c.firstOwed.IsZero() {
		c.firstOwed = now
	}
	if now.After(c.lastOwed) {
		c.lastOwed = now
	}
	if late := now.Add(wakeLateDelay); late.After(c.lateAt) {
		c.lateAt = late
	}
}

// owedDue is when the notification of the owed publishes is due (c.mu
// held, something owed): an interval after the last, and no later than
// wakeOwedMax after the first.
func (c *wakeCoalescer) owedDue() time.Time {
	at := c.lastOwed.Add(wakeNotifyInterval)
	if limit := c.firstOwed.Add(wakeOwedMax); limit.Before(at) {
		at = limit
	}
	return at
}

// next is when the next notification of owed publishes is due, if one
// is. c.mu is held.
func (c *wakeCoalescer) next() (time.Time, bool) {
	var at time.Time
	if !c.firstOwed.IsZero() {
		at = c.owedDue()
	}
	if !c.lateAt.IsZero() && (at.IsZero() || c.lateAt.Before(at)) {
		at = c.lateAt
	}
	return at, !at.IsZero()
}

// arm reports how long from now the timer must fire, when a
// notification is due sooner than the timer is set. c.mu is held.
func (c *wakeCoalescer) arm(now time.Time) (time.Duration, bool) {
	at, ok := c.next()
	if !ok || (!c.armedAt.IsZero() && !at.Before(c.armedAt)) {
		return 0, false
	}
	c.armedAt = at
	return max(at.Sub(now), 0), true
}

// due is the timer firing at now: it reports whether to send a
// notification now, and forgets what that covers.
func (c *wakeCoalescer) due(now time.Time) (send bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.armedAt = time.Time{}
	if !c.firstOwed.IsZero() && !now.Before(c.owedDue()) {
		c.firstOwed, c.lastOwed = time.Time{}, time.Time{}
		send = true
	}
	if !c.lateAt.IsZero() && !now.Before(c.lateAt) {
		c.lateAt = time.Time{}
		send = true
	}
	return send
}

// WakeListen implements driver.Waker: it listens on a connection of its
// own, with the pool's settings, and calls params.Wake for every
// notification on the store's channel (see the top of this file). It
// calls params.Listening once its own probe has come back, and returns
// an error wrapping driver.ErrWakeUnavailable when it does not (a pooler
// in transaction or statement mode), after giving up its LISTEN.
func (s *Store) WakeListen(ctx context.Context, params *driver.WakeListenParams) error {
	if err := params.Validate(); err != nil {
		return err
	}
	if s.noWakeups {
		return fmt.Errorf("relaybus/postgres: wake: the store's Options.DisableWakeups is set: it announces nothing: %w", driver.ErrWakeDisabled)
	}
	q, err := s.wakeQueries()
	if err != nil {
		return err
	}
	cfg := s.pool.Config().ConnConfig
	if cfg.RuntimeParams == nil {
		cfg.RuntimeParams = map[string]string{}
	}
	if cfg.RuntimeParams["application_name"] == "" {
		cfg.RuntimeParams["application_name"] = wakeApplicationName
	}
	// The listener's waits end by their context's deadline (keepalive):
	// a deadline on the socket, never a cancel request, which would cost
	// the server a connection every wakeKeepaliveInterval.
	cfg.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.DeadlineContextWatcherHandler{Conn: c.Conn()}
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return s.wakeError(ctx, "wake: connect", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), wakeCloseTimeout)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	if _, err := conn.Exec(ctx, q.listen); err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "0A000" { // feature_not_supported: a pooler refusing LISTEN
			return fmt.Errorf("relaybus/postgres: wake: LISTEN refused: %w: %w", driver.ErrWakeUnavailable, err)
		}
		return s.wakeError(ctx, "wake: listen", err)
	}
	if err := s.wakeProbe(ctx, conn, q); err != nil {
		if errors.Is(err, driver.ErrWakeUnavailable) {
			uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), wakeCloseTimeout)
			_, _ = conn.Exec(uctx, q.unlisten)
			cancel()
		}
		return err
	}
	if params.Listening != nil {
		params.Listening()
	}
	for {
		wctx, cancel := context.WithTimeout(ctx, wakeKeepaliveInterval)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		switch {
		case err == nil:
			if !isWakeProbe(n.Payload) {
				params.Wake()
			}
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, context.DeadlineExceeded):
			pctx, cancel := context.WithTimeout(ctx, wakePingTimeout)
			err := conn.Ping(pctx)
			cancel()
			if err != nil {
				return s.wakeError(ctx, "wake: keepalive", err)
			}
		default:
			return s.wakeError(ctx, "wake: wait", err)
		}
	}
}

// wakeProbe sends a notification from the pool and waits for it on conn,
// which listens: it comes back unless the LISTEN did not keep its
// session.
func (s *Store) wakeProbe(ctx context.Context, conn *pgx.Conn, q *wakeQueries) error {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	token := wakeProbePrefix + hex.EncodeToString(b[:])
	sctx, cancel := context.WithTimeout(ctx, wakeSendTimeout)
	_, err := s.pool.Exec(sctx, q.notify, token)
	cancel()
	if err != nil {
		return s.wakeError(ctx, "wake: probe", err)
	}
	wctx, cancel := context.WithTimeout(ctx, wakeProbeTimeout)
	defer cancel()
	for {
		n, err := conn.WaitForNotification(wctx)
		switch {
		case err == nil:
			if n.Payload == token {
				return nil
			}
			// Another's probe or a wake-up: Listening claims anyway.
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, context.DeadlineExceeded):
			return fmt.Errorf("relaybus/postgres: wake: LISTEN %q did not hear its own NOTIFY within %v "+
				"(a connection pooler in transaction or statement mode, such as PgBouncer, keeps no session for LISTEN): %w",
				q.channel, wakeProbeTimeout, driver.ErrWakeUnavailable)
		default:
			return s.wakeError(ctx, "wake: probe", err)
		}
	}
}

// wakeError is errorFrom for the listener, or ctx's error once ctx is
// done (the error of a call that ctx interrupted says less).
func (s *Store) wakeError(ctx context.Context, op string, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return errorFrom(op, err)
}

func isWakeProbe(payload string) bool { return strings.HasPrefix(payload, wakeProbePrefix) }

// WakeSend implements driver.Waker: one notification on the store's
// channel, outside any transaction.
func (s *Store) WakeSend(ctx context.Context, params *driver.WakeSendParams) error {
	if err := params.Validate(); err != nil {
		return err
	}
	if s.noWakeups {
		return nil
	}
	q, err := s.wakeQueries()
	if err != nil {
		return err
	}
	if _, err := s.pool.Exec(ctx, q.notify, ""); err != nil {
		return errorFrom("wake: send", err)
	}
	return nil
}
