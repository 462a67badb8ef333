package admincli_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/berkcansavur/relaybus/internal/admincli"
	"github.com/berkcansavur/relaybus/internal/dbenv/dbtest"
	"github.com/berkcansavur/relaybus/relaybus"
	"github.com/berkcansavur/relaybus/relaybus/postgres"
)

// TestStats: the counts per handler and in all, as a table and as JSON,
// and the oldest due delivery's wait (the audit deliveries have waited
// since the fixture was seeded).
func TestStats(t *testing.T) {
	t.Parallel()
	f := setup(t)
	r := run(t, nil, "stats", f.dsnFlag())
	requireCode(t, admincli.ExitOK, r)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 6, r.stdout)
	require.Equal(t, []string{"handler", "pending", "processing", "completed", "dead", "oldest", "due"}, strings.Fields(lines[0]))
	audit := strings.Fields(lines[1])
	require.Equal(t, []string{"audit", "3", "0", "0", "0"}, audit[:5])
	require.True(t, strings.HasPrefix(audit[5], "960h"), "audit's oldest due: %s", lines[1])
	require.Equal(t, []string{"billing", "0", "0", "0", "1", "-"}, strings.Fields(lines[2]))
	require.Equal(t, []string{"mailer", "0", "0", "0", "3", "-"}, strings.Fields(lines[3]))
	all := strings.Fields(lines[4])
	require.Equal(t, []string{"(all)", "3", "0", "0", "4"}, all[:5])
	require.Equal(t, audit[5], all[5], "the oldest of all is audit's")
	require.Contains(t, lines[5], "the oldest due delivery has waited 960h")

	r = run(t, nil, "stats", f.dsnFlag(), "--json")
	requireCode(t, admincli.ExitOK, r)
	st := decode[struct {
		Pending, Processing, Completed, Dead int64
		Handlers                             map[string]map[string]float64
		OldestDueAgeSeconds                  float64 `json:"oldest_due_age_seconds"`
	}](t, r)
	require.EqualValues(t, 3, st.Pending)
	require.EqualValues(t, 4, st.Dead)
	require.Equal(t, map[string]float64{"pending": 0, "processing": 0, "completed": 0, "dead": 3, "oldest_due_age_seconds": 0}, st.Handlers["mailer"])
	require.Equal(t, st.OldestDueAgeSeconds, st.Handlers["audit"]["oldest_due_age_seconds"], "the oldest of all is audit's")
	require.NotContains(t, st.Handlers, "ledger", "its delivery completed and was deleted")
	require.InDelta(t, seedAge.Seconds(), st.OldestDueAgeSeconds, 600)
}

// TestStatsFromEnv: the DSN comes from RELAYBUS_DATABASE_URL when --dsn
// is not given.
func TestStatsFromEnv(t *testing.T) {
	t.Parallel()
	f := setup(t)
	r := run(t, &runOpts{env: map[string]string{admincli.EnvDSN: f.dsn}}, "stats", "--json")
	requireCode(t, admincli.ExitOK, r)
	require.Contains(t, r.stdout, `"dead": 4`)
}

// TestDeadList: the dead letters with the first line of their last
// error; a page at a time, the next page's command on the last line and
// its cursor in JSON; a filter; no dead letters.
func TestDeadList(t *testing.T) {
	t.Parallel()
	f := setup(t)
	r := run(t, nil, "dead", "list", f.dsnFlag())
	requireCode(t, admincli.ExitOK, r)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 5, r.stdout)
	require.Equal(t, []string{"id", "handler", "event", "type", "key", "attempts", "died", "last", "error"}, strings.Fields(lines[0]))
	require.Regexp(t, `^`+f.dead[0]+` +mailer +order\.placed +customer-1 +1/10 +\d{4}-\d\d-\d\dT[0-9:]+Z +permanent: smtp: 550 mailbox unavailable\.\.\.$`, lines[1])
	require.Contains(t, r.stdout, "billing")
	require.Contains(t, r.stdout, "no such account")
	require.NotContains(t, r.stdout, "remote said", "the table shows the first line")
	require.NotContains(t, r.stdout, "more:")

	r = run(t, nil, "dead", "list", f.dsnFlag(), "--limit", "2")
	requireCode(t, admincli.ExitOK, r)
	lines = strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 4, r.stdout)
	next := "relaybus dead list --limit 2 --after " + f.dead[1]
	require.Equal(t, "more: "+next, lines[3])
	r = run(t, nil, append(strings.Fields(next)[1:], f.dsnFlag())...)
	requireCode(t, admincli.ExitOK, r)
	require.Contains(t, r.stdout, f.dead[2]+" ")
	require.Contains(t, r.stdout, f.dead[3]+" ")
	require.NotContains(t, r.stdout, "more:")

	r = run(t, nil, "dead", "list", f.dsnFlag(), "--handler", "mailer", "--key", "customer-2", "--json")
	requireCode(t, admincli.ExitOK, r)
	page := decode[struct {
		Deliveries []map[string]any
		Next       string
	}](t, r)
	require.Len(t, page.Deliveries, 1)
	d := page.Deliveries[0]
	require.Equal(t, f.dead[1], d["id"])
	require.Equal(t, "dead", d["status"])
	require.Equal(t, "evt-2", d["event_id"])
	require.Equal(t, "permanent: "+mailerError, d["last_error"], "JSON has the whole error")
	require.EqualValues(t, 12, d["payload_bytes"])
	require.NotContains(t, d, "payload_base64", "a list leaves payloads out")
	require.Empty(t, page.Next)

	r = run(t, nil, "dead", "list", f.dsnFlag(), "--handler", "audit")
	requireCode(t, admincli.ExitOK, r)
	require.Equal(t, "no dead letters\n", r.stdout)
	r = run(t, nil, "dead", "list", f.dsnFlag(), "--handler", "audit", "--json")
	requireCode(t, admincli.ExitOK, r)
	require.JSONEq(t, `{"deliveries": [], "next": ""}`, r.stdout)
}

