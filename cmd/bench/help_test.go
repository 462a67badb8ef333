package main

import (
	"flag"
	"maps"
	"slices"
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
		{[]string{"compare", "--help"}, "compare", "usage: bench compare --base REF"},
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

// TestEveryCommandHasItsOwnHelp: NAME --help, NAME -h and help NAME print
// NAME's own usage (its usage line first), never the overview of every
// command that bench --help prints (compare --help did, issue 30). The
// table is the command map itself, so a new command is covered.
func TestEveryCommandHasItsOwnHelp(t *testing.T) {
	names := slices.Sorted(maps.Keys(commands))
	if len(names) < 8 {
		t.Fatalf("commands %v: fewer than the eight there are", names)
	}
	for _, name := range names {
		for _, args := range [][]string{{name, "--help"}, {name, "-h"}, {"help", name}} {
			t.Run(strings.Join(args, " "), func(t *testing.T) {
				out, err := runCLI(t, args...)
				if err != nil {
					t.Fatalf("%v", err)
				}
				if want := "usage: bench " + name; !strings.HasPrefix(out, want) {
					t.Errorf("help does not start with %q:\n%s", want, out)
				}
				if first, _, _ := strings.Cut(usage, "\n"); strings.HasPrefix(out, first+"\n") {
					t.Errorf("help is the overview of every command:\n%s", out)
				}
				for _, other := range names {
					if other != name && strings.Contains(out, "  bench "+other+" ") {
						t.Errorf("help lists the command %s: the overview, not %s's own:\n%s", other, name, out)
					}
				}
			})
		}
	}
	if _, err := runCLI(t, "help", "nosuchcommand"); err == nil || !strings.Contains(err.Error(), "no such command") {
		t.Errorf("help nosuchcommand: %v", err)
	}
}
