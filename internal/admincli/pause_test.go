package admincli_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/berkcansavur/relaybus/internal/admincli"
)

// TestPauseResume: pause records the handler with its reason, paused
// lists it (table and JSON), resume removes it, and resuming a handler
// that is not paused is exit 4; a bad name is a usage error.
func TestPauseResume(t *testing.T) {
	t.Parallel()
	f := setup(t)
	r := run(t, nil, "paused", f.dsnFlag())
	requireCode(t, admincli.ExitOK, r)
	require.Equal(t, "no handler is paused\n", r.stdout)

	r = run(t, nil, "pause", f.dsnFlag(), "mailer", "--reason", "SMTP outage, INC-7")
	requireCode(t, admincli.ExitOK, r)
	require.Contains(t, r.stdout, "paused mailer")
	ps, err := f.bus.PausedHandlers(t.Context())
	require.NoError(t, err)
	require.Len(t, ps, 1)
	require.Equal(t, "SMTP outage, INC-7", ps[0].Reason)

	r = run(t, nil, "paused", f.dsnFlag())
	requireCode(t, admincli.ExitOK, r)
	require.Regexp(t, `(?m)^handler +paused at +reason\nmailer +\d{4}-\d\d-\d\dT[0-9:]+Z +SMTP outage, INC-7$`, r.stdout)
	r = run(t, nil, "paused", f.dsnFlag(), "--json")
	requireCode(t, admincli.ExitOK, r)
	list := decode[[]struct{ Handler, Reason string }](t, r)
	require.Equal(t, []struct{ Handler, Reason string }{{"mailer", "SMTP outage, INC-7"}}, list)

	r = run(t, nil, "resume", f.dsnFlag(), "mailer")
	requireCode(t, admincli.ExitOK, r)
	require.Contains(t, r.stdout, "resumed mailer")
	r = run(t, nil, "resume", f.dsnFlag(), "mailer")
	requireCode(t, admincli.ExitNotFound, r)
	require.Contains(t, r.stderr, `handler "mailer" is not paused`)

	r = run(t, nil, "pause", f.dsnFlag(), "bad\x00name")
	requireCode(t, admincli.ExitUsage, r)
	r = run(t, nil, "pause", f.dsnFlag())
	requireCode(t, admincli.ExitUsage, r)
	r = run(t, nil, "pause", f.dsnFlag(), "a", "b")
	requireCode(t, admincli.ExitUsage, r)
}
