package storetest

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

// testPause holds a store to what pausing a handler needs: a pause is
// recorded with its reason and time and listed in name order until it
// is resumed; a second pause keeps the first; resume says whether there
// was a pause; pauses are the store's, not an instance's (the dispatchers
// of every process read them); bad params are ErrInvalid. Claims do not
// read pauses: the dispatcher leaves paused handlers out of its claim's
// handlers, so a pause changes nothing a claim returns here.
func testPause[TTx any](t *testing.T, newEnv func(*testing.T) *env[TTx]) {
	t.Run("RecordedListedResumed", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		list := func() []relaytype.PausedHandler {
			t.Helper()
			ps, err := e.s.HandlersPaused(e.ctx, &driver.HandlersPausedParams{})
			require.NoError(t, err)
			return ps
		}
		require.Empty(t, list(), "a fresh store has no pauses")

		require.NoError(t, e.s.HandlerPause(e.ctx, &driver.HandlerPauseParams{Handler: "mailer", Reason: "SMTP outage, INC-7", Now: At(time.Second)}))
		require.NoError(t, e.s.HandlerPause(e.ctx, &driver.HandlerPauseParams{Handler: "audit", Now: At(2 * time.Second)}))
		require.NoError(t, e.s.HandlerPause(e.ctx, &driver.HandlerPauseParams{Handler: "mailer", Reason: "again", Now: At(3 * time.Second)}))
		require.Equal(t, []relaytype.PausedHandler{
			{Handler: "audit", Reason: "", PausedAt: At(2 * time.Second)},
			{Handler: "mailer", Reason: "SMTP outage, INC-7", PausedAt: At(time.Second)},
		}, normalizePaused(list()), "in name order; the second pause of mailer kept the first")

		ok, err := e.s.HandlerResume(e.ctx, &driver.HandlerResumeParams{Handler: "mailer"})
		require.NoError(t, err)
		require.True(t, ok)
		ok, err = e.s.HandlerResume(e.ctx, &driver.HandlerResumeParams{Handler: "mailer"})
		require.NoError(t, err)
		require.False(t, ok, "resuming a handler that is not paused")
		ok, err = e.s.HandlerResume(e.ctx, &driver.HandlerResumeParams{Handler: "never-paused"})
		require.NoError(t, err)
		require.False(t, ok)
		require.Equal(t, []relaytype.PausedHandler{{Handler: "audit", PausedAt: At(2 * time.Second)}}, normalizePaused(list()))

		// A pause after a resume is a new one.
		require.NoError(t, e.s.HandlerPause(e.ctx, &driver.HandlerPauseParams{Handler: "mailer", Reason: "again", Now: At(4 * time.Second)}))
		require.Equal(t, []relaytype.PausedHandler{
			{Handler: "audit", PausedAt: At(2 * time.Second)},
			{Handler: "mailer", Reason: "again", PausedAt: At(4 * time.Second)},
		}, normalizePaused(list()))
	})

	t.Run("LongestNameAndReason", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		name := strings.Repeat("h", driver.MaxHandlerNameBytes)
		reason := strings.Repeat("r", driver.MaxPauseReasonBytes-len("é")) + "é"
		require.NoError(t, e.s.HandlerPause(e.ctx, &driver.HandlerPauseParams{Handler: name, Reason: reason, Now: At(0)}))
		ps, err := e.s.HandlersPaused(e.ctx, &driver.HandlersPausedParams{})
		require.NoError(t, err)
		require.Len(t, ps, 1)
		require.Equal(t, name, ps[0].Handler)
		require.Equal(t, reason, ps[0].Reason)
	})

	t.Run("InvalidParams", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		invalid := func(err error) {
			t.Helper()
			require.Error(t, err)
			require.True(t, errors.Is(err, relaytype.ErrInvalid), "%v", err)
		}
		invalid(e.s.HandlerPause(e.ctx, nil))
		invalid(e.s.HandlerPause(e.ctx, &driver.HandlerPauseParams{Now: At(0)}))
		invalid(e.s.HandlerPause(e.ctx, &driver.HandlerPauseParams{Handler: "h"}))
		invalid(e.s.HandlerPause(e.ctx, &driver.HandlerPauseParams{Handler: "h", Reason: strings.Repeat("r", driver.MaxPauseReasonBytes+1), Now: At(0)}))
		invalid(e.s.HandlerPause(e.ctx, &driver.HandlerPauseParams{Handler: "h", Reason: "\xff", Now: At(0)}))
		invalid(e.s.HandlerPause(e.ctx, &driver.HandlerPauseParams{Handler: strings.Repeat("h", driver.MaxHandlerNameBytes+1), Now: At(0)}))
		_, err := e.s.HandlerResume(e.ctx, nil)
		invalid(err)
		_, err = e.s.HandlerResume(e.ctx, &driver.HandlerResumeParams{})
		invalid(err)
		_, err = e.s.HandlersPaused(e.ctx, nil)
		invalid(err)
		ps, err := e.s.HandlersPaused(e.ctx, &driver.HandlersPausedParams{})
		require.NoError(t, err)
		require.Empty(t, ps, "nothing invalid was recorded")
	})
}

// normalizePaused puts the times of ps in UTC, so that a store that
// returns them in its own location compares equal; nil becomes empty.
func normalizePaused(ps []relaytype.PausedHandler) []relaytype.PausedHandler {
	out := make([]relaytype.PausedHandler, len(ps))
	for i, p := range ps {
		p.PausedAt = p.PausedAt.UTC()
		out[i] = p
	}
	return out
}
