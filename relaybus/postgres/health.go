package postgres

import (
	"context"
	"time"

	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

var _ driver.HealthReporter = (*Store)(nil)

// StoreHealth reads the store's upkeep from PostgreSQL's statistics
// views, in one statement (health.sql's storeHealth): the deliveries
// table's live and dead rows and when it was last vacuumed, the updates
// of the lanes table and how many were HOT, and the session or prepared
// transaction holding the xmin horizon furthest back. It reads none of
// the store's rows, so its cost does not grow with the backlog, and it
// takes no lock. Bus.WatchStoreHealth calls it, warns past thresholds,
// and docs/operations.md says what to do about each warning.
//
// Other roles' sessions are visible to it only with the privileges of
// pg_read_all_stats (pg_monitor); without them a transaction another
// role holds open is not reported. The counts are PostgreSQL's
// statistics (see relaytype.StoreHealth).
func (s *Store) StoreHealth(ctx context.Context, params *driver.StoreHealthParams) (*relaytype.StoreHealth, error) {
	if err := params.Validate(); err != nil {
		return nil, err
	}
	var (
		h                                relaytype.StoreHealth
		lastAutovacuum, lastVacuum       *time.Time
		kind, name, user, state, backend *string
		pid                              *int32
		xactStart, queryStart            *time.Time
		xminAge                          *int64
	)
	err := s.pool.QueryRow(ctx, s.q.storeHealth).Scan(&h.At,
		&h.DeliveriesLiveRows, &h.DeliveriesDeadRows, &lastAutovacuum, &lastVacuum,
		&h.LaneUpdates, &h.LaneHOTUpdates,
		&kind, &pid, &name, &user, &state, &backend, &xactStart, &queryStart, &xminAge)
	if err != nil {
		return nil, errorFrom("store health", err)
	}
	h.DeliveriesLastAutovacuum = derefTime(lastAutovacuum)
	h.DeliveriesLastVacuum = derefTime(lastVacuum)
	if kind != nil {
		x := &relaytype.XminHolder{
			Kind: *kind, Name: deref(name), User: deref(user), State: deref(state), BackendType: deref(backend),
			XactStart: derefTime(xactStart), QueryStart: derefTime(queryStart),
		}
		if pid != nil {
			x.PID = int(*pid)
		}
		if xminAge != nil {
			x.XminAge = *xminAge
		}
		if !x.XactStart.IsZero() {
			x.Age = max(h.At.Sub(x.XactStart), 0)
		}
		h.XminHolder = x
	}
	return &h, nil
}

func derefTime(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}
