package postgres_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/berkcansavur/relaybus/relaybus"
	"github.com/berkcansavur/relaybus/relaybus/postgres"
)

// TestPauseAcrossProcesses: a handler paused through one Bus (the admin
// command's, say) stops being claimed by a running dispatcher of another
// store instance within about a poll, while the dispatcher's other
// handler goes on; resumed, its backlog runs.
func TestPauseAcrossProcesses(t *testing.T) {
	t.Parallel()
	s, pool := setup(t, nil)
	admin, err := postgres.New(pool, nil)
	require.NoError(t, err)
	adminBus, err := relaybus.New[pgx.Tx](admin, relaybus.Config{Owner: "admin"})
	require.NoError(t, err)

	const poll = 50 * time.Millisecond
	bus, err := relaybus.New[pgx.Tx](s, relaybus.Config{Owner: "dispatcher", PollInterval: poll})
	require.NoError(t, err)
	var mailed, audited atomic.Int32
	require.NoError(t, bus.Handle("order.placed", "mailer", func(context.Context, *relaybus.Delivery) error { mailed.Add(1); return nil }, nil))
	require.NoError(t, bus.Handle("order.placed", "audit", func(context.Context, *relaybus.Delivery) error { audited.Add(1); return nil }, nil))
	require.NoError(t, bus.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), wakeWait)
		defer cancel()
		require.NoError(t, bus.Stop(ctx))
	})
	publish := func(key string) {
		t.Helper()
		require.NoError(t, bus.Publish(t.Context(), &relaybus.Event{Type: "order.placed", Key: key}))
	}
	publish("c-1")
	eventually(t, "both handlers", func() bool { return mailed.Load() == 1 && audited.Load() == 1 }, func() string { return "" })

	require.NoError(t, adminBus.PauseHandler(t.Context(), "mailer", "SMTP outage"))
	time.Sleep(3 * poll) // past the dispatcher's next reading
	for _, k := range []string{"c-1", "c-2", "c-1"} {
		publish(k)
	}
	eventually(t, "the audit deliveries", func() bool { return audited.Load() == 4 }, func() string { return "" })
	time.Sleep(3 * poll)
	require.EqualValues(t, 1, mailed.Load(), "a paused handler ran")
	st, err := adminBus.Statistics(t.Context())
	require.NoError(t, err)
	require.EqualValues(t, 3, st.Handlers["mailer"].Pending)
	ps, err := adminBus.PausedHandlers(t.Context())
	require.NoError(t, err)
	require.Len(t, ps, 1)
	require.Equal(t, "SMTP outage", ps[0].Reason)

	ok, err := adminBus.ResumeHandler(t.Context(), "mailer")
	require.NoError(t, err)
	require.True(t, ok)
	eventually(t, "the mailer's backlog after the resume", func() bool { return mailed.Load() == 4 }, func() string { return "" })
}
