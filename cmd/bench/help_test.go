package main

import (
	"flag"
	"strings"
	"testing"
)

// TestHelpListsEveryFlag: every command answers --help on stdout, without
// an error, with every flag of its flag set and that flag's default.
func TestHelpListsEveryFlag(t *testing.T) {
	for _, tc := range []struct {
		args      []string
		cmd, want string
	}{
		{[]string{"--help"}, "compare", "bench lifecycle --ref REF"},
		{[]string{"help"}, "compare", "Each command has its own --help"},
		{[]string{"compare", "--help"}, "compare", "bench [compare] --base REF"},
		{[]string{"lifecycle", "--help"}, "lifecycle", "What one delivery leaves behind"},
		{[]string{"report", "--help"}, "report", "usage: bench report [--write] RUN.json"},
		{[]string{"gate", "-h"}, "gate", "usage: bench gate"},
		{[]string{"validate", "--help"}, "validate", "usage: bench validate"},
		{[]string{"selftest", "--help"}, "selftest", "usage: bench selftest"},
		{[]string{"version", "--help"}, "version", "usage: bench version"},
		{[]string{"worker", "--help"}, "worker", "worker protocol 1 entry point"},
	} {
		fs := commands[tc.cmd]().flagSet(tc.cmd)
		out, err := runCLI(t, tc.args...)
		if err != nil {
			t.Errorf("%q: %v", tc.args, err)
			continue
		}
		if !strings.Contains(out, tc.want) {
			t.Errorf("%q: help lacks %q:\n%s", tc.args, tc.want, out)
		}
		n := 0
		fs.VisitAll(func(f *flag.Flag) {
			n++
			if !strings.Contains(out, "  --"+f.Name+" ") && !strings.Contains(out, "  --"+f.Name+"\n") {
				t.Errorf("%q: help lacks --%s", tc.args, f.Name)
				return
			}
			// The flag's line, then its usage line with the default.
			_, rest, _ := strings.Cut(out, "  --"+f.Name)
			_, usageLine, _ := strings.Cut(rest, "\n")
			usageLine, _, _ = strings.Cut(usageLine, "\n")
			if !strings.Contains(usageLine, "(default: ") {
				t.Errorf("%q: --%s has no default: %q", tc.args, f.Name, usageLine)
			}
		})
		if n == 0 && !strings.Contains(out, "no flags") {
			t.Errorf("%q: a command without flags should say so:\n%s", tc.args, out)
		}
	}
	// The compare flags carry their defaults as given.
	out, _ := runCLI(t, "--help")
	for _, want := range []string{`--stores string`, `(default: "postgres")`, `--drain-timeout duration`, `(default: 3m0s)`, "--profile", "--rounds int"} {
		if !strings.Contains(out, want) {
			t.Errorf("--help lacks %q", want)
		}
	}
}
