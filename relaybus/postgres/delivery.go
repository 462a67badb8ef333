package postgres

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/berkcansavur/relaybus/relaybus"
)

// scanDelivery reads one row of deliveryColumns and checks what it read:
// a row this store did not write (a hand edit, another version) is an
// error, not a delivery with made-up fields.
//
// A pending delivery that is in flight in a lane (the f columns are set)
// is reported as processing, with the lane's owner and expiry and its
// lease token, and Attempts counts the running attempt: the stored
// attempts are the attempts that have ended.
func scanDelivery(row pgx.CollectableRow) (*relaybus.Delivery, error) {
	var (
		d                                  relaybus.Delivery
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
	d.Status = relaybus.Status(status)
	if d.Status != relaybus.StatusPending && d.Status != relaybus.StatusCompleted && d.Status != relaybus.StatusDead {
		return nil, fmt.Errorf("relaybus/postgres: delivery %d has unknown status %q", id, status)
	}
	if lane < 0 || lane >= relaybus.LaneCount {
		return nil, fmt.Errorf("relaybus/postgres: delivery %d has lane %d, out of range [0, %d)", id, lane, relaybus.LaneCount)
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
	if owner != nil && epoch != nil && leaseExpiresAt != nil && d.Status == relaybus.StatusPending {
		d.Status = relaybus.StatusProcessing
		d.Attempts++
		d.LeaseOwner = *owner
		d.LeaseExpiresAt = *leaseExpiresAt
		d.LeaseToken = relaybus.LaneToken{Lane: int(lane), Epoch: *epoch, Claims: claims}.String()
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
// relaybus.ParseDeliveryID).
func parseID(s string) (int64, bool) { return relaybus.ParseDeliveryID(s) }

// lease is a parsed relaybus.Lease of this store.
type lease = relaybus.DecimalLease

// parseLease reads a lease this store handed out: an ID or token of
// another form is an ErrInvalid error and the call writes nothing (see
// relaybus.ParseDecimalLease).
func parseLease(op string, l relaybus.Lease) (lease, error) {
	pl, err := relaybus.ParseDecimalLease(l)
	if err != nil {
		return lease{}, fmt.Errorf("relaybus/postgres: %s: %w", op, err)
	}
	return pl, nil
}

// parseLeases parses every lease of a call before anything is written.
func parseLeases(op string, ls []relaybus.Lease) ([]lease, error) {
	out, err := relaybus.ParseDecimalLeases(ls)
	if err != nil {
		return nil, fmt.Errorf("relaybus/postgres: %s: %w", op, err)
	}
	return out, nil
}
