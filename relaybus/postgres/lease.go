package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

// LeaseExtend moves the expiry of the lanes that hold current leases of
// params.Owner and this store instance, in one statement: a lease is
// current when its lane still has the token's epoch, is held by them and
// lists the delivery, and the delivery's claims counter is the token's.
// A lease that is not current extends nothing. It writes lane rows only
// (HOT updates) and reads the delivery rows without a lock.
func (s *Store) LeaseExtend(ctx context.Context, params *driver.LeaseExtendParams) ([]bool, error) {
	if err := params.Validate(); err != nil {
		return nil, err
	}
	ls, err := parseLeases("extend", params.Leases)
	if err != nil {
		return nil, err
	}
	ids := make([]int64, len(ls))
	lanes := make([]int16, len(ls))
	epochs := make([]int64, len(ls))
	claims := make([]int64, len(ls))
	for i, l := range ls {
		ids[i], lanes[i], epochs[i], claims[i] = l.ID, int16(l.Token.Lane), l.Token.Epoch, l.Token.Claims
	}
	var renewed []int64
	batch := lockFirst(s.q.lockHeld, params.Owner, s.holder, lanes)
	batch.Queue(s.q.extend, params.Owner, s.holder, ids, lanes, epochs, claims, params.ExpiresAt).
		Query(func(rows pgx.Rows) error {
			var err error
			renewed, err = pgx.CollectRows(rows, pgx.RowTo[int64])
			return err
		})
	if err := s.pool.SendBatch(ctx, batch).Close(); err != nil {
		return nil, errorFrom("extend", err)
	}
	// An id is renewed under the token that matched; another token of the
	// same delivery in the call cannot be current too.
	ok := make(map[int64]bool, len(renewed))
	for _, id := range renewed {
		ok[id] = true
	}
	out := make([]bool, len(ls))
	for i, l := range ls {
		out[i] = ok[l.ID] && s.currentIn(ls, i)
	}
	return out, nil
}

// currentIn reports whether lease i is the one lease of its delivery in ls
// that can be current: when a call names one delivery under several
// tokens, only the one with the highest claims and epoch can be (claims
// and epochs only grow), so the others report false.
func (s *Store) currentIn(ls []lease, i int) bool {
	for j, o := range ls {
		if j != i && o.ID == ls[i].ID && (o.Token.Epoch > ls[i].Token.Epoch ||
			(o.Token.Epoch == ls[i].Token.Epoch && o.Token.Claims > ls[i].Token.Claims)) {
			return false
		}
	}
	return true
}

// DeliveryComplete deletes the delivery if the lease is current.
func (s *Store) DeliveryComplete(ctx context.Context, params *driver.DeliveryCompleteParams) (bool, error) {
	if err := params.Validate(); err != nil {
		return false, err
	}
	oks, err := s.completeMany(ctx, []relaytype.Lease{params.Lease}, params.Now)
	if err != nil {
		return false, err
	}
	return oks[0], nil
}

// DeliveryCompleteMany deletes the deliveries whose leases are current, in
// one statement through the primary key (and inserts their history rows
// in the same statement when CompletionHistory is on). The lanes are read,
// not written: concurrent completions of one lane never wait on each
// other, and a renewal (lane rows only) never waits on a completion
// (delivery rows only).
func (s *Store) DeliveryCompleteMany(ctx context.Context, params *driver.DeliveryCompleteManyParams) ([]bool, error) {
	if err := params.Validate(); err != nil {
		return nil, err
	}
	return s.completeMany(ctx, params.Leases, params.Now)
}

func (s *Store) completeMany(ctx context.Context, leases []relaytype.Lease, now any) ([]bool, error) {
	c, err := s.newCompletion(leases)
	if err != nil {
		return nil, err
	}
	sql, args := c.statement(now)
	// One round trip, one implicit transaction: the planner settings
	// (completePlan: a generic plan, made once, not one plan per call),
	// then the completion.
	batch := &pgx.Batch{}
	batch.Queue(s.q.completePlan)
	batch.Queue(sql, args...).Query(c.scan)
	if err := s.pool.SendBatch(ctx, batch).Close(); err != nil {
		s.forgetAll(c.ls)
		return nil, errorFrom("complete", err)
	}
	return c.results(), nil
}

