package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

// StatisticsBoth reads the statistics twice in one REPEATABLE READ
// transaction, through the counters and by the scan, so that the two
// see the same snapshot: tests compare them.
func (s *Store) StatisticsBoth(ctx context.Context, params *driver.StatisticsParams) (counted, scanned *relaytype.Statistics, err error) {
	err = pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var err error
		if counted, err = s.statistics(ctx, tx, params, true); err != nil {
			return fmt.Errorf("counted: %w", err)
		}
		if scanned, err = s.statistics(ctx, tx, params, false); err != nil {
			return fmt.Errorf("scanned: %w", err)
		}
		return nil
	})
	return counted, scanned, err
}

// PublishBothLeft is how many more calls with no keyed event send both
// publish statements in one batch (publish.go's run); SetPublishBothLeft
// sets it, so that a test counts a call of the path it means.
func (s *Store) PublishBothLeft() int32 { return s.publishBothLeft.Load() }

// SetPublishBothLeft sets what PublishBothLeft returns.
func (s *Store) SetPublishBothLeft(n int32) { s.publishBothLeft.Store(n) }

// PublishStaleSQL is the text of publishStale, the second statement of a
// call with no keyed event.
func (s *Store) PublishStaleSQL() string { return s.q.publishStale }
