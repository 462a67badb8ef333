package postgres

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

// Bounds of a claim's lane taking.
const (
	// claimTakeFirst is how many lanes a claim takes at its first step
	// when the lanes it holds do not fill its limit; every further step
	// takes twice as many, so a claimer holds only about as many lanes as
	// its batch needs, and an empty queue costs a few steps, not 256.
	claimTakeFirst = 4

	// claimQuota is how many deliveries a lane gives while it is held:
	// once a holder has claimed this many from it since it took it, the
	// lane gives nothing more and is handed back as soon as nothing of it
	// is in flight, and the claim takes other lanes, the ones with the
	// oldest due work first (claimOwn, in claim.sql). Without a bound, a
	// claimer would keep the few lanes it holds for as long as they have
	// work and drain them one after another while the other lanes wait:
	// work would not be served oldest first across lanes, and since the
	// deliveries of a lane are spread over every page of the table (the
	// lane is a hash), the deletes of a few lanes would touch every page,
	// each page's first change after a checkpoint writing the whole page
	// to the WAL. With the bound, lanes progress within about claimQuota
	// deliveries of each other, and the deletes move through the table
	// roughly in the order it was written.
	claimQuota = 64

	// claimWalk is how many lanes of the ring a take visits one by one
	// before it looks only at the lanes that have pending work (claimTake,
	// in claim.sql): enough for a deep backlog, where nearly every lane
	// has work, to be served by the walk alone.
	claimWalk = 32
)

// expiredFinalAttempt is the last error of a delivery buried by a
// takeover (claimWrite's $5).
const expiredFinalAttempt = "lease expired after the final attempt"

// DeliveryClaim leases up to params.Limit due deliveries of
// params.Handlers to params.Owner and this store instance, by leasing
// lanes (see the package documentation). One round trip, in one implicit
// transaction:
//
//  1. lock the lanes it holds, then in one statement pick the oldest due
//     deliveries from them, record them in the lanes' in_flight and hand
//     back drained lanes;
//  2. if that did not fill the limit: take up to 4 more lanes that are
//     free or abandoned and have due work (taking an abandoned lane
//     charges what it had in flight), and pick from them.
//
// Step 2 decides in SQL whether it has anything to do (the statements
// pass the claim's count along in a transaction-local setting), so a
// claim from a deep backlog and a claim on hot keys' held lanes are one
// round trip each. While the limit is still not filled and lanes were
// taken, further round trips take 8, 16, ... lanes. Each round trip
// commits on its own; a failure in a later one returns what the earlier
// ones claimed together with the error, as the driver.Store contract
// allows. A suspect (a delivery that was in flight when its lane was
// taken over) is returned alone, only as the first thing a claim finds,
// and never to a params.Busy caller: a busy caller whose oldest candidate
// is a suspect gets nothing and takes no more lanes, so that it drains.
// No delivery row is written, except the charge of a takeover.
func (s *Store) DeliveryClaim(ctx context.Context, params *driver.DeliveryClaimParams) ([]*relaytype.Delivery, error) {
	if err := params.Validate(); err != nil {
		return nil, err
	}
	claimed, _, err := s.claim(ctx, params, nil, nil)
	return claimed, err
}

// ClaimsCompletions reports that DeliveryCompleteClaim may be called
// (driver.CompletingClaimer).
func (s *Store) ClaimsCompletions() bool { return true }

// DeliveryCompleteClaim completes params.Complete's leases and claims
// with params.Claim in one transaction (driver.CompletingClaimer): the
// completion's statement (the one DeliveryCompleteMany runs) goes into
// the claim's first round trip, after the claim has locked the lanes it
// holds and before it looks at them, so that the claim sees the keys and
// the lane room the completions freed, and the round trip commits
// synchronously whatever it claimed. Lanes first, then delivery rows:
// the order a takeover takes them in, so the two never wait on each
// other in a cycle (a takeover skips a lane the claim has locked; a lane
// the claim does not hold it never locks). A failure in that round trip
// leaves Completed nil (the completions may not have committed); one in
// a later round trip returns the completions' outcome with the error.
func (s *Store) DeliveryCompleteClaim(ctx context.Context, params *driver.DeliveryCompleteClaimParams) (*driver.DeliveryCompleteClaimResult, error) {
	if err := params.Validate(); err != nil {
		return nil, err
	}
	c, err := s.newCompletion(params.Complete.Leases)
	if err != nil {
		return nil, err
	}
	claimed, completed, err := s.claim(ctx, &params.Claim, c, params.Complete.Now)
	return &driver.DeliveryCompleteClaimResult{Completed: completed, Claimed: claimed}, err
}

