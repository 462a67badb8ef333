package memory

import (
	"context"
	"maps"
	"slices"
	"strings"

	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

// HandlerPause implements driver.Store.
func (s *Store) HandlerPause(ctx context.Context, params *driver.HandlerPauseParams) error {
	if err := params.Validate(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s.pausedMu.Lock()
	defer s.pausedMu.Unlock()
	if _, ok := s.paused[params.Handler]; ok {
		return nil
	}
	if s.paused == nil {
		s.paused = map[string]relaytype.PausedHandler{}
	}
	s.paused[params.Handler] = relaytype.PausedHandler{Handler: params.Handler, Reason: params.Reason, PausedAt: params.Now.Round(0)}
	return nil
}

// HandlerResume implements driver.Store.
func (s *Store) HandlerResume(ctx context.Context, params *driver.HandlerResumeParams) (bool, error) {
	if err := params.Validate(); err != nil {
		return false, err
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	s.pausedMu.Lock()
	_, ok := s.paused[params.Handler]
	delete(s.paused, params.Handler)
	s.pausedMu.Unlock()
	return ok, nil
}

// HandlersPaused implements driver.Store.
func (s *Store) HandlersPaused(ctx context.Context, params *driver.HandlersPausedParams) ([]relaytype.PausedHandler, error) {
	if err := params.Validate(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.pausedMu.Lock()
	defer s.pausedMu.Unlock()
	return slices.SortedFunc(maps.Values(s.paused), func(a, b relaytype.PausedHandler) int {
		return strings.Compare(a.Handler, b.Handler)
	}), nil
}
