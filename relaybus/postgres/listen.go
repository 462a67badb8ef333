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
// it until the WAL is flushed), so a notification in every publish would
// take group commit away from publishes. Measured here with pgbench, 32
// clients committing one-row inserts ran about 3,000 transactions/s
// without a notification and 650/s with one in each. So a store announces
// at most one publish per wakeNotifyInterval in its transaction: the first
// after a quiet interval, so sparse traffic waits for nothing. A publish
// within the interval is owed: the next announced publish covers it, or,
// when none comes, a notification sent outside any transaction
// wakeNotifyInterval after it (its transaction has committed by then, as
// a short one does; such a notification writes no WAL, so it waits for no
// flush). Announcements are per store instance: several publishing
// processes announce up to once per interval each.
//
// What an announcement can miss, the poll finds: a publish whose
// transaction commits more than wakeNotifyInterval after its statements,
// when no publish follows it, is announced before it commits, and its
// deliveries wait for the next wake-up or poll. A notification is never
// needed for correctness.
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
	// store that announce themselves in their transaction. Publishes in
	// between wait for the next announcement, at most this long when
	// publishes keep coming. 2 ms keeps the notifying commits of a
	// process apart (a commit here takes 1 to 3 ms: fsync about 2 ms),
	// so they seldom queue for NOTIFY's lock.
	wakeNotifyInterval = 2 * time.Millisecond
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
	timer    *time.Timer // sends an owed notification; guarded by coalesce.mu
}

// wakeQueries are the wake-up statements of a store.
type wakeQueries struct {
	channel  string
	notify   string // publishWake
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
		{"publishWake", &q.notify},
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

// wakeAtPublish reports whether the publish running now announces itself
// in its transaction. When it does not, it is owed, and an owed
// notification is scheduled. Real time, not a Now of the params: this is
// a rate, like the Bus's timers, and writes no time anywhere.
func (s *Store) wakeAtPublish() bool {
	w := &s.wake
	notify, arm := w.coalesce.publish(time.Now())
	if arm > 0 {
		w.coalesce.mu.Lock()
		if w.timer == nil {
			w.timer = time.AfterFunc(arm, s.wakeOwed)
		} else {
			w.timer.Reset(arm)
		}
		w.coalesce.mu.Unlock()
	}
	return notify
}

// wakeOwed runs when an owed notification may be due: it sends it, or
// waits on for a publish owed since.
func (s *Store) wakeOwed() {
	w := &s.wake
	send, again := w.coalesce.due(time.Now())
	if again > 0 {
		w.coalesce.mu.Lock()
		w.timer.Reset(again)
		w.coalesce.mu.Unlock()
	}
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

// wakeCoalescer decides which publishes announce themselves: at most one
// per interval, and one notification sent later for those that did not
// (see the top of this file). Times are the real clock's.
type wakeCoalescer struct {
	mu sync.Mutex
	// last is when the last announcement was queued in a publish or sent.
	last time.Time
	// owedAt is when the last publish left unannounced ran; zero when
	// none is owed.
	owedAt time.Time
	// armed: the owed notification's timer is set.
	armed bool
}

// publish is a publish at now: it reports whether it announces itself,
// and how long from now the owed notification's timer must fire, if it
// must be set (0: no timer to set).
func (c *wakeCoalescer) publish(now time.Time) (notify bool, arm time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.last.IsZero() || now.Sub(c.last) >= wakeNotifyInterval {
		// Its notification comes after the statements of every publish
		// owed so far, and so, as a rule, after their commits.
		c.last, c.owedAt = now, time.Time{}
		return true, 0
	}
	c.owedAt = now
	if c.armed {
		return false, 0
	}
	c.armed = true
	return false, wakeNotifyInterval
}

// due is the owed notification's timer firing at now: it reports whether
// to send it now, or else how long from now to fire again (0: no
// notification is owed any more).
func (c *wakeCoalescer) due(now time.Time) (send bool, again time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.owedAt.IsZero() {
		c.armed = false // an announced publish covered it
		return false, 0
	}
	if wait := wakeNotifyInterval - now.Sub(c.owedAt); wait > 0 {
		return false, wait // a publish was owed since the timer was set
	}
	c.last, c.owedAt, c.armed = now, time.Time{}, false
	return true, 0
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
	q, err := s.wakeQueries()
	if err != nil {
		return err
	}
	cfg := s.pool.Config().ConnConfig
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
	q, err := s.wakeQueries()
	if err != nil {
		return err
	}
	if _, err := s.pool.Exec(ctx, q.notify, ""); err != nil {
		return errorFrom("wake: send", err)
	}
	return nil
}