// TestDeadShow: one dead letter in full (its whole last error, headers,
// payload as text or, when it is not, only in JSON), and exit status 4
// for an ID that is no dead letter.
func TestDeadShow(t *testing.T) {
	t.Parallel()
	f := setup(t)
	r := run(t, nil, "dead", "show", f.dead[0], f.dsnFlag())
	requireCode(t, admincli.ExitOK, r)
	for _, want := range []string{
		"delivery   " + f.dead[0],
		"status     dead",
		"handler    mailer",
		"event      evt-1 (order.placed)",
		"key        customer-1 (sequence 1)",
		"attempts   1 of 10",
		"header     trace=t-1",
		"payload (12 bytes)\n  {\"order\": 1}\n",
		"last error\n  permanent: smtp: 550 mailbox unavailable\n  remote said: user unknown\n",
	} {
		require.Contains(t, r.stdout, want)
	}

	// evt-3's payload is not text: the JSON has it exactly.
	binary := f.dead[2]
	r = run(t, nil, "dead", "show", "--handler", "mailer", binary, f.dsnFlag())
	requireCode(t, admincli.ExitOK, r)
	require.Contains(t, r.stdout, "payload (2 bytes)\n  (not text: --json gives it as payload_base64)")
	r = run(t, nil, "dead", "show", binary, f.dsnFlag(), "--json")
	requireCode(t, admincli.ExitOK, r)
	d := decode[map[string]any](t, r)
	require.Equal(t, base64.StdEncoding.EncodeToString([]byte{0xff, 0xfe}), d["payload_base64"])
	require.NotContains(t, d, "payload_text")
	require.Equal(t, "evt-3", d["event_id"])

	// The audit delivery is pending, not dead; an ID nobody has.
	var pending string
	for id := range f.statuses(t, "audit") {
		pending = id
	}
	for _, id := range []string{pending, "999999", "not-an-id"} {
		r = run(t, nil, "dead", "show", id, f.dsnFlag())
		requireCode(t, admincli.ExitNotFound, r)
		require.Contains(t, r.stderr, fmt.Sprintf("no dead letter %q", id))
		require.Empty(t, r.stdout)
	}
	r = run(t, nil, "dead", "show", f.dead[0], "--handler", "billing", f.dsnFlag())
	requireCode(t, admincli.ExitNotFound, r)
	require.Contains(t, r.stderr, `matching --handler "billing"`)
}

// TestRequeueNamed: the IDs named are requeued (pending again, with a
// fresh budget, and their last error kept) without a confirmation; one
// that does not exist or is not dead is reported, the others still
// requeued, and the exit status is 4.
func TestRequeueNamed(t *testing.T) {
	t.Parallel()
	f := setup(t)
	r := run(t, nil, "requeue", f.dead[0], f.dsnFlag())
	requireCode(t, admincli.ExitOK, r)
	require.Equal(t, "requeued 1 delivery\n", r.stdout)
	require.Equal(t, relaybus.StatusPending, f.statuses(t, "mailer")[f.dead[0]])
	page, err := f.bus.ListDeliveries(t.Context(), &relaybus.DeliveryListParams{Handler: "mailer", Key: "customer-1"})
	require.NoError(t, err)
	require.Equal(t, 0, page.Deliveries[0].Attempts)
	require.Equal(t, "permanent: "+mailerError, page.Deliveries[0].LastError)

	r = run(t, nil, "requeue", f.dead[1], f.dead[0], "nope", "--json", f.dsnFlag())
	requireCode(t, admincli.ExitNotFound, r)
	require.JSONEq(t, fmt.Sprintf(`{"requeued": [%q], "skipped": [{"id": %q, "reason": "not dead"}, {"id": "nope", "reason": "not found"}], "more": false}`, f.dead[1], f.dead[0]), r.stdout)
	require.Contains(t, r.stderr, "2 of 3 not requeued")
	require.Equal(t, relaybus.StatusPending, f.statuses(t, "mailer")[f.dead[1]])
	require.EqualValues(t, 2, f.deadCount(t))
}

