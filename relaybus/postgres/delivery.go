package postgres

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/internal/decimal"
	"github.com/berkcansavur/relaybus/relaybus/internal/decimallease"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

// scanDeliveries collects rows of deliveryColumns with deliveryRow.scan,
// scanning each into one scratch row: the values a delivery is built from
// live in it, not in a heap allocation each (a variable whose address goes
// to Scan escapes, and a claim reads 23 columns of every row).
func scanDeliveries(rows pgx.Rows) ([]*relaytype.Delivery, error) {
	var r deliveryRow
	return pgx.CollectRows(rows, r.scan)
}

// deliveryRow is what scan reads a row into. The nullable
// columns are pgtype values, not pointers: a pointer is an allocation per
// non-null value, and a claim reads the owner, epoch and expiry of every
// delivery it returns.
type deliveryRow struct {
	id, claims                         int64
	lane                               int16
	key, lastError, owner              pgtype.Text
	headers                            []byte
	status                             string
	attempts, maxAttempts              int32
	epoch                              pgtype.Int8
	leaseExpiresAt, completedAt        pgtype.Timestamptz
	eventCreatedAt, createdAt, updated time.Time
}

// scan reads one row of deliveryColumns and checks what it read: a row
// this store did not write (a hand edit, another version) is an error,
// not a delivery with made-up fields.
//
// A pending delivery that is in flight in a lane (the f columns are set)
// is reported as processing, with the lane's owner and expiry and its
// lease token, and Attempts counts the running attempt: the stored
// attempts are the attempts that have ended.
func (r *deliveryRow) scan(row pgx.CollectableRow) (*relaytype.Delivery, error) {
	d := new(relaytype.Delivery)
	// Reset before each row, so that a NULL can never show the last row's
	// headers, whatever the scan plan does with it (pgx writes nil).
	r.headers = nil
	err := row.Scan(&r.id, &d.EventID, &d.EventType, &r.key, &d.Sequence,
		&d.Payload, &r.headers, &r.eventCreatedAt,
		&d.Handler, &r.status, &r.attempts, &r.maxAttempts, &d.AvailableAt, &r.lastError,
		&r.createdAt, &r.updated, &r.completedAt, &r.lane, &r.claims, &d.Suspect,
		&r.owner, &r.epoch, &r.leaseExpiresAt)
	if err != nil {
		return nil, err
	}
	id := r.id
	if r.leaseExpiresAt.InfinityModifier != pgtype.Finite || r.completedAt.InfinityModifier != pgtype.Finite {
		return nil, fmt.Errorf("relaybus/postgres: delivery %d has an infinite lease expiry or completion time", id)
	}
	d.ID = strconv.FormatInt(id, 10)
	d.Status = relaytype.Status(r.status)
	if d.Status != relaytype.StatusPending && d.Status != relaytype.StatusCompleted && d.Status != relaytype.StatusDead {
		return nil, fmt.Errorf("relaybus/postgres: delivery %d has unknown status %q", id, r.status)
	}
	if r.lane < 0 || r.lane >= driver.LaneCount {
		return nil, fmt.Errorf("relaybus/postgres: delivery %d has lane %d, out of range [0, %d)", id, r.lane, driver.LaneCount)
	}
	if r.headers != nil {
		if err := json.Unmarshal(r.headers, &d.Headers); err != nil {
			return nil, fmt.Errorf("relaybus/postgres: delivery %d: decode headers: %w", id, err)
		}
	}
	d.EventCreatedAt, d.CreatedAt, d.UpdatedAt = r.eventCreatedAt, r.createdAt, r.updated
	d.Attempts, d.MaxAttempts = int(r.attempts), int(r.maxAttempts)
	d.Key = r.key.String
	d.LastError = r.lastError.String
	if r.owner.Valid && r.epoch.Valid && r.leaseExpiresAt.Valid && d.Status == relaytype.StatusPending {
		d.Status = relaytype.StatusProcessing
		d.Attempts++
		d.LeaseOwner = r.owner.String
		d.LeaseExpiresAt = r.leaseExpiresAt.Time
		d.LeaseToken = driver.LaneToken{Lane: int(r.lane), Epoch: r.epoch.Int64, Claims: r.claims}.String()
		d.FencingToken = r.epoch.Int64
	}
	if r.completedAt.Valid {
		d.CompletedAt = r.completedAt.Time
	}
	return d, nil
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
