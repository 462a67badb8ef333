package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

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
		name := "bench " + fs.Name()
		if fs.Name() == "compare" {
			name = "bench"
		}
		return fmt.Errorf("bench: %s: %w (see %s --help)", fs.Name(), err, name)
	}
	return nil
}

// writeHelp writes a command's usage, then every flag with its type and
// default (flag.PrintDefaults leaves out zero defaults; this does not).
func writeHelp(w io.Writer, usage string, fs *flag.FlagSet) {
	fmt.Fprintln(w, strings.TrimRight(usage, "\n"))
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	if n == 0 {
		fmt.Fprintln(w, "\nno flags")
		return
	}
	fmt.Fprintln(w, "\nflags:")
	fs.VisitAll(func(f *flag.Flag) {
		typ, text := flag.UnquoteUsage(f)
		head := "  --" + f.Name
		if typ != "" {
			head += " " + typ
		}
		def := f.DefValue
		switch {
		case def == "" || def == "[]":
			def = `""`
		case typ == "string":
			def = fmt.Sprintf("%q", def)
		}
		fmt.Fprintf(w, "%s\n      %s (default: %s)\n", head, text, def)
	})
}

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

// emptyFlagSet is the flag set of a command without flags (it still
// answers --help).
func emptyFlagSet(name string) *flag.FlagSet {
	return flag.NewFlagSet(name, flag.ContinueOnError)
}