// TestRequeueConfirmation: a bulk requeue asks first. Not asked (stdin
// not a terminal), or answered anything but yes, it changes nothing and
// exits 3; answered yes, or given --yes, it requeues what it listed.
func TestRequeueConfirmation(t *testing.T) {
	t.Parallel()
	f := setup(t)
	r := run(t, nil, "requeue", "--handler", "mailer", f.dsnFlag())
	requireCode(t, admincli.ExitRefused, r)
	require.Contains(t, r.stderr, `not confirmed: requeue 3 dead letters matching --handler "mailer" (mailer 3)? Their handlers run them again.`)
	require.Contains(t, r.stderr, "stdin is not a terminal, so nothing was asked and nothing was changed; pass --yes")
	require.Empty(t, r.stdout)
	require.EqualValues(t, 4, f.deadCount(t))

	for _, answer := range []string{"no\n", "y\n", "", "yes please\n"} {
		r = run(t, &runOpts{interactive: true, stdin: answer}, "requeue", "--all", f.dsnFlag())
		requireCode(t, admincli.ExitRefused, r)
		require.Contains(t, r.stderr, "requeue 4 dead letters (billing 1, mailer 3)? Their handlers run them again.\nType yes to go on: ")
		require.Contains(t, r.stderr, "nothing was changed")
		require.EqualValues(t, 4, f.deadCount(t), "answer %q", answer)
	}

	r = run(t, &runOpts{interactive: true, stdin: "yes\n"}, "requeue", "--handler", "mailer", "--key", "customer-1", f.dsnFlag())
	requireCode(t, admincli.ExitOK, r)
	require.Equal(t, "requeued 1 delivery\n", r.stdout)
	require.EqualValues(t, 3, f.deadCount(t))

	r = run(t, nil, "requeue", "--all", "--yes", "--json", f.dsnFlag())
	requireCode(t, admincli.ExitOK, r)
	out := decode[struct {
		Requeued []string
		Skipped  []any
		More     bool
	}](t, r)
	require.ElementsMatch(t, f.dead[1:], out.Requeued)
	require.Empty(t, out.Skipped)
	require.EqualValues(t, 0, f.deadCount(t))

	r = run(t, nil, "requeue", "--all", f.dsnFlag())
	requireCode(t, admincli.ExitOK, r)
	require.Equal(t, "no dead letters: nothing to requeue\n", r.stdout, "nothing to confirm")
}

// TestPurge: a purge asks first; refused, it deletes nothing. With --yes
// it deletes the dead letters past --dead (the fixture's are 40 days
// old), none when they are younger than it, and the events past
// --completed that have no delivery left.
func TestPurge(t *testing.T) {
	t.Parallel()
	f := setup(t)
	r := run(t, nil, "purge", "--dead", "30d", "--completed", "7d", f.dsnFlag())
	requireCode(t, admincli.ExitRefused, r)
	require.Contains(t, r.stderr, "not confirmed: delete dead letters last updated before ")
	require.Contains(t, r.stderr, "(older than 30d); and completed deliveries completed before ")
	require.Contains(t, r.stderr, "This cannot be undone.")
	r = run(t, &runOpts{interactive: true, stdin: "no\n"}, "purge", "--dead", "30d", f.dsnFlag())
	requireCode(t, admincli.ExitRefused, r)
	require.EqualValues(t, 4, f.deadCount(t))

	r = run(t, nil, "purge", "--dead", "60d", "--yes", f.dsnFlag())
	requireCode(t, admincli.ExitOK, r)
	require.Equal(t, "purged 0 deliveries and 0 events\n", r.stdout)
	require.EqualValues(t, 4, f.deadCount(t))

	// Requeue evt-4's billing delivery and complete it, so that evt-4 has
	// no delivery left: the completed retention then purges the event.
	r = run(t, nil, "requeue", f.dead[3], f.dsnFlag())
	requireCode(t, admincli.ExitOK, r)
	worker, err := relaybus.New[pgx.Tx](f.store, relaybus.Config{})
	require.NoError(t, err)
	require.NoError(t, worker.Handle("invoice.sent", "billing", func(context.Context, *relaybus.Delivery) error { return nil }, nil))
	res, err := worker.Work(t.Context(), nil)
	require.NoError(t, err)
	require.Len(t, res.Worked, 1)

	r = run(t, &runOpts{interactive: true, stdin: "yes\n"}, "purge", "--dead", "720h", "--completed", "30d", "--json", f.dsnFlag())
	requireCode(t, admincli.ExitOK, r)
	out := decode[map[string]any](t, r)
	require.EqualValues(t, 3, out["deliveries"], "the three mailer dead letters")
	require.EqualValues(t, 1, out["events"], "evt-4, published 40 days ago, no delivery left")
	require.Contains(t, out, "dead_before")
	require.Contains(t, out, "completed_before")
	require.EqualValues(t, 0, f.deadCount(t))
	require.Len(t, f.statuses(t, "audit"), 3, "pending deliveries are never purged")
}