// completion is one completeMany statement: its leases, parsed, and the
// tokens its deleted rows matched once it ran.
type completion struct {
	s       *Store
	ls      []lease
	deleted map[lease]bool
}

// newCompletion parses leases (nothing is written when one is not this
// store's).
func (s *Store) newCompletion(leases []relaytype.Lease) (*completion, error) {
	ls, err := parseLeases("complete", leases)
	if err != nil {
		return nil, err
	}
	return &completion{s: s, ls: ls, deleted: map[lease]bool{}}, nil
}

// statement is the completion's SQL and arguments (completeMany, or
// completeManyHistory with CompletionHistory), completed at now.
func (c *completion) statement(now any) (string, []any) {
	// The bigint arrays as array[intElem]: a []int64 costs pgx a copy of
	// every element above 255 (arrays.go). Lanes are below 256.
	ids := make(array[intElem], len(c.ls))
	lanes := make([]int16, len(c.ls))
	claims := make(array[intElem], len(c.ls))
	epochs := make(array[intElem], len(c.ls))
	for i, l := range c.ls {
		ids[i], lanes[i], claims[i], epochs[i] = intElem(l.ID), int16(l.Token.Lane), intElem(l.Token.Claims), intElem(l.Token.Epoch)
	}
	if c.s.history {
		return c.s.q.completeManyHistory, []any{ids, lanes, claims, epochs, now}
	}
	return c.s.q.completeMany, []any{ids, lanes, claims, epochs}
}

// scan reads the statement's rows: the lease each deleted row matched.
func (c *completion) scan(rows pgx.Rows) error {
	var (
		l     lease
		lane  int16
		epoch *int64
	)
	_, err := pgx.ForEachRow(rows, []any{&l.ID, &lane, &l.Token.Claims, &epoch}, func() error {
		if epoch != nil {
			l.Token.Lane, l.Token.Epoch = int(lane), *epoch
			c.deleted[l] = true
		}
		return nil
	})
	return err
}

// results reports, once the statement committed, whether each lease
// deleted its delivery, and records that in the ledger. A delivery named
// by two leases in one call is deleted once: only the first lease with
// the matching token reports true.
func (c *completion) results() []bool {
	out := make([]bool, len(c.ls))
	for i, l := range c.ls {
		if c.deleted[l] {
			out[i] = true
			c.deleted[l] = false
		}
		c.s.ledger.finished(l.Token, out[i])
	}
	return out
}

