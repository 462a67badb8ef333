package postgres

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/berkcansavur/relaybus/internal/dbenv/dbtest"
	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

// TestWakeCoalescer walks the coalescing of announcements on a made-up
// clock: a publish tries to announce itself at most once per
// wakeNotifyInterval and covers the publishes owed before it when it
// notified; an owed publish is announced wakeNotifyInterval after the
// last one, at most wakeOwedMax after the first, and once more
// wakeLateDelay after the last.
func TestWakeCoalescer(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_000_000, 0)
	ms := func(f float64) time.Time { return t0.Add(time.Duration(f * float64(time.Millisecond))) }
	require.Equal(t, 2*time.Millisecond, wakeNotifyInterval, "the walk's times assume it")
	require.Equal(t, 10*time.Millisecond, wakeOwedMax, "the walk's times assume it")
	require.Equal(t, 100*time.Millisecond, wakeLateDelay, "the walk's times assume it")
	var c wakeCoalescer
	publish := func(at float64) (string, bool) { return c.publish(ms(at)) }
	arm := func(at float64) (time.Duration, bool) {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.arm(ms(at))
	}

	prev, try := publish(0)
	require.True(t, try, "the first publish tries")
	require.Empty(t, prev, "no notifying transaction yet")
	c.tried(ms(0), "100", true, true)
	_, ok := arm(0)
	require.False(t, ok, "nothing owed")

	_, try = publish(0.5)
	require.False(t, try, "within the interval: owed")
	d, ok := arm(0.5)
	require.True(t, ok)
	require.Equal(t, 2*time.Millisecond, d, "an interval after the owed publish")
	_, try = publish(1)
	require.False(t, try)
	_, ok = arm(1)
	require.False(t, ok, "the timer fires sooner than the next due")

	require.False(t, c.due(ms(2.5)), "the last owed publish ran only 1.5 ms ago")
	d, ok = arm(2.5)
	require.True(t, ok)
	require.Equal(t, 500*time.Microsecond, d)
	require.True(t, c.due(ms(3)), "an interval after the last owed publish")
	d, ok = arm(3)
	require.True(t, ok)
	require.Equal(t, 98*time.Millisecond, d, "the late notification, 100 ms after the last owed publish")

	// The notifying transaction stays open: every try fails, and the
	// owed publishes are announced at least every wakeOwedMax.
	prev, try = publish(4)
	require.True(t, try)
	require.Equal(t, "100", prev, "the try asks about the store's notifying transaction")
	c.tried(ms(4), "200", false, true)
	for at := 5.0; at < 14; at++ {
		if _, try := publish(at); try {
			c.tried(ms(at), "x", false, true)
		}
	}
	require.False(t, c.due(ms(13.5)))
	require.True(t, c.due(ms(14)), "wakeOwedMax after the first owed publish, though they keep coming")

	// A try that notifies covers the publishes owed before it.
	prev, try = publish(20)
	require.True(t, try)
	require.Equal(t, "100", prev, "a failed try does not change the notifier")
	c.tried(ms(20), "300", true, true)
	require.False(t, c.due(ms(30)), "covered: nothing owed")
	require.True(t, c.due(ms(115)), "the late notification, 100 ms after the last owed publish")
	_, ok = arm(115)
	require.False(t, ok, "nothing more to send")

	// Not those owed while its statement was under way.
	prev, try = publish(200)
	require.True(t, try)
	require.Equal(t, "300", prev)
	_, try = publish(200.5)
	require.False(t, try)
	c.tried(ms(200), "400", true, true)
	require.True(t, c.due(ms(202.5)), "the publish owed during the try is still owed")

	// One try at a time: the next waits for the last one's answer (until
	// then the notifier is not known), and a failed batch answers nothing.
	prev, try = publish(400)
	require.True(t, try)
	require.Equal(t, "400", prev)
	_, try = publish(403)
	require.False(t, try, "the try of 400 has not come back")
	c.tried(ms(400), "", false, false)
	prev, try = publish(403.5)
	require.True(t, try)
	require.Equal(t, "400", prev, "a failed batch changes nothing")
}

