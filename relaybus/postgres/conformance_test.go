package postgres_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berkcansavur/relaybus/internal/dbenv/dbtest"
	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/postgres"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
	"github.com/berkcansavur/relaybus/relaybus/storetest"
)

// conformancePoolMaxConns bounds the pool every conformance subtest
// shares: they run in parallel against one server.
const conformancePoolMaxConns = 16

// TestConformance runs the shared suite, with and without the completion
// history, and with and without statistics counters
// (EnableStatisticsCounters). Each subtest gets a fresh store in a schema
// of its own, all in one database: creating a schema is a few
// milliseconds of catalog work, a database (with fsync on) much more, and
// the suite creates one store per subtest. With counters, every
// Statistics call of the suite also reads the counted and the scanned
// statistics in one snapshot and checks that they agree.
func TestConformance(t *testing.T) {
	t.Parallel()
	cfg, err := pgxpool.ParseConfig(dbtest.TestDatabase(t))
	require.NoError(t, err)
	cfg.MaxConns = conformancePoolMaxConns
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	// Runs before the database is dropped, after every parallel subtest.
	t.Cleanup(pool.Close)

	var schemas atomic.Int64
	for _, history := range []bool{false, true} {
		for _, counters := range []bool{false, true} {
			name := fmt.Sprintf("CompletionHistory=%v", history)
			if counters {
				name += "/StatisticsCounters"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				storetest.Run(t, func(t *testing.T) driver.Store[pgx.Tx] {
					s, err := postgres.New(pool, &postgres.Options{
						Schema:            fmt.Sprintf("conformance_%d", schemas.Add(1)),
						CompletionHistory: history,
					})
					require.NoError(t, err)
					require.NoError(t, s.Setup(t.Context()))
					if !counters {
						return s
					}
					require.NoError(t, s.EnableStatisticsCounters(t.Context()))
					return countedStore{s, t}
				}, &storetest.Options{KeepsCompleted: history})
			})
		}
	}
}

// countedStore is a store with statistics counters whose Statistics
// checks the counters against a scan of the same snapshot.
type countedStore struct {
	*postgres.Store
	t *testing.T
}

func (c countedStore) Statistics(ctx context.Context, params *driver.StatisticsParams) (*relaytype.Statistics, error) {
	st, err := c.Store.Statistics(ctx, params)
	if err != nil {
		return nil, err
	}
	on, err := c.StatisticsCountersEnabled(ctx)
	if err != nil {
		return nil, err
	}
	assert.True(c.t, on, "statistics counters are off")
	counted, scanned, err := c.StatisticsBoth(ctx, params)
	if err != nil {
		return nil, err
	}
	assert.Equal(c.t, scanned, counted, "counted statistics differ from the scan's")
	return st, nil
}
