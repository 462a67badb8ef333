package admincli_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/berkcansavur/relaybus/internal/admincli"
)

// TestHealth: the report of a store nothing holds back is healthy (exit
// 0); a session that holds a snapshot past --xmin-age-max is named, by
// pid, in a warning, and the command exits 5, as text and as JSON; with
// the check off it is healthy again.
func TestHealth(t *testing.T) {
	t.Parallel()
	f := setup(t)
	r := run(t, nil, "health", f.dsnFlag())
	requireCode(t, admincli.ExitOK, r)
	require.Contains(t, r.stdout, "deliveries table: ")
	require.Contains(t, r.stdout, "xmin horizon: no other session holds a snapshot")
	require.Contains(t, r.stdout, "healthy: no check past its threshold")

	// A REPEATABLE READ transaction holds its snapshot once it has run a
	// query, until it ends.
	conn, err := f.pool.Acquire(t.Context())
	require.NoError(t, err)
	defer conn.Release()
	tx, err := conn.Begin(t.Context())
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(t.Context()) }()
	_, err = tx.Exec(t.Context(), "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
	require.NoError(t, err)
	var pid int
	require.NoError(t, tx.QueryRow(t.Context(), "SELECT pg_backend_pid()").Scan(&pid))
	time.Sleep(20 * time.Millisecond)

	r = run(t, nil, "health", f.dsnFlag(), "--xmin-age-max", "10ms")
	requireCode(t, admincli.ExitUnhealthy, r)
	require.Contains(t, r.stdout, "xmin horizon: held furthest back by session pid "+strconv.Itoa(pid))
	require.Contains(t, r.stdout, "1 warning:\n  xmin_horizon: ")
	require.Contains(t, r.stderr, "relaybus health: 1 warning")

	r = run(t, nil, "health", f.dsnFlag(), "--xmin-age-max", "10ms", "--json")
	requireCode(t, admincli.ExitUnhealthy, r)
	h := decode[struct {
		Healthy    bool `json:"healthy"`
		XminHolder *struct {
			PID        int     `json:"pid"`
			State      string  `json:"state"`
			AgeSeconds float64 `json:"age_seconds"`
		} `json:"xmin_holder"`
		Warnings []struct{ Check, Message string } `json:"warnings"`
	}](t, r)
	require.False(t, h.Healthy)
	require.NotNil(t, h.XminHolder)
	require.Equal(t, pid, h.XminHolder.PID)
	require.Equal(t, "idle in transaction", h.XminHolder.State)
	require.GreaterOrEqual(t, h.XminHolder.AgeSeconds, 0.01)
	require.Len(t, h.Warnings, 1)
	require.Equal(t, "xmin_horizon", h.Warnings[0].Check)

	r = run(t, nil, "health", f.dsnFlag(), "--xmin-age-max", "off")
	requireCode(t, admincli.ExitOK, r)
	require.Contains(t, r.stdout, "held furthest back by session pid "+strconv.Itoa(pid), "still reported, not judged")
}

// TestHealthFlags: thresholds out of range are usage errors, said before
// any connection is tried (the DSN names no server).
func TestHealthFlags(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"--xmin-age-max", "0"},
		{"--xmin-age-max", "5"},
		{"--dead-rows-share-max", "2"},
		{"--dead-rows-share-max", "NaN"},
		{"--lane-hot-share-min", "-0.5"},
		{"--dead-rows-min", "1.5"},
		{"--lane-updates-min", "0"},
	} {
		r := run(t, nil, append([]string{"health", "--dsn", "postgres://nobody@127.0.0.1:1/none"}, args...)...)
		requireCode(t, admincli.ExitUsage, r)
		require.True(t, strings.HasPrefix(r.stderr, "relaybus health: invalid value"), "%v: %s", args, r.stderr)
	}
}