// TestWakeChannel: one channel per schema and prefix, at most 63 bytes,
// readable when that fits, distinct when it does not.
func TestWakeChannel(t *testing.T) {
	t.Parallel()
	require.Equal(t, "public.relaybus_wake", wakeChannel(DefaultSchema, DefaultTablePrefix))
	long := strings.Repeat("s", MaxSchemaBytes)
	a := wakeChannel(long, strings.Repeat("p", MaxTablePrefixBytes))
	b := wakeChannel(long, strings.Repeat("p", MaxTablePrefixBytes-1))
	require.LessOrEqual(t, len(a), wakeChannelBytesMax)
	require.LessOrEqual(t, len(b), wakeChannelBytesMax)
	require.NotEqual(t, a, b)
	require.True(t, strings.HasPrefix(a, long[:20]))
}

// TestPublishAnnouncesAtCommit: a publish's announcement reaches a
// listener when its transaction commits and not before; a rolled back
// publish announces nothing. A burst of publishes is coalesced: at most
// about one notification per wakeNotifyInterval, and at least one after
// the burst.
func TestPublishAnnouncesAtCommit(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dsn := dbtest.TestDatabase(t)
	pool, err := pgxpool.New(ctx, dsn)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s, err := New(pool, nil)
	require.NoError(t, err)
	require.NoError(t, s.Setup(ctx))
	listener, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	t.Cleanup(func() { listener.Close(context.Background()) })
	_, err = listener.Exec(ctx, `LISTEN "public.relaybus_wake"`)
	require.NoError(t, err)
	heard := func(within time.Duration) bool {
		wctx, cancel := context.WithTimeout(ctx, within)
		defer cancel()
		_, err := listener.WaitForNotification(wctx)
		return err == nil
	}
	var seq atomic.Int64
	publish := func(tx pgx.Tx) {
		ev := &relaytype.Event{ID: fmt.Sprintf("e%d", seq.Add(1)), Type: "t"}
		_, err := s.EventPublishTx(ctx, tx, &driver.EventPublishParams{Now: time.Now(),
			Events: []*driver.EventPublish{{Event: ev, Deliveries: []driver.DeliverySpec{{Handler: "h", MaxAttempts: 1}}}}})
		require.NoError(t, err)
	}

	tx, err := s.TxBegin(ctx)
	require.NoError(t, err)
	publish(tx)
	require.False(t, heard(200*time.Millisecond), "announced before the commit")
	require.NoError(t, s.TxCommit(ctx, tx))
	require.True(t, heard(5*time.Second), "not announced at the commit")

	time.Sleep(10 * wakeNotifyInterval) // the next publish is the first of an interval
	tx, err = s.TxBegin(ctx)
	require.NoError(t, err)
	publish(tx)
	require.NoError(t, s.TxRollback(ctx, tx))
	require.False(t, heard(200*time.Millisecond), "a rolled back publish was announced")

	const burst = 200
	start := time.Now()
	for range burst {
		tx, err := s.TxBegin(ctx)
		require.NoError(t, err)
		publish(tx)
		require.NoError(t, s.TxCommit(ctx, tx))
	}
	elapsed := time.Since(start)
	n := 0
	for heard(200 * time.Millisecond) {
		n++
	}
	require.GreaterOrEqual(t, n, 1, "the burst was not announced")
	limit := int(elapsed/wakeNotifyInterval) + 2 // one per interval, and the last owed one
	require.LessOrEqual(t, n, limit, "%d notifications for %d publishes in %v", n, burst, elapsed)
	t.Logf("%d publishes in %v: %d notifications (at most %d)", burst, elapsed.Round(time.Millisecond), n, limit)
}
