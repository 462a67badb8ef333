package postgres

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

// HandlerPause records a paused handler in the paused_handlers table
// (pause.sql); a second pause keeps the first's time and reason.
func (s *Store) HandlerPause(ctx context.Context, params *driver.HandlerPauseParams) error {
	if err := params.Validate(); err != nil {
		return err
	}
	if _, err := s.pool.Exec(ctx, s.q.pause, params.Handler, params.Reason, params.Now); err != nil {
		return errorFrom("pause", err)
	}
	return nil
}

// HandlerResume deletes a handler's pause; it reports whether there was
// one.
func (s *Store) HandlerResume(ctx context.Context, params *driver.HandlerResumeParams) (bool, error) {
	if err := params.Validate(); err != nil {
		return false, err
	}
	var h string
	err := s.pool.QueryRow(ctx, s.q.resume, params.Handler).Scan(&h)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return false, nil
	case err != nil:
		return false, errorFrom("resume", err)
	}
	return true, nil
}

// HandlersPaused reads the paused_handlers table, in name order.
func (s *Store) HandlersPaused(ctx context.Context, params *driver.HandlersPausedParams) ([]relaytype.PausedHandler, error) {
	if err := params.Validate(); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, s.q.pausedList)
	if err != nil {
		return nil, errorFrom("handlers paused", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (relaytype.PausedHandler, error) {
		var p relaytype.PausedHandler
		err := r.Scan(&p.Handler, &p.Reason, &p.PausedAt)
		return p, err
	})
	if err != nil {
		return nil, errorFrom("handlers paused", err)
	}
	return out, nil
}
