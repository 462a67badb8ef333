package postgres

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/berkcansavur/relaybus/relaybus"
)

// Bounds of a claim's lane taking.
const (
	// claimTakeFirst is how many lanes a claim takes at its first step
	// when the lanes it holds do not fill its limit; every further step
	// takes twice as many, so a claimer holds only about as many lanes as
	// its batch needs, and an empty queue costs a few steps, not 256.
	claimTakeFirst = 4
)

// DeliveryClaim leases up to params.Limit due deliveries of
// params.Handlers to params.Owner and this store instance, by leasing
// lanes (see the package documentation):
//
//  1. From the lanes it holds, one round trip (a statement that locks
//     them, then one that claims): pick the oldest due deliveries,
//     record them in the lanes' in_flight, hand back drained lanes. With
//     a deep backlog this is the whole claim.
//  2. While that does not fill the limit: take 4, then 8, 16, ... more
//     lanes that are free or abandoned and have due work (taking an
//     abandoned lane charges what it had in flight), and pick from them,
//     both in one round trip.
//
// Each statement commits on its own and is consistent on its own. A
// failure in step 2 returns what step 1 claimed together with the error,
// as the relaybus.Store contract allows. A suspect (a delivery that was in
// flight when its lane was taken over) is returned alone, and only as the
// first thing a claim finds. No delivery row is written, except the charge
// of a takeover.
func (s *Store) DeliveryClaim(ctx context.Context, params *relaybus.DeliveryClaimParams) ([]*relaybus.Delivery, error) {
	if err := params.Validate(); err != nil {
		return nil, err
	}
	expiresAt := params.Now.Add(params.LeaseDuration)
	var claimed []*relaybus.Delivery
	batch := &pgx.Batch{}
	s.queueClaimOwn(batch, params, true, true, expiresAt, &claimed)
	if err := s.pool.SendBatch(ctx, batch).Close(); err != nil {
		return nil, errorFrom("claim", err)
	}
	tried := []int16{} // not nil: a NULL array would match no lane
	for step := claimTakeFirst; len(claimed) < params.Limit && !suspectAlone(claimed); step *= 2 {
		remaining := params.Limit - len(claimed)
		batch := &pgx.Batch{}
		var taken []int16
		batch.Queue(s.q.claimTake, params.Owner, s.holder, params.Now, params.Handlers,
			min(step, remaining, relaybus.LaneCount), expiresAt, expiredFinalAttempt, tried).
			QueryRow(func(row pgx.Row) error {
				var charged int64
				return row.Scan(&taken, &charged)
			})
		var more []*relaybus.Delivery
		p := *params
		p.Limit = remaining
		s.queueClaimOwn(batch, &p, len(claimed) == 0, false, expiresAt, &more)
		if err := s.pool.SendBatch(ctx, batch).Close(); err != nil {
			return sortClaimed(claimed), errorFrom("claim", err)
		}
		claimed = append(claimed, more...)
		if len(taken) == 0 {
			break
		}
		tried = append(tried, taken...)
	}
	return sortClaimed(claimed), nil
}

// queueClaimOwn queues the claim from held lanes (all of them, or only
// those with nothing in flight) behind the statement that locks them
// (see claimLock), and collects what it claims into out.
func (s *Store) queueClaimOwn(batch *pgx.Batch, params *relaybus.DeliveryClaimParams, allowSuspect, allLanes bool, expiresAt time.Time, out *[]*relaybus.Delivery) {
	batch.Queue(asyncCommit)
	batch.Queue(s.q.claimLock, params.Owner, s.holder, params.Now, allLanes)
	batch.Queue(s.q.claimOwn, params.Owner, s.holder, params.Now, params.Handlers,
		params.Limit, allowSuspect, allLanes, expiresAt).
		Query(func(rows pgx.Rows) error {
			var err error
			*out, err = pgx.CollectRows(rows, scanDelivery)
			return err
		})
}

// asyncCommit makes the claim's transaction commit without waiting for
// its WAL to reach the disk. A claim lost in a database crash only makes
// its deliveries claimable again, which at-least-once allows (their
// handlers may run twice); the holder's completion, which does wait,
// flushes the claim with it. A claim is a hot key's every other commit,
// so waiting for the disk would halve its throughput.
const asyncCommit = "SELECT set_config('synchronous_commit', 'off', true)"

// suspectAlone reports whether a claim returned a suspect, which it
// returns alone: nothing more may join it.
func suspectAlone(ds []*relaybus.Delivery) bool {
	return len(ds) == 1 && ds[0].Suspect
}

// sortClaimed hands claimed deliveries out in claim order: due time, then
// ID (RETURNING has no order, and steps add to the list).
func sortClaimed(ds []*relaybus.Delivery) []*relaybus.Delivery {
	slices.SortFunc(ds, func(a, b *relaybus.Delivery) int {
		if c := a.AvailableAt.Compare(b.AvailableAt); c != 0 {
			return c
		}
		return compareIDs(a.ID, b.ID)
	})
	return ds
}

// compareIDs orders the decimal IDs of this store numerically.
func compareIDs(a, b string) int {
	if len(a) != len(b) {
		return len(a) - len(b)
	}
	return strings.Compare(a, b)
}
