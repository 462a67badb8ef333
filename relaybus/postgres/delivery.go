package postgres

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/internal/decimal"
	"github.com/berkcansavur/relaybus/relaybus/internal/decimallease"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

// scanDelivery reads one row of deliveryColumns and checks what it read:
// a row this store did not write (a hand edit, another version) is an
// error, not a delivery with made-up fields.
//
// A pending delivery that is in flight in a lane (the f columns are set)
// is reported as processing, with the lane's owner and expiry and its
// lease token, and Attempts counts the running attempt: the stored
// attempts are the attempts that have ended.
func scanDelivery(row pgx.CollectableRow) (*relaytype.Delivery, error) {
	var (
		d                                  relaytype.Delivery
		id, claims                         int64
		lane                               int16
		key, lastError, owner              *string
		headers                            []byte
		status                             string
		attempts, maxAttempts              int32
		epoch                              *int64
		leaseExpiresAt, completedAt        *time.Time
		eventCreatedAt, createdAt, updated time.Time
	)
	err := row.Scan(&id, &d.EventID, &d.EventType, &key, &d.Sequence,
		&d.Payload, &headers, &eventCreatedAt,
		&d.Handler, &status, &attempts, &maxAttempts, &d.AvailableAt, &lastError,
		&createdAt, &updated, &completedAt, &lane, &claims, &d.Suspect,
		&owner, &epoch, &leaseExpiresAt)
	if err != nil {
		return nil, err
	}
	d.ID = strconv.FormatInt(id, 10)
	d.Status = relaytype.Status(status)
	if d.Status != relaytype.StatusPending && d.Status != relaytype.StatusCompleted && d.Status != relaytype.StatusDead {
		return nil, fmt.Errorf("relaybus/postgres: delivery %d has unknown status %q", id, status)
	}
	if lane < 0 || lane >= driver.LaneCount {
		return nil, fmt.Errorf("relaybus/postgres: delivery %d has lane %d, out of range [0, %d)", id, lane, driver.LaneCount)
	}
	if headers != nil {
		if err := json.Unmarshal(headers, &d.Headers); err != nil {
			return nil, fmt.Errorf("relaybus/postgres: delivery %d: decode headers: %w", id, err)
		}
	}
	d.EventCreatedAt, d.CreatedAt, d.UpdatedAt = eventCreatedAt, createdAt, updated
	d.Attempts, d.MaxAttempts = int(attempts), int(maxAttempts)
	d.Key = deref(key)
	d.LastError = deref(lastError)
	if owner != nil && epoch != nil && leaseExpiresAt != nil && d.Status == relaytype.StatusPending {
		d.Status = relaytype.StatusProcessing
		d.Attempts++
		d.LeaseOwner = *owner
		d.LeaseExpiresAt = *leaseExpiresAt
		d.LeaseToken = driver.LaneToken{Lane: int(lane), Epoch: *epoch, Claims: claims}.String()
		d.FencingToken = *epoch
	}
	if completedAt != nil {
		d.CompletedAt = *completedAt
	}
	return &d, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// parseID reads a delivery ID this store handed out (see
// decimal.ParseID).
func parseID(s string) (int64, bool) { return decimal.ParseID(s) }

// lease is a parsed relaytype.Lease of this store.
type lease = decimallease.Lease

// parseLease reads a lease this store handed out: an ID or token of
// another form is an ErrInvalid error and the call writes nothing (see
// decimallease.Parse).
func parseLease(op string, l relaytype.Lease) (lease, error) {
	pl, err := decimallease.Parse(l)
	if err != nil {
		return lease{}, fmt.Errorf("relaybus/postgres: %s: %w", op, err)
	}
	return pl, nil
}

// parseLeases parses every lease of a call before anything is written.
func parseLeases(op string, ls []relaytype.Lease) ([]lease, error) {
	out, err := decimallease.ParseAll(ls)
	if err != nil {
		return nil, fmt.Errorf("relaybus/postgres: %s: %w", op, err)
	}
	return out, nil
}