// DeliveryCompleteTx completes the delivery inside tx: it takes FOR KEY
// SHARE on the lane row, which a takeover's FOR UPDATE SKIP LOCKED skips,
// and deletes the delivery. If tx rolls back, the delivery is still in
// flight under the same lease; if it commits, no takeover ran it.
func (s *Store) DeliveryCompleteTx(ctx context.Context, tx pgx.Tx, params *driver.DeliveryCompleteParams) (bool, error) {
	if err := params.Validate(); err != nil {
		return false, err
	}
	if tx == nil {
		return false, fmt.Errorf("relaybus/postgres: complete: tx is nil: %w", relaytype.ErrInvalid)
	}
	l, err := parseLease("complete", params.Lease)
	if err != nil {
		return false, err
	}
	// Whether tx commits is the caller's: the lane is probed again.
	s.ledger.forget(l.Token)
	var rows pgx.Rows
	if s.history {
		rows, err = tx.Query(ctx, s.q.completeTxHistory, l.ID, int16(l.Token.Lane), l.Token.Claims, l.Token.Epoch, params.Now)
	} else {
		rows, err = tx.Query(ctx, s.q.completeTx, l.ID, int16(l.Token.Lane), l.Token.Claims, l.Token.Epoch)
	}
	if err != nil {
		return false, errorFrom("complete", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return false, errorFrom("complete", err)
	}
	return len(ids) == 1, nil
}

// DeliveryReschedule ends the attempt as failed (it is charged now) and
// makes the delivery pending again at params.AvailableAt.
func (s *Store) DeliveryReschedule(ctx context.Context, params *driver.DeliveryRescheduleParams) (bool, error) {
	if err := params.Validate(); err != nil {
		return false, err
	}
	return s.endClaim(ctx, "reschedule", params.Lease, s.q.reschedule, params.Now,
		params.AvailableAt, driver.TruncateError(params.Error))
}

// DeliveryBury ends the attempt as failed (charged now) and makes the
// delivery dead.
func (s *Store) DeliveryBury(ctx context.Context, params *driver.DeliveryBuryParams) (bool, error) {
	if err := params.Validate(); err != nil {
		return false, err
	}
	return s.endClaim(ctx, "bury", params.Lease, s.q.bury, params.Now, driver.TruncateError(params.Error))
}

// DeliveryRelease gives the delivery back without spending an attempt:
// it is pending again at once (to this holder's lane, or to anyone once
// the lane is handed back).
func (s *Store) DeliveryRelease(ctx context.Context, params *driver.DeliveryReleaseParams) (bool, error) {
	if err := params.Validate(); err != nil {
		return false, err
	}
	var at *time.Time
	if !params.AvailableAt.IsZero() {
		at = &params.AvailableAt
	}
	return s.endClaim(ctx, "release", params.Lease, s.q.release, params.Now, at)
}

// endClaim runs one of the statements that end a claim without deleting
// the delivery: $1 id, $2 lane, $3 claims, $4 epoch, $5 now, args from $6.
func (s *Store) endClaim(ctx context.Context, op string, l relaytype.Lease, sql string, now any, args ...any) (bool, error) {
	pl, err := parseLease(op, l)
	if err != nil {
		return false, err
	}
	// The lane first, in a statement of its own (see lockLane in
	// lease.sql), then the write, in one round trip and transaction.
	var n int64
	batch := &pgx.Batch{}
	batch.Queue(s.q.lockLane, int16(pl.Token.Lane), pl.Token.Epoch)
	batch.Queue(sql, append([]any{pl.ID, int16(pl.Token.Lane), pl.Token.Claims, pl.Token.Epoch, now}, args...)...).
		QueryRow(func(row pgx.Row) error { return row.Scan(&n) })
	if err := s.pool.SendBatch(ctx, batch).Close(); err != nil {
		s.ledger.forget(pl.Token)
		return false, errorFrom(op, err)
	}
	s.ledger.finished(pl.Token, n == 1)
	return n == 1, nil
}

// OwnerRelinquish releases every delivery in flight in the lanes
// params.Owner and this store instance hold (no attempt spent) and hands
// those lanes back, so other claimers take them at once instead of after
// the lease. It returns the number of deliveries released.
func (s *Store) OwnerRelinquish(ctx context.Context, params *driver.OwnerRelinquishParams) (int, error) {
	if err := params.Validate(); err != nil {
		return 0, err
	}
	var n int64
	// Whatever the outcome, the lanes held may change under the ledger.
	defer s.ledger.reset()
	batch := lockFirst(s.q.lockOwned, params.Owner, s.holder)
	batch.Queue(s.q.relinquish, params.Owner, s.holder, params.Now).
		QueryRow(func(row pgx.Row) error { return row.Scan(&n) })
	if err := s.pool.SendBatch(ctx, batch).Close(); err != nil {
		return 0, errorFrom("relinquish", err)
	}
	return int(n), nil
}

// lockFirst returns a batch that starts with the lane lock statement
// lockSQL (lockLane, lockHeld or lockOwned in lease.sql): the caller
// queues the statement that writes those lanes after it, and the two run
// in one round trip and one implicit transaction, so that the write reads
// the lanes at the versions the lock holds (see lockLane for the deadlock
// this avoids).
func lockFirst(lockSQL string, args ...any) *pgx.Batch {
	batch := &pgx.Batch{}
	batch.Queue(lockSQL, args...)
	return batch
}

// forgetAll drops the ledger entries of the lanes of ls (a completion
// whose outcome is unknown).
func (s *Store) forgetAll(ls []lease) {
	for _, l := range ls {
		s.ledger.forget(l.Token)
	}
}