// claim is DeliveryClaim, with the completion c (nil: none) written in
// its first round trip, completed at now; it returns c's results once
// that round trip committed.
func (s *Store) claim(ctx context.Context, params *driver.DeliveryClaimParams, c *completion, now any) (_ []*relaytype.Delivery, completed []bool, _ error) {
	expiresAt := params.Now.Add(params.LeaseDuration)
	hints := s.ledger.hints()
	runHandlers, runMax := keyRunArrays(params.KeyRuns)
	var claimed []*relaytype.Delivery
	tried := []int16{} // not nil: a NULL array would match no lane
	for step := claimTakeFirst; ; step *= 2 {
		batch := &pgx.Batch{}
		batch.Queue(s.q.claimPrelude, len(claimed))
		var own []*relaytype.Delivery
		// The completion goes into the first round trip only.
		completing := c != nil && step == claimTakeFirst
		var hl heldLock
		var locked []int16
		if step == claimTakeFirst {
			hl = s.held.lock(params.Owner, time.Now())
			scanLocked := func(row pgx.Row) error {
				var setting string
				return row.Scan(&setting, &locked)
			}
			if hl.lanes == nil {
				batch.Queue(s.q.claimLock, params.Owner, s.holder, params.Now).QueryRow(scanLocked)
			} else {
				batch.Queue(s.q.claimLockAt, params.Owner, s.holder, params.Now, hl.lanes).QueryRow(scanLocked)
			}
			if completing {
				sql, args := c.statement(now)
				batch.Queue(sql, args...).Query(c.scan)
			}
			batch.Queue(s.q.claimOwn, params.Owner, s.holder, params.Now, params.Handlers,
				params.Limit, false, expiresAt, params.Busy,
				hints.lanes, hints.epochs, hints.picks, hints.outstanding, runHandlers, runMax).Query(collectInto(&own))
		}
		var taken []int16
		cursor := s.takeCursor.Load()
		batch.Queue(s.q.claimTake, min(step, driver.LaneCount), tried, params.Now, params.Handlers,
			params.Limit, cursor)
		batch.Queue(s.q.claimWrite, params.Owner, s.holder, params.Now, expiresAt, expiredFinalAttempt).
			QueryRow(func(row pgx.Row) error {
				var charged int64
				var setting string
				return row.Scan(&taken, &charged, &setting)
			})
		var more []*relaytype.Delivery
		batch.Queue(s.q.claimOwn, params.Owner, s.holder, params.Now, params.Handlers,
			params.Limit, true, expiresAt, params.Busy, noLanes, noEpochs, noCounts, noCounts, runHandlers, runMax).Query(collectInto(&more))
		// A busy caller whose oldest candidate was a suspect gets nothing
		// more in this claim (claimOwn set relaybus.claimed to the limit):
		// read the count back, so that no further round takes lanes.
		full := false
		if params.Busy {
			batch.Queue(s.q.claimCount).QueryRow(func(row pgx.Row) error {
				var n int
				if err := row.Scan(&n); err != nil {
					return err
				}
				full = n >= params.Limit
				return nil
			})
		}
		// A round trip that completes commits synchronously, whatever it
		// claimed: claimAsync's count can never be at or below -1.
		asyncBelow := len(claimed)
		if completing {
			asyncBelow = -1
		}
		batch.Queue(s.q.claimAsync, asyncBelow)
		if err := s.pool.SendBatch(ctx, batch).Close(); err != nil {
			// This round may have committed picks (and completions), and
			// taken lanes, that never arrived.
			s.ledger.reset()
			s.held.distrust(params.Owner)
			return sortClaimed(claimed), completed, errorFrom("claim", err)
		}
		if completing {
			completed = c.results()
		}
		s.moveTakeCursor(cursor, taken)
		if step == claimTakeFirst {
			s.held.locked(params.Owner, hl, time.Now(), locked, taken)
		} else {
			s.held.gained(params.Owner, taken)
		}
		// The take asked for as many lanes as the claim needed, at most
		// step; fewer means no more were to be had.
		asked := min(step, driver.LaneCount, params.Limit-len(claimed)-len(own))
		claimed = append(append(claimed, own...), more...)
		if len(taken) < asked || len(claimed) >= params.Limit || suspectAlone(claimed) || full {
			s.ledger.claimed(claimed)
			return sortClaimed(claimed), completed, nil
		}
		tried = append(tried, taken...)
	}
}

// The hints of claimOwn on the lanes a claim just took: none (the ledger
// has no entry of their new epoch).
var (
	noLanes  = []int16{}
	noEpochs = []int64{}
	noCounts = []int32{}
)

// keyRunArrays returns the key runs of a claim as claimOwn's $13 and $14:
// the handlers and their max (empty arrays, not NULL, when none).
func keyRunArrays(rs []driver.KeyRun) ([]string, []int32) {
	hs, ms := make([]string, len(rs)), make([]int32, len(rs))
	for i, r := range rs {
		hs[i], ms[i] = r.Handler, int32(r.Max)
	}
	return hs, ms
}

// ClaimsKeyRuns reports that DeliveryClaim honours
// driver.DeliveryClaimParams.KeyRuns (driver.KeyRunClaimer): a keyed
// delivery of such a handler comes with the deliveries of its key that
// follow it, as one run (claimOwn in claim.sql).
func (s *Store) ClaimsKeyRuns() bool { return true }

// moveTakeCursor moves the position the next take starts its walk of
// the ring of lanes at to just past the last lane (in ring order from
// cursor) of taken.
func (s *Store) moveTakeCursor(cursor int32, taken []int16) {
	if len(taken) == 0 {
		return
	}
	last := int32(0)
	for _, l := range taken {
		last = max(last, (int32(l)-cursor+driver.LaneCount)%driver.LaneCount)
	}
	s.takeCursor.CompareAndSwap(cursor, (cursor+last+1)%driver.LaneCount)
}

// collectInto returns a batch callback that scans claimed deliveries into
// out.
func collectInto(out *[]*relaytype.Delivery) func(pgx.Rows) error {
	return func(rows pgx.Rows) error {
		var err error
		*out, err = scanDeliveries(rows)
		return err
	}
}

// suspectAlone reports whether a claim returned a suspect, which it
// returns alone: nothing more may join it.
func suspectAlone(ds []*relaytype.Delivery) bool {
	return len(ds) == 1 && ds[0].Suspect
}

// sortClaimed hands claimed deliveries out in claim order: due time, then
// ID (RETURNING has no order, and steps add to the list).
func sortClaimed(ds []*relaytype.Delivery) []*relaytype.Delivery {
	slices.SortFunc(ds, func(a, b *relaytype.Delivery) int {
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
