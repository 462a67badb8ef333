package admincli_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/berkcansavur/relaybus/internal/admincli"
)

// commandArgs are the commands as typed: every one is covered by the
// help tests, so a command added to the table must be added here (the
// overview test checks the count).
var commandArgs = [][]string{
	{"stats"}, {"dead", "list"}, {"dead", "show"}, {"requeue"}, {"purge"}, {"schema"}, {"version"},
}

// TestHelp: every command's --help, -h and help COMMAND print its own
// usage on stdout, exit 0, and list every flag with its default; the
// overview lists every command and the exit statuses.
func TestHelp(t *testing.T) {
	t.Parallel()
	for _, cmd := range commandArgs {
		usage := "usage: relaybus " + strings.Join(cmd, " ")
		var outs []string
		for _, args := range [][]string{append(cmd, "--help"), append(cmd, "-h"), append([]string{"help"}, cmd...)} {
			r := run(t, nil, args...)
			requireCode(t, admincli.ExitOK, r)
			require.True(t, strings.HasPrefix(r.stdout, usage), "%q:\n%s", args, r.stdout)
			require.Empty(t, r.stderr)
			outs = append(outs, r.stdout)
		}
		require.Equal(t, outs[0], outs[1])
		require.Equal(t, outs[0], outs[2])
		out := outs[0]
		_, flags, ok := strings.Cut(out, "\nflags:\n")
		require.True(t, ok, "%v: no flags section:\n%s", cmd, out)
		for _, line := range strings.Split(strings.TrimRight(flags, "\n"), "\n") {
			if !strings.HasPrefix(line, "  --") {
				require.Contains(t, line, "(default: ", "%v: a flag without its default: %q", cmd, line)
			}
		}
		if cmd[0] != "schema" && cmd[0] != "version" {
			for _, name := range []string{"dsn", "schema", "table-prefix", "json", "timeout"} {
				require.Regexp(t, `(?m)^  --`+name+`( |$)`, out, "%v", cmd)
			}
		}
	}
	for _, args := range [][]string{{"--help"}, {"help"}, {"-h"}} {
		r := run(t, nil, args...)
		requireCode(t, admincli.ExitOK, r)
		require.True(t, strings.HasPrefix(r.stdout, "usage: relaybus COMMAND"))
		for _, cmd := range commandArgs {
			require.Contains(t, r.stdout, "\n  "+strings.Join(cmd, " "), "the overview lists %v", cmd)
		}
		require.Contains(t, r.stdout, "PostgreSQL only for now")
		require.Contains(t, r.stdout, "exit status: 0 done, 1 failed (database or store error), 2 usage error,\n3 confirmation refused (nothing changed), 4 a delivery named was not found")
	}
	for _, args := range [][]string{{"dead", "--help"}, {"dead", "help"}, {"help", "dead"}} {
		r := run(t, nil, args...)
		requireCode(t, admincli.ExitOK, r)
		require.Contains(t, r.stdout, "relaybus dead list [flags]")
		require.Contains(t, r.stdout, "relaybus dead show [flags] ID")
	}
	// A --help among other arguments is still help, and runs nothing.
	r := run(t, nil, "requeue", "12", "--help")
	requireCode(t, admincli.ExitOK, r)
	require.True(t, strings.HasPrefix(r.stdout, "usage: relaybus requeue"))
}

