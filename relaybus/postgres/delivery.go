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
func scanDelivery(row pgx.CollectableRow) (*relaybus.Delivery, error) {
	var (
		d                                  relaybus.Delivery
		id                                 int64
		key, lastError, owner, token       *string
		headers                            []byte
		status                             string
		attempts, maxAttempts              int32
		leaseExpiresAt, completedAt        *time.Time
		eventCreatedAt, createdAt, updated time.Time
	)
	err := row.Scan(&id, &d.EventID, &d.EventType, &key, &d.Sequence,
		&d.Payload, &headers, &eventCreatedAt,
		&d.Handler, &status, &attempts, &maxAttempts, &d.AvailableAt, &lastError,
		&owner, &token, &leaseExpiresAt,
		&createdAt, &updated, &completedAt)
	if err != nil {
		return nil, err
	}
	d.ID = strconv.FormatInt(id, 10)
	d.Status = relaybus.Status(status)
	if !d.Status.Valid() {
		return nil, fmt.Errorf("relaybus/postgres: delivery %d has unknown status %q", id, status)
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
	d.LeaseOwner = deref(owner)
	d.LeaseToken = deref(token)
	if leaseExpiresAt != nil {
		d.LeaseExpiresAt = *leaseExpiresAt
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

// parseID reads a delivery ID this store handed out. ok is false for
// anything else: such an ID names no delivery.
func parseID(s string) (id int64, ok bool) {
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id <= 0 {
		return 0, false
	}
	return id, true
}
