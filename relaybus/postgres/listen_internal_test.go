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
// clock: the first publish after a quiet interval announces itself, the
// others within it are owed, the owed notification is sent an interval
// after the last owed publish unless an announced publish covered it.
func TestWakeCoalescer(t *testing.T) {
	t.Parallel()
	const iv = wakeNotifyInterval
	t0 := time.Unix(1_000_000, 0)
	at := func(f float64) time.Time { return t0.Add(time.Duration(f * float64(iv))) }
	var c wakeCoalescer

	notify, arm := c.publish(at(0))
	require.True(t, notify, "the first publish announces itself")
	require.Zero(t, arm)

	notify, arm = c.publish(at(0.25))
	require.False(t, notify, "within the interval: owed")
	require.Equal(t, iv, arm, "the owed notification's timer is set an interval ahead")
	notify, arm = c.publish(at(0.5))
	require.False(t, notify)
	require.Zero(t, arm, "the timer is set already")

	send, again := c.due(at(1.25))
	require.False(t, send, "the last owed publish ran only 0.75 intervals ago")
	require.Equal(t, iv/4, again, "fire again an interval after the last owed publish")
	send, again = c.due(at(1.5))
	require.True(t, send, "an interval after the last owed publish")
	require.Zero(t, again)

	notify, _ = c.publish(at(2))
	require.False(t, notify, "the owed notification counts as the last announcement")
	notify, arm = c.publish(at(2.5))
	require.True(t, notify, "an interval after the last announcement")
	require.Zero(t, arm)
	send, again = c.due(at(3))
	require.False(t, send, "the announced publish covered the owed one")
	require.Zero(t, again, "nothing owed: the timer stops")

	notify, arm = c.publish(at(2.75))
	require.False(t, notify)
	require.Equal(t, iv, arm, "a new owed publish sets the timer again")
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
