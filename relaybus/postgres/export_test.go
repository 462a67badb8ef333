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
