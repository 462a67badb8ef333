// Package flaghelp writes the --help text of the project's commands
// (cmd/bench, cmd/relaybus): a command's usage, then every flag with its
// type and default.
package flaghelp

import (
	"flag"
	"fmt"
	"io"
	"strings"
)

// Write writes usage, then every flag of fs with its type and default.
// flag.PrintDefaults leaves out zero defaults; this does not. A flag whose
// usage already says what its default means ("(default: the mode's)")
// gets no second default.
func Write(w io.Writer, usage string, fs *flag.FlagSet) {
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
		if strings.Contains(text, "(default: ") {
			fmt.Fprintf(w, "%s\n      %s\n", head, text)
			return
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
