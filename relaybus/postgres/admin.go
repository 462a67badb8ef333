package postgres

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/berkcansavur/relaybus/relaybus"
)

// DeliveryRequeue makes a dead delivery pending again with a fresh
// attempt budget, due at params.Now. Its last error is kept.
func (s *Store) DeliveryRequeue(ctx context.Context, params *relaybus.DeliveryRequeueParams) error {
	if err := params.Validate(); err != nil {
		return err
	}
	id, ok := parseID(params.DeliveryID)
	if !ok {
		return fmt.Errorf("relaybus/postgres: requeue: delivery %q: %w", params.DeliveryID, relaybus.ErrNotFound)
	}
	tag, err := s.pool.Exec(ctx, s.q.requeue, id, params.Now)
	if err != nil {
		return errorFrom("requeue", err)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	var status string
	if err := s.pool.QueryRow(ctx, s.q.status, id).Scan(&status); err != nil {
		return errorFrom(fmt.Sprintf("requeue: delivery %d", id), err)
	}
	return fmt.Errorf("relaybus/postgres: requeue: delivery %d is %s: %w", id, status, relaybus.ErrNotDead)
}

// DeliveryList lists deliveries in ID order. The cursor is the last ID of
// the page. The filters are fixed SQL fragments; only their values are
// parameters.
func (s *Store) DeliveryList(ctx context.Context, params *relaybus.DeliveryListParams) (*relaybus.DeliveryListResult, error) {
	limit, err := params.Validate()
	if err != nil {
		return nil, err
	}
	var where []string
	var args []any
	add := func(cond string, v any) {
		args = append(args, v)
		where = append(where, fmt.Sprintf(cond, len(args)))
	}
	if params.After != "" {
		after, ok := parseID(params.After)
		if !ok {
			return nil, fmt.Errorf("relaybus/postgres: list: malformed cursor %q: %w", params.After, relaybus.ErrInvalid)
		}
		add("d.id > $%d", after)
	}
	if params.Status != "" {
		add("d.status = $%d", string(params.Status))
	}
	if params.Handler != "" {
		add("d.handler = $%d", params.Handler)
	}
	if params.Key != "" {
		add("d.key = $%d", params.Key)
	}
	if params.EventID != "" {
		add("d.event_id = $%d", params.EventID)
	}
	sql := "SELECT " + deliveryColumns + " FROM " + s.q.deliveries + " d JOIN " + s.q.events + " e ON e.id = d.event_id"
	if len(where) > 0 {
		sql += " WHERE " + strings.Join(where, " AND ")
	}
	// One row more than the page tells whether there is a next page.
	args = append(args, limit+1)
	sql += fmt.Sprintf(" ORDER BY d.id LIMIT $%d", len(args))

	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, errorFrom("list", err)
	}
	list, err := pgx.CollectRows(rows, scanDelivery)
	if err != nil {
		return nil, errorFrom("list", err)
	}
	res := &relaybus.DeliveryListResult{Deliveries: list}
	if len(list) > limit {
		res.Deliveries = list[:limit]
		res.Next = list[limit-1].ID
	}
	return res, nil
}

// Statistics counts deliveries per status and handler (a scan of the
// deliveries table: an admin call, not a hot path).
func (s *Store) Statistics(ctx context.Context, params *relaybus.StatisticsParams) (*relaybus.Statistics, error) {
	if err := params.Validate(); err != nil {
		return nil, err
	}
	st := &relaybus.Statistics{Handlers: map[string]relaybus.Counts{}}
	batch := &pgx.Batch{}
	batch.Queue(s.q.statisticsCounts).Query(func(rows pgx.Rows) error {
		var handler, status string
		var n int64
		_, err := pgx.ForEachRow(rows, []any{&handler, &status, &n}, func() error {
			c := st.Handlers[handler]
			if err := addCount(&c, status, n); err != nil {
				return err
			}
			st.Handlers[handler] = c
			return addCount(&st.Counts, status, n)
		})
		return err
	})
	batch.Queue(s.q.statisticsOldest, params.Now).QueryRow(func(row pgx.Row) error {
		var oldest *time.Time
		if err := row.Scan(&oldest); err != nil {
			return err
		}
		if oldest != nil {
			st.OldestDueAge = params.Now.Sub(*oldest)
		}
		return nil
	})
	if err := s.pool.SendBatch(ctx, batch).Close(); err != nil {
		return nil, errorFrom("statistics", err)
	}
	return st, nil
}

func addCount(c *relaybus.Counts, status string, n int64) error {
	switch relaybus.Status(status) {
	case relaybus.StatusPending:
		c.Pending += n
	case relaybus.StatusProcessing:
		c.Processing += n
	case relaybus.StatusCompleted:
		c.Completed += n
	case relaybus.StatusDead:
		c.Dead += n
	default:
		return fmt.Errorf("relaybus/postgres: statistics: unknown status %q", status)
	}
	return nil
}

// Purge deletes completed and dead deliveries past their cutoffs (at most
// params.Limit, oldest IDs first), then the events left without any
// delivery that are older than the later cutoff, in one transaction.
func (s *Store) Purge(ctx context.Context, params *relaybus.PurgeParams) (*relaybus.PurgeResult, error) {
	if err := params.Validate(); err != nil {
		return nil, err
	}
	if params.CompletedBefore.IsZero() && params.DeadBefore.IsZero() {
		return &relaybus.PurgeResult{}, nil
	}
	completedBefore, deadBefore, limit := nullTime(params.CompletedBefore), nullTime(params.DeadBefore), any(nil)
	if params.Limit > 0 {
		limit = params.Limit
	}
	// Events go by the later cutoff, as in every store.
	eventCutoff := params.CompletedBefore
	if params.DeadBefore.After(eventCutoff) {
		eventCutoff = params.DeadBefore
	}
	res := &relaybus.PurgeResult{}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, s.q.purgeDeliveries, completedBefore, deadBefore, limit)
		if err != nil {
			return err
		}
		res.Deliveries = tag.RowsAffected()
		tag, err = tx.Exec(ctx, s.q.purgeEvents, eventCutoff)
		if err != nil {
			return err
		}
		res.Events = tag.RowsAffected()
		return nil
	})
	if err != nil {
		return nil, errorFrom("purge", err)
	}
	return res, nil
}

// nullTime is NULL for the zero time: a NULL cutoff matches nothing.
func nullTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t
}
