package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/berkcansavur/relaybus/relaybus"
)

// leaseArrays splits leases into the id and token arrays the set-based
// statements unnest. A lease whose ID this store never handed out names
// no delivery and is left out: its result stays false.
func leaseArrays(leases []relaybus.Lease) (ids []int64, tokens []string) {
	for _, l := range leases {
		if id, ok := parseID(l.DeliveryID); ok {
			ids = append(ids, id)
			tokens = append(tokens, l.Token)
		}
	}
	return ids, tokens
}

// leaseResults maps the (id, token) rows a set-based statement returned
// back onto the leases, in order.
func leaseResults(rows pgx.Rows, leases []relaybus.Lease) ([]bool, error) {
	type lease struct {
		id    int64
		token string
	}
	matched := map[lease]bool{}
	var l lease
	if _, err := pgx.ForEachRow(rows, []any{&l.id, &l.token}, func() error {
		matched[l] = true
		return nil
	}); err != nil {
		return nil, err
	}
	out := make([]bool, len(leases))
	for i, x := range leases {
		if id, ok := parseID(x.DeliveryID); ok {
			out[i] = matched[lease{id, x.Token}]
		}
	}
	return out, nil
}

// LeaseExtend moves the expiry of each lease params.Owner still holds.
// Each renewal rewrites the delivery row (and, as lease_expires_at is
// indexed, adds index entries): one of the 0.1.0 costs.
func (s *Store) LeaseExtend(ctx context.Context, params *relaybus.LeaseExtendParams) ([]bool, error) {
	if err := params.Validate(); err != nil {
		return nil, err
	}
	ids, tokens := leaseArrays(params.Leases)
	if len(ids) == 0 {
		return make([]bool, len(params.Leases)), nil
	}
	rows, err := s.pool.Query(ctx, s.q.extend, ids, tokens, params.ExpiresAt, params.Now, params.Owner)
	if err != nil {
		return nil, errorFrom("extend", err)
	}
	out, err := leaseResults(rows, params.Leases)
	if err != nil {
		return nil, errorFrom("extend", err)
	}
	return out, nil
}

// DeliveryComplete marks the delivery completed if the lease is current.
func (s *Store) DeliveryComplete(ctx context.Context, params *relaybus.DeliveryCompleteParams) (bool, error) {
	if err := params.Validate(); err != nil {
		return false, err
	}
	return s.fencedExec(ctx, s.pool, "complete", params.Lease, s.q.complete, params.Now)
}

// DeliveryCompleteTx completes the delivery inside tx: the row stays
// locked until tx ends, so a takeover skips it meanwhile, and if tx rolls
// back the delivery is still processing under the same lease.
func (s *Store) DeliveryCompleteTx(ctx context.Context, tx pgx.Tx, params *relaybus.DeliveryCompleteParams) (bool, error) {
	if err := params.Validate(); err != nil {
		return false, err
	}
	if tx == nil {
		return false, fmt.Errorf("relaybus/postgres: complete: tx is nil: %w", relaybus.ErrInvalid)
	}
	return s.fencedExec(ctx, tx, "complete", params.Lease, s.q.complete, params.Now)
}

// DeliveryCompleteMany completes several deliveries in one statement.
func (s *Store) DeliveryCompleteMany(ctx context.Context, params *relaybus.DeliveryCompleteManyParams) ([]bool, error) {
	if err := params.Validate(); err != nil {
		return nil, err
	}
	ids, tokens := leaseArrays(params.Leases)
	if len(ids) == 0 {
		return make([]bool, len(params.Leases)), nil
	}
	rows, err := s.pool.Query(ctx, s.q.completeMany, ids, tokens, params.Now)
	if err != nil {
		return nil, errorFrom("complete", err)
	}
	out, err := leaseResults(rows, params.Leases)
	if err != nil {
		return nil, errorFrom("complete", err)
	}
	return out, nil
}

// DeliveryReschedule ends the attempt (counted at claim) as failed and
// makes the delivery pending again at params.AvailableAt.
func (s *Store) DeliveryReschedule(ctx context.Context, params *relaybus.DeliveryRescheduleParams) (bool, error) {
	if err := params.Validate(); err != nil {
		return false, err
	}
	return s.fencedExec(ctx, s.pool, "reschedule", params.Lease, s.q.reschedule,
		params.AvailableAt, relaybus.TruncateError(params.Error), params.Now)
}

// DeliveryBury ends the attempt as failed and makes the delivery dead.
func (s *Store) DeliveryBury(ctx context.Context, params *relaybus.DeliveryBuryParams) (bool, error) {
	if err := params.Validate(); err != nil {
		return false, err
	}
	return s.fencedExec(ctx, s.pool, "bury", params.Lease, s.q.bury,
		relaybus.TruncateError(params.Error), params.Now)
}

// DeliveryRelease makes the delivery pending again and gives back the
// attempt its claim counted.
func (s *Store) DeliveryRelease(ctx context.Context, params *relaybus.DeliveryReleaseParams) (bool, error) {
	if err := params.Validate(); err != nil {
		return false, err
	}
	return s.fencedExec(ctx, s.pool, "release", params.Lease, s.q.release, params.Now)
}

// OwnerRelinquish releases every delivery params.Owner holds, expired
// leases included (nobody took them over yet).
func (s *Store) OwnerRelinquish(ctx context.Context, params *relaybus.OwnerRelinquishParams) (int, error) {
	if err := params.Validate(); err != nil {
		return 0, err
	}
	tag, err := s.pool.Exec(ctx, s.q.relinquish, params.Owner, params.Now)
	if err != nil {
		return 0, errorFrom("relinquish", err)
	}
	return int(tag.RowsAffected()), nil
}

// execer is what a fenced write runs on: the pool or a caller's tx.
type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// fencedExec runs a statement whose WHERE is the fenced clause ($1 id,
// $2 token) with args from $3 on, and reports whether it matched.
func (s *Store) fencedExec(ctx context.Context, db execer, op string, lease relaybus.Lease, sql string, args ...any) (bool, error) {
	id, ok := parseID(lease.DeliveryID)
	if !ok {
		return false, nil
	}
	tag, err := db.Exec(ctx, sql, append([]any{id, lease.Token}, args...)...)
	if err != nil {
		return false, errorFrom(op, err)
	}
	return tag.RowsAffected() == 1, nil
}
