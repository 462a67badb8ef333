package admincli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/berkcansavur/relaybus/internal/flaghelp"
)

// The exit statuses of Main (see the package documentation).
const (
	ExitOK       = 0
	ExitFailure  = 1
	ExitUsage    = 2
	ExitRefused  = 3
	ExitNotFound = 4
	// ExitUnhealthy: relaybus health found a check past its threshold.
	ExitUnhealthy = 5
)

// EnvDSN is the environment variable the database commands read their
// DSN from when --dsn is not given.
const EnvDSN = "RELAYBUS_DATABASE_URL"

// Env is what the CLI gets from its process: its streams, its
// environment, and whether a person is at stdin (the confirmation
// prompt is only asked then).
type Env struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Getenv reads an environment variable (os.Getenv); nil reads none.
	Getenv func(string) string
	// Interactive: stdin is a terminal.
	Interactive bool
}

func (e *Env) getenv(name string) string {
	if e.Getenv == nil {
		return ""
	}
	return e.Getenv(name)
}

// exitError is an error with the exit status it ends the command with.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func withCode(code int, format string, args ...any) error {
	return &exitError{code: code, err: fmt.Errorf(format, args...)}
}

// usagef is a usage error: a bad command, flag or argument.
func usagef(format string, args ...any) error { return withCode(ExitUsage, format, args...) }

// ExitCode is the exit status of err, Run's result: ExitOK for nil,
// ExitFailure for an error that carries no status of its own.
func ExitCode(err error) int {
	if err == nil {
		return ExitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return ExitFailure
}

// Main runs the command args (the program's arguments, without its name),
// prints an error on env.Stderr, and returns the exit status.
func Main(ctx context.Context, args []string, env Env) int {
	err := Run(ctx, args, env)
	if err != nil {
		fmt.Fprintln(env.Stderr, err)
	}
	return ExitCode(err)
}

const overview = `usage: relaybus COMMAND [flags] [arguments]

Administer a relaybus store: PostgreSQL only for now (MongoDB stores are
not wired into this command yet). Every command goes through the
library's API (relaybus.Bus, relaybus/postgres); none sends SQL of its own.

commands:
  stats                          deliveries per status and handler, and how long the oldest due one has waited
  dead list [flags]              dead letters with their last error, a page at a time
  dead show [flags] ID           one dead letter in full: payload, headers, last error
  requeue ID...                  make the dead letters named pending again, with a fresh attempt budget
  requeue --all | --handler H [--key K] [--event E]
                                 every dead letter, or those of a filter (asks first)
  purge --dead DUR [--completed DUR]
                                 delete finished deliveries past their retention (asks first)
  health [flags]                 the store's upkeep (dead rows, vacuum, HOT lane updates, the xmin
                                 horizon's holder) against thresholds; exits 5 on a warning
  pause [--reason R] HANDLER     stop every dispatcher claiming a handler's deliveries (they stay pending)
  resume HANDLER                 claim them again
  paused                         the paused handlers, with their reason and time
  schema                         print the schema SQL, for a migration tool (needs no database)
  version                        print the relaybus version
  help [COMMAND]                 a command's help (also: relaybus COMMAND --help)

The database commands take --dsn DSN (or $` + EnvDSN + `), --schema and
--table-prefix (the store's, default public and relaybus_), --json (machine-
readable output on stdout; errors stay text, on stderr, with the exit
status) and --timeout (each database call).

Destructive commands (a bulk requeue, purge) go on only with --yes or when
"yes" is typed at the prompt; otherwise they change nothing and exit 3.

exit status: 0 done, 1 failed (database or store error), 2 usage error,
3 confirmation refused (nothing changed), 4 a delivery named was not found
or is not dead (resume: the handler is not paused), 5 relaybus health warned.`

// commands are the commands by name; each call makes a fresh one (its
// flags bound to new variables).
var commands = map[string]func() *command{
	"stats":     statsCommand,
	"health":    healthCommand,
	"pause":     pauseCommand,
	"resume":    resumeCommand,
	"paused":    pausedCommand,
	"dead list": deadListCommand,
	"dead show": deadShowCommand,
	"requeue":   requeueCommand,
	"purge":     purgeCommand,
	"schema":    schemaCommand,
	"version":   versionCommand,
}

// groups are the commands whose name has two words: the first word alone
// is not a command, and says which follow it.
var groups = map[string]string{
	"dead": `usage: relaybus dead list [flags]    dead letters with their last error, a page at a time
       relaybus dead show [flags] ID  one dead letter in full`,
}

// command is one command: what every one does before its own work (its
// flag set, --help, its arguments) is done once, by invoke.
type command struct {
	// usage is the command's help text; its first line is the usage
	// line an argument error repeats.
	usage string
	// flags binds the command's own flags (nil: none).
	flags func(fs *flag.FlagSet)
	// db: the command opens the store, and takes the connection flags.
	db bool
	// minArgs and maxArgs bound the arguments after the flags (maxArgs
	// -1: no bound).
	minArgs, maxArgs int
	// run does the command's work.
	run func(ctx context.Context, c *call) error
}

// call is one invocation of a command.
type call struct {
	name string
	args []string
	env  *Env
	conn connFlags
}

func (c *call) stdout() io.Writer { return c.env.Stdout }

// flagSet is cmd's flag set, its flags (and the connection flags of a
// database command) bound, c's connection flags among them.
func (cmd *command) flagSet(name string, c *call) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	if cmd.flags != nil {
		cmd.flags(fs)
	}
	if cmd.db {
		c.conn.bind(fs)
	}
	return fs
}

