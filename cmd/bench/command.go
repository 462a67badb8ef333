package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/berkcansavur/relaybus/internal/flaghelp"
)

// command is one subcommand: what every one of them does before its own
// work (its flag set, --help, the count of its arguments, a progress
// log) is done once, by invoke.
type command struct {
	// usage is the command's help text; its first line is the usage line
	// that an argument error repeats.
	usage string
	// flags binds the command's flags to its own variables (nil: none).
	flags func(fs *flag.FlagSet)
	// nargs is the count of arguments after the flags; -1: the command
	// checks them itself.
	nargs int
	// run does the command's work with its flags parsed.
	run func(ctx context.Context, c *call) error
}

// call is one invocation of a command.
type call struct {
	args           []string // the arguments after the flags
	stdout, stderr io.Writer
}

// logf prints a progress line on stderr.
func (c *call) logf(format string, a ...any) { fmt.Fprintf(c.stderr, format+"\n", a...) }

// flagSet is cmd's flag set, its flags bound.
func (cmd *command) flagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	if cmd.flags != nil {
		cmd.flags(fs)
	}
	return fs
}

// parse parses args into cmd's flags and returns the arguments after
// them; help returns flag.ErrHelp (the usage written to stdout).
func (cmd *command) parse(name string, args []string, stdout io.Writer) ([]string, error) {
	fs := cmd.flagSet(name)
	if err := parseFlags(fs, cmd.usage, args, stdout); err != nil {
		return nil, err
	}
	if cmd.nargs >= 0 && fs.NArg() != cmd.nargs {
		first, _, _ := strings.Cut(cmd.usage, "\n")
		return nil, fmt.Errorf("bench: %s (see %s --help)", first, commandLine(name))
	}
	return fs.Args(), nil
}

// invoke runs cmd as command name with args.
func (cmd *command) invoke(ctx context.Context, name string, args []string, stdout, stderr io.Writer) error {
	rest, err := cmd.parse(name, args, stdout)
	if err != nil {
		return helpOK(err)
	}
	return cmd.run(ctx, &call{args: rest, stdout: stdout, stderr: stderr})
}

// commandLine is how a user types command name.
func commandLine(name string) string {
	if name == "compare" {
		return "bench"
	}
	return "bench " + name
}

// helpOK turns the help "error" into a clean exit.
func helpOK(err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	return err
}

// parseFlags parses args with fs. Help (-h, --help) writes usage and every
// flag of fs, with its default, to stdout and returns flag.ErrHelp, which
// the commands turn into a clean exit; any other problem is an error that
// names the command and where its help is.
func parseFlags(fs *flag.FlagSet, usage string, args []string, stdout io.Writer) error {
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		writeHelp(stdout, usage, fs)
		return flag.ErrHelp
	case err != nil:
		return fmt.Errorf("bench: %s: %w (see %s --help)", fs.Name(), err, commandLine(fs.Name()))
	}
	return nil
}

// writeHelp writes a command's usage, then every flag with its type and
// default (internal/flaghelp).
func writeHelp(w io.Writer, usage string, fs *flag.FlagSet) { flaghelp.Write(w, usage, fs) }

// isHelp reports whether args ask for help and nothing else.
func isHelp(args []string) bool {
	if len(args) != 1 {
		return false
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		return true
	}
	return false
}