// TestSchema: schema prints the store's SchemaSQL for the schema and
// prefix given, without a database; applied to a fresh database by
// hand, as a migration tool would, it makes a store the other commands
// read.
func TestSchema(t *testing.T) {
	t.Parallel()
	r := run(t, nil, "schema", "--schema", "app", "--table-prefix", "rb_")
	requireCode(t, admincli.ExitOK, r)
	require.Contains(t, r.stdout, `"app"."rb_deliveries"`)
	require.NotContains(t, r.stdout, "relaybus_deliveries")

	r = run(t, nil, "schema", "--json")
	requireCode(t, admincli.ExitOK, r)
	out := decode[struct {
		SchemaVersion int `json:"schema_version"`
		SQL           string
	}](t, r)
	require.Equal(t, postgres.SchemaVersion, out.SchemaVersion)

	dsn := dbtest.TestDatabase(t)
	pool, err := pgxpool.New(t.Context(), dsn)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	store, err := postgres.New(pool, nil)
	require.NoError(t, err)
	require.Equal(t, store.SchemaSQL(), out.SQL)

	r = run(t, nil, "schema")
	requireCode(t, admincli.ExitOK, r)
	tx, err := pool.Begin(t.Context())
	require.NoError(t, err)
	_, err = tx.Exec(t.Context(), r.stdout)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(t.Context()))
	r = run(t, nil, "stats", "--dsn", dsn, "--json")
	requireCode(t, admincli.ExitOK, r)
	require.Contains(t, r.stdout, `"pending": 0`)

	r = run(t, nil, "schema", "--schema", "Bad-Name")
	requireCode(t, admincli.ExitUsage, r)
	require.Contains(t, r.stderr, `schema "Bad-Name" must match`)
}

// TestVersion prints relaybus.Version.
func TestVersion(t *testing.T) {
	t.Parallel()
	r := run(t, nil, "version")
	requireCode(t, admincli.ExitOK, r)
	require.Equal(t, "relaybus "+relaybus.Version+"\n", r.stdout)
	r = run(t, nil, "version", "--json")
	requireCode(t, admincli.ExitOK, r)
	require.JSONEq(t, `{"version": "`+relaybus.Version+`"}`, r.stdout)
}

// TestDatabaseErrors: a database without the relaybus tables says where
// they come from; a server that does not answer fails with exit status 1
// and no password in the message.
func TestDatabaseErrors(t *testing.T) {
	t.Parallel()
	empty := dbtest.TestDatabase(t)
	for _, args := range [][]string{{"stats"}, {"dead", "list"}, {"dead", "show", "1"}, {"requeue", "--all", "--yes"}, {"purge", "--dead", "1d", "--yes"}} {
		r := run(t, nil, append(args, "--dsn", empty)...)
		requireCode(t, admincli.ExitFailure, r)
		require.Contains(t, r.stderr, "no relaybus tables of this version in schema \"public\" with prefix \"relaybus_\"", "%q", args)
		require.Contains(t, r.stderr, "relaybus schema prints the SQL")
	}
	f := setup(t)
	r := run(t, nil, "stats", f.dsnFlag(), "--schema", "elsewhere")
	requireCode(t, admincli.ExitFailure, r)
	require.Contains(t, r.stderr, `no relaybus tables of this version in schema "elsewhere"`)

	r = run(t, nil, "stats", "--dsn", "postgres://admin:s3cret@127.0.0.1:1/app?connect_timeout=5", "--timeout", "10s")
	requireCode(t, admincli.ExitFailure, r)
	require.Contains(t, r.stderr, "relaybus stats: cannot connect to 127.0.0.1:1/app")
	require.NotContains(t, r.stderr, "s3cret")
}
