package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/internal/decimal"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

// DeliveryRequeue makes a dead delivery pending again with a fresh
// attempt budget, due at params.Now, and no longer a suspect. Its last
// error is kept. It raises claims, so no lease of an earlier claim of the
// delivery can write to it.
func (s *Store) DeliveryRequeue(ctx context.Context, params *driver.DeliveryRequeueParams) error {
	if err := params.Validate(); err != nil {
		return err
	}
	id, ok := parseID(params.DeliveryID)
	if !ok {
		return fmt.Errorf("relaybus/postgres: requeue: delivery %q: %w", params.DeliveryID, relaytype.ErrNotFound)
	}
	tag, err := s.pool.Exec(ctx, s.q.requeue, id, params.Now)
	if err != nil {
		return errorFrom("requeue", err)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	var status string
	if err := s.pool.QueryRow(ctx, s.q.requeueStatus, id).Scan(&status); err != nil {
		return errorFrom(fmt.Sprintf("requeue: delivery %d", id), err)
	}
	return fmt.Errorf("relaybus/postgres: requeue: delivery %d is %s: %w", id, status, relaytype.ErrNotDead)
}

// DeliveryList lists deliveries in ID order: the deliveries table (a
// pending delivery that is in flight shows as processing) and the
// completion history. The cursor is the last ID of the page. The
// statement is delivery.sql's deliveryList.
func (s *Store) DeliveryList(ctx context.Context, params *driver.DeliveryListParams) (*driver.DeliveryListResult, error) {
	limit, err := params.Validate()
	if err != nil {
		return nil, err
	}
	after, err := decimal.ListCursor("relaybus/postgres", params.After)
	if err != nil {
		return nil, err
	}
	sql, args, err := s.listQuery(params, after, limit)
	if err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, errorFrom("list", err)
	}
	list, err := scanDeliveries(rows)
	if err != nil {
		return nil, errorFrom("list", err)
	}
	res := &driver.DeliveryListResult{Deliveries: list}
	if len(list) > limit {
		res.Deliveries = list[:limit]
		res.Next = list[limit-1].ID
	}
	return res, nil
}

// listData is the data of delivery.sql's deliveryList.
type listData struct {
	sqlNames
	WithHistory                   bool
	Handler, Key, EventID, Status int // the filters' parameter numbers; 0: no filter
	Pending, Processing           bool
}

// listQuery is DeliveryList's statement and its arguments for params,
// after the cursor after, pages of limit.
func (s *Store) listQuery(params *driver.DeliveryListParams, after int64, limit int) (string, []any, error) {
	// $1 after, $2 page size + 1 (one row more tells whether there is a
	// next page); the filters follow.
	args := []any{after, limit + 1}
	param := func(v any) int {
		args = append(args, v)
		return len(args)
	}
	d := listData{sqlNames: s.q.names, WithHistory: true}
	if params.Handler != "" {
		d.Handler = param(params.Handler)
	}
	if params.Key != "" {
		d.Key = param(params.Key)
	}
	if params.EventID != "" {
		d.EventID = param(params.EventID)
	}
	switch params.Status {
	case "":
	case relaytype.StatusPending:
		d.Pending, d.WithHistory = true, false
	case relaytype.StatusProcessing:
		d.Processing, d.WithHistory = true, false
	default:
		d.Status = param(string(params.Status))
		d.WithHistory = params.Status == relaytype.StatusCompleted
	}
	sql, err := render("deliveryList", d)
	return sql, args, err
}

// Statistics counts deliveries per status and handler, exactly, and
// finds the oldest due one of each handler, in one statement.
//
// Without statistics counters (the default) that statement is
// admin.sql's statisticsCounts: a sequential scan of the deliveries
// table. It writes nothing, and nothing on the claim or completion path
// writes for it. It runs without parallel workers: they are a pool of
// the whole server (max_parallel_workers), which an admin call should
// leave to the application, and at the sizes measured a parallel plan
// was slower. With them (EnableStatisticsCounters) it is
// counters.sql's statisticsCounted, which reads the counters, the
// deliveries in flight and one probe of an index per handler. Either
// way the figures are exact for one snapshot. BenchmarkStatistics
// measures both; docs/operations.md has the figures.
//
// Completed counts deliveries completed with CompletionHistory on (rows
// of the history table, until Purge deletes them) and rows left
// completed by 0.1.0; with delete on complete (the default) a completed
// delivery leaves no row, and Completed stays 0.
func (s *Store) Statistics(ctx context.Context, params *driver.StatisticsParams) (*relaytype.Statistics, error) {
	if err := params.Validate(); err != nil {
		return nil, err
	}
	counted, err := s.StatisticsCountersEnabled(ctx)
	if err != nil {
		return nil, err
	}
	st, err := s.statistics(ctx, s.pool, params, counted)
	var pgErr *pgconn.PgError
	if counted && errors.As(err, &pgErr) && notSetUp(pgErr.Code) {
		// The counters were disabled between the check and the read.
		return s.statistics(ctx, s.pool, params, false)
	}
	return st, err
}

