package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/berkcansavur/relaybus/relaybus"
)

// leaseTokenBytes is the entropy of a lease token: 128 bits, so a token
// cannot be guessed and two claims never share one.
const leaseTokenBytes = 16

func newLeaseToken() (string, error) {
	b := make([]byte, leaseTokenBytes)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("relaybus/postgres: lease token: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// DeliveryClaim leases up to params.Limit due deliveries. It sends two
// statements in one round trip, which PostgreSQL runs as one implicit
// transaction: bury expired leases whose budget is spent, then claim.
// Every delivery gets a token made of 128 fresh random bits and its ID.
// Until the deliveries table has planner statistics, it first checks for
// them and analyzes the table once it is big enough (ensureStatistics).
func (s *Store) DeliveryClaim(ctx context.Context, params *relaybus.DeliveryClaimParams) ([]*relaybus.Delivery, error) {
	if err := params.Validate(); err != nil {
		return nil, err
	}
	s.ensureStatistics(ctx)
	token, err := newLeaseToken()
	if err != nil {
		return nil, err
	}
	expiresAt := params.Now.Add(params.LeaseDuration)
	batch := &pgx.Batch{}
	batch.Queue(s.q.claimBury, params.Handlers, params.Now, params.Limit)
	var claimed []*relaybus.Delivery
	batch.Queue(s.q.claim, params.Handlers, params.Now, params.Limit, params.Owner, token, expiresAt).
		Query(func(rows pgx.Rows) error {
			var err error
			claimed, err = pgx.CollectRows(rows, scanDelivery)
			return err
		})
	if err := s.pool.SendBatch(ctx, batch).Close(); err != nil {
		return nil, errorFrom("claim", err)
	}
	// RETURNING has no order; hand them out in claim order.
	slices.SortFunc(claimed, func(a, b *relaybus.Delivery) int {
		if c := a.AvailableAt.Compare(b.AvailableAt); c != 0 {
			return c
		}
		return compareIDs(a.ID, b.ID)
	})
	return claimed, nil
}

// compareIDs orders the decimal IDs of this store numerically.
func compareIDs(a, b string) int {
	if len(a) != len(b) {
		return len(a) - len(b)
	}
	return strings.Compare(a, b)
}
