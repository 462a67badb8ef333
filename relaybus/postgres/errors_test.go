package postgres_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/berkcansavur/relaybus/relaybus"
	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/postgres"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

// TestNotSetUpSaysToCallSetup: a store used before Setup (no tables),
// or under a schema that does not exist, fails with ErrNotSetUp, whose
// text says to call Setup, with PostgreSQL's own error still in the
// chain; through the Bus too. Without the mapping the error was a bare
// "relation ... does not exist (SQLSTATE 42P01)".
func TestNotSetUpSaysToCallSetup(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	for _, opts := range []*postgres.Options{nil, {Schema: "never_made"}} {
		s, err := postgres.New(pool, opts)
		require.NoError(t, err)
		requireNotSetUp := func(err error, what string) {
			t.Helper()
			require.ErrorIs(t, err, postgres.ErrNotSetUp, what)
			require.Contains(t, err.Error(), "call Store.Setup", what)
			require.True(t, strings.HasPrefix(err.Error(), "relaybus"), err.Error())
			var pgErr *pgconn.PgError
			require.ErrorAs(t, err, &pgErr, "%s: the PostgreSQL error stays in the chain", what)
		}

		tx, err := s.TxBegin(t.Context())
		require.NoError(t, err)
		_, err = s.EventPublishTx(t.Context(), tx, &driver.EventPublishParams{Now: t0, Events: []*driver.EventPublish{{
			Event:      &relaytype.Event{ID: "e1", Type: "t"},
			Deliveries: []driver.DeliverySpec{{Handler: "h", MaxAttempts: 3}},
		}}})
		// Rolled back before the check, so that a failing check leaves no
		// transaction holding a connection of the pool.
		require.NoError(t, s.TxRollback(t.Context(), tx))
		requireNotSetUp(err, "publish")

		_, err = s.DeliveryClaim(t.Context(), &driver.DeliveryClaimParams{
			Owner: "w", Handlers: []string{"h"}, Limit: 1, LeaseDuration: time.Minute, Now: t0})
		requireNotSetUp(err, "claim")
		_, err = s.Statistics(t.Context(), &driver.StatisticsParams{Now: t0})
		requireNotSetUp(err, "statistics")

		bus, err := relaybus.New[pgx.Tx](s, relaybus.Config{})
		require.NoError(t, err)
		require.NoError(t, bus.Handle("t", "h", func(_ context.Context, _ *relaybus.Delivery) error { return nil }, nil))
		requireNotSetUp(bus.Publish(t.Context(), &relaybus.Event{Type: "t"}), "Bus.Publish")
	}
}