// TestUsageErrors: bad commands, flags and arguments exit 2 with a
// message that says what is wrong, and touch no database (none is
// given, or the DSN names none that answers).
func TestUsageErrors(t *testing.T) {
	t.Parallel()
	dsn := "--dsn=postgres://nobody@127.0.0.1:1/none"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "relaybus: no command given"},
		{[]string{"bogus"}, `relaybus: "bogus": no such command`},
		{[]string{"dead"}, "relaybus: dead: which one?"},
		{[]string{"dead", "bury"}, "relaybus: dead bury: no such command"},
		{[]string{"stats", "--bogus"}, "relaybus stats: flag provided but not defined: -bogus (see relaybus stats --help)"},
		{[]string{"stats", "extra", dsn}, "relaybus stats: 1 argument given; usage: relaybus stats [flags]"},
		{[]string{"stats"}, "relaybus stats: no database: give --dsn or set RELAYBUS_DATABASE_URL"},
		{[]string{"stats", "--dsn", "mongodb://localhost:27017/?replicaSet=rs0"}, "this command administers PostgreSQL stores only for now"},
		{[]string{"stats", "--dsn", "postgres://u:pw@host:notaport/db"}, "relaybus stats: bad DSN"},
		{[]string{"stats", dsn, "--schema", "Public"}, `relaybus stats: relaybus/postgres: schema "Public" must match`},
		{[]string{"stats", dsn, "--timeout", "0s"}, "relaybus stats: --timeout 0s out of range"},
		{[]string{"stats", dsn, "--timeout", "soon"}, `invalid value "soon" for flag -timeout`},
		{[]string{"dead", "list", dsn, "--limit", "0"}, "relaybus dead list: --limit 0 out of range [1, 1000]"},
		{[]string{"dead", "list", dsn, "--limit", "1001"}, "--limit 1001 out of range"},
		{[]string{"dead", "show", dsn}, "relaybus dead show: 0 arguments given; usage: relaybus dead show [flags] ID"},
		{[]string{"dead", "show", "1", "2", dsn}, "2 arguments given"},
		{[]string{"requeue", dsn}, "relaybus requeue: which dead letters? give delivery IDs, --all, or a filter"},
		{[]string{"requeue", "12", "--all", dsn}, "give delivery IDs or a selection (--all, --handler, --key, --event), not both"},
		{[]string{"requeue", "12", "--handler", "mailer", dsn}, "not both"},
		{[]string{"requeue", "--all", "--handler", "mailer", dsn}, "--all with a filter"},
		{[]string{"requeue", " ", dsn}, "an empty delivery ID"},
		{[]string{"purge", dsn}, "relaybus purge: nothing to purge: give --dead, --completed or both"},
		{[]string{"purge", "--dead", "0", dsn}, "nothing to purge"},
		{[]string{"purge", "--dead", "thirty days", dsn}, `--dead "thirty days": not a duration: give whole days (30d) or a Go duration (720h, 90m)`},
		{[]string{"purge", "--dead", "1.5d", dsn}, `--dead "1.5d": days must be a whole number`},
		{[]string{"purge", "--completed", "-1h", dsn}, `--completed "-1h": a retention cannot be negative`},
		{[]string{"purge", "--dead", "99999d", dsn}, "days must be a whole number in [0, 36500]"},
		{[]string{"schema", "--dsn", "x"}, "relaybus schema: flag provided but not defined: -dsn"},
		{[]string{"schema", "--table-prefix", "Bad"}, `table prefix "Bad" must match`},
		{[]string{"version", "extra"}, "relaybus version: 1 argument given"},
		{[]string{"help", "bogus"}, `relaybus: "bogus": no such command`},
		{[]string{"help", "stats", "extra"}, "relaybus: help stats extra: one command at a time"},
	} {
		r := run(t, nil, tc.args...)
		requireCode(t, admincli.ExitUsage, r)
		require.Contains(t, r.stderr, tc.want, "%q", tc.args)
		if tc.args != nil {
			require.Empty(t, r.stdout, "%q", tc.args)
		}
	}
}

// TestFlagsAfterArguments: flags may follow the arguments, and "--" ends
// the flags (an ID that starts with a dash).
func TestFlagsAfterArguments(t *testing.T) {
	t.Parallel()
	f := setup(t)
	r := run(t, nil, "requeue", f.dead[0], f.dsnFlag(), "--json")
	requireCode(t, admincli.ExitOK, r)
	require.Contains(t, r.stdout, `"requeued": [`)
	r = run(t, nil, "requeue", f.dsnFlag(), "--", "-5")
	requireCode(t, admincli.ExitNotFound, r)
	require.Contains(t, r.stdout, "not requeued: -5: not found")
}