// Run runs the command args (without the program's name). Its error
// carries the exit status (ExitCode).
func Run(ctx context.Context, args []string, env Env) error {
	if len(args) == 0 {
		fmt.Fprintln(env.Stderr, overview)
		return usagef("relaybus: no command given (see relaybus --help)")
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		return help(args[1:], &env)
	}
	name, rest, err := commandName(args)
	if errors.Is(err, errGroupHelp) {
		fmt.Fprintln(env.Stdout, groups[args[0]])
		return nil
	}
	if err != nil {
		return err
	}
	return commands[name]().invoke(ctx, name, rest, &env)
}

// errGroupHelp: the arguments ask for the help of a group (relaybus dead
// --help).
var errGroupHelp = errors.New("relaybus: help of a group")

// isHelp reports whether arg asks for help.
func isHelp(arg string) bool {
	switch arg {
	case "-h", "-help", "--help", "help":
		return true
	}
	return false
}

// commandName finds the command args start with, and the arguments after
// its name.
func commandName(args []string) (string, []string, error) {
	first := args[0]
	if _, ok := commands[first]; ok {
		return first, args[1:], nil
	}
	if text, ok := groups[first]; ok {
		if len(args) == 2 && isHelp(args[1]) {
			return "", nil, errGroupHelp
		}
		if len(args) < 2 || strings.HasPrefix(args[1], "-") {
			return "", nil, usagef("relaybus: %s: which one?\n%s", first, text)
		}
		name := first + " " + args[1]
		if _, ok := commands[name]; !ok {
			return "", nil, usagef("relaybus: %s: no such command\n%s", name, text)
		}
		return name, args[2:], nil
	}
	return "", nil, usagef("relaybus: %q: no such command (commands: %s; see relaybus --help)", first, strings.Join(commandNames(), ", "))
}

func commandNames() []string {
	var names []string
	for name := range commands {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// help prints the overview, or the help of the command named.
func help(args []string, env *Env) error {
	if len(args) == 0 {
		fmt.Fprintln(env.Stdout, overview)
		return nil
	}
	if text, ok := groups[args[0]]; ok && len(args) == 1 {
		fmt.Fprintln(env.Stdout, text)
		return nil
	}
	name, rest, err := commandName(args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return usagef("relaybus: help %s: one command at a time", strings.Join(args, " "))
	}
	cmd := commands[name]()
	writeHelp(env.Stdout, cmd.usage, cmd.flagSet(name, &call{}))
	return nil
}

// invoke runs cmd as the command name with args.
func (cmd *command) invoke(ctx context.Context, name string, args []string, env *Env) error {
	c := &call{name: name, env: env}
	fs := cmd.flagSet(name, c)
	rest, err := parseInterspersed(fs, args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		writeHelp(env.Stdout, cmd.usage, fs)
		return nil
	case err != nil:
		return usagef("relaybus %s: %v (see relaybus %s --help)", name, err, name)
	}
	if len(rest) < cmd.minArgs || (cmd.maxArgs >= 0 && len(rest) > cmd.maxArgs) {
		first, _, _ := strings.Cut(cmd.usage, "\n")
		return usagef("relaybus %s: %d %s given; %s (see relaybus %s --help)", name, len(rest), plural(len(rest), "argument", "arguments"), first, name)
	}
	c.args = rest
	return cmd.run(ctx, c)
}

// parseInterspersed parses args with fs, flags before and after the
// arguments alike (relaybus requeue 12 --yes), and returns the
// arguments; after "--" everything is an argument.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var rest []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		left := fs.Args()
		if len(left) == 0 {
			return rest, nil
		}
		if used := len(args) - len(left); used > 0 && args[used-1] == "--" {
			return append(rest, left...), nil
		}
		rest = append(rest, left[0])
		args = left[1:]
	}
}

// writeHelp writes a command's usage, then every flag with its type and
// default (internal/flaghelp).
func writeHelp(w io.Writer, usage string, fs *flag.FlagSet) { flaghelp.Write(w, usage, fs) }

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