// statistics is Statistics through the counters (counted) or a scan,
// sent on sender (the pool, or a transaction).
func (s *Store) statistics(ctx context.Context, sender batchSender, params *driver.StatisticsParams, counted bool) (*relaytype.Statistics, error) {
	st := &relaytype.Statistics{Handlers: map[string]relaytype.Counts{}}
	oldest := map[string]time.Time{} // per handler
	batch := &pgx.Batch{}
	// The batch is one implicit transaction: the setting holds for the
	// statement after it, and ends with it.
	batch.Queue(s.q.statisticsSerial)
	count := s.q.statisticsCounts
	if counted {
		count = s.q.statisticsCounted
	}
	batch.Queue(count, params.Now).Query(func(rows pgx.Rows) error {
		var handler, status string
		var n, processing int64
		var due *time.Time
		_, err := pgx.ForEachRow(rows, []any{&handler, &status, &n, &processing, &due}, func() error {
			c := st.Handlers[handler]
			if err := addCount(&c, status, n); err != nil {
				return err
			}
			c.Processing += processing
			st.Handlers[handler] = c
			st.Processing += processing
			if o, ok := oldest[handler]; due != nil && (!ok || due.Before(o)) {
				oldest[handler] = *due
			}
			return addCount(&st.Counts, status, n)
		})
		return err
	})
	if err := sender.SendBatch(ctx, batch).Close(); err != nil {
		return nil, errorFrom("statistics", err)
	}
	for handler, due := range oldest {
		c := st.Handlers[handler]
		c.OldestDueAge = max(params.Now.Sub(due), 0)
		st.Handlers[handler] = c
		st.OldestDueAge = max(st.OldestDueAge, c.OldestDueAge)
	}
	return st, nil
}

func addCount(c *relaytype.Counts, status string, n int64) error {
	switch relaytype.Status(status) {
	case relaytype.StatusPending:
		c.Pending += n
	case relaytype.StatusProcessing:
		c.Processing += n
	case relaytype.StatusCompleted:
		c.Completed += n
	case relaytype.StatusDead:
		c.Dead += n
	default:
		return fmt.Errorf("relaybus/postgres: statistics: unknown status %q", status)
	}
	return nil
}

// Purge deletes dead deliveries and completed ones (history rows, and the
// completed rows 0.1.0 left) past their cutoffs, at most params.Limit in
// all: dead ones first, then history rows, then 0.1.0 rows, each kind
// oldest ID first; then, when params.CompletedBefore is set, the events
// created before it that have no delivery or history row left. Events
// follow the completed retention, never the dead one: with delete on
// complete an event is the only trace that its completed handlers ran
// (events.handlers keeps a republish from running them again), so with
// completed ones kept forever (CompletedBefore zero) no event is deleted.
// All in one transaction.
func (s *Store) Purge(ctx context.Context, params *driver.PurgeParams) (*driver.PurgeResult, error) {
	if err := params.Validate(); err != nil {
		return nil, err
	}
	if params.CompletedBefore.IsZero() && params.DeadBefore.IsZero() {
		return &driver.PurgeResult{}, nil
	}
	res := &driver.PurgeResult{}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// Each kind takes what the limit leaves; the three are separate
		// statements so that each walks its own index (the 0.1.0 rows
		// have none).
		for _, p := range []struct {
			sql    string
			cutoff time.Time
		}{
			{s.q.purgeDead, params.DeadBefore},
			{s.q.purgeHistory, params.CompletedBefore},
			{s.q.purgeCompleted, params.CompletedBefore},
		} {
			if p.cutoff.IsZero() {
				continue
			}
			var limit any // NULL: LIMIT NULL is no limit
			if params.Limit > 0 {
				left := int64(params.Limit) - res.Deliveries
				if left <= 0 {
					break
				}
				limit = left
			}
			tag, err := tx.Exec(ctx, p.sql, p.cutoff, limit)
			if err != nil {
				return err
			}
			res.Deliveries += tag.RowsAffected()
		}
		if params.CompletedBefore.IsZero() {
			return nil
		}
		tag, err := tx.Exec(ctx, s.q.purgeEvents, params.CompletedBefore)
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
