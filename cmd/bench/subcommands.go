package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/berkcansavur/relaybus/bench/compare"
	"github.com/berkcansavur/relaybus/bench/report"
	"github.com/berkcansavur/relaybus/bench/result"
)

const (
	reportUsage = `usage: bench report [--write] RUN.json

Renders a run.json again as the terminal tables (the statistics are
computed anew from its samples). With --write it also writes the result
set's files again beside RUN.json (report.md, bench.txt, the plots), as
the run that made it would write them with this version of the harness:
for a result set recorded before a fix of the report.`
	gateUsage = `usage: bench gate --rules METRIC[@SCENARIO]:PCT[,...] RUN.json

Exits 1 when a rule's metric is significantly worse in the candidate by
more than PCT percent (Holm's correction over the comparisons the rules
cover), when a rule's metric has no data on a side, or when a candidate run
(or the upgrade, scenario 6) is INVALID.`
	selftestUsage = `usage: bench selftest RUN.json

The error rates of an A/A run (both sides the same code): false verdicts
per comparison, and per metric whether a 0% gate would fail, with and
without Holm's correction.`
	versionUsage = `usage: bench version

Prints the relaybus version, the worker protocol and the Go version.`
	workerUsage = `usage: bench worker  (started by the harness; not for people)

The worker protocol 1 entry point: reads one JSON config on stdin, writes
JSON lines (hello, ready, counters, error, done) on stdout and logs on
stderr, and plays one role (setup, preload, publisher, dispatcher,
inspect). bench/protocol documents the protocol.`
)

// noFlagArgs parses a command without flags: help, or exactly n
// arguments.
func noFlagArgs(name, usage string, args []string, n int, stdout io.Writer) ([]string, error) {
	fs := emptyFlagSet(name)
	if err := parseFlags(fs, usage, args, stdout); err != nil {
		return nil, err
	}
	if fs.NArg() != n {
		first, _, _ := strings.Cut(usage, "\n")
		return nil, fmt.Errorf("bench: %s (see bench %s --help)", first, name)
	}
	return fs.Args(), nil
}

// helpOK turns the help "error" into a clean exit.
func helpOK(err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	return err
}

func runReport(args []string, stdout io.Writer) error {
	var write bool
	fs := reportFlagSet(&write)
	if err := parseFlags(fs, reportUsage, args, stdout); err != nil {
		return helpOK(err)
	}
	if fs.NArg() != 1 {
		return errors.New("bench: usage: bench report [--write] RUN.json (see bench report --help)")
	}
	run, err := result.Load(fs.Arg(0))
	if err != nil {
		return err
	}
	analysis := compare.Analyze(run, compare.DefaultSettings())
	if write {
		if err := report.WriteFiles(filepath.Dir(fs.Arg(0)), analysis); err != nil {
			return err
		}
	}
	return report.WriteTerminal(stdout, analysis)
}

func runGate(args []string, stdout io.Writer) error {
	var rulesFlag string
	fs := gateFlagSet(&rulesFlag)
	if err := parseFlags(fs, gateUsage, args, stdout); err != nil {
		return helpOK(err)
	}
	if rulesFlag == "" || fs.NArg() != 1 {
		return errors.New("bench: usage: bench gate --rules METRIC[@SCENARIO]:PCT[,...] RUN.json (see bench gate --help)")
	}
	rules, err := compare.ParseGateRules(rulesFlag)
	if err != nil {
		return err
	}
	run, err := result.Load(fs.Arg(0))
	if err != nil {
		return err
	}
	return verdict(compare.Analyze(run, compare.DefaultSettings()), rules, stdout)
}

// runSelfTest reports an A/A run's error rates: the false verdicts per
// comparison and the gates that would fail, per metric, with and without
// Holm's correction.
func runSelfTest(args []string, stdout io.Writer) error {
	args, err := noFlagArgs("selftest", selftestUsage, args, 1, stdout)
	if err != nil {
		return helpOK(err)
	}
	run, err := result.Load(args[0])
	if err != nil {
		return err
	}
	a := compare.Analyze(run, compare.DefaultSettings())
	st := compare.RunSelfTest(a)
	if run.Base.SHA != run.Candidate.SHA || run.Base.Dirty || run.Candidate.Dirty {
		fmt.Fprintf(stdout, "warning: the sides are %s@%s and %s@%s: an A/A run compares one commit with itself\n",
			run.Base.Ref, run.Base.SHA, run.Candidate.Ref, run.Candidate.SHA)
	}
	fmt.Fprintf(stdout, "A/A self-test of %s (%d invalid windows left out)\n", args[0], len(a.Invalid))
	fmt.Fprintf(stdout, "per comparison: %d of %d comparisons with a verdict are false (better or worse): %s (alpha %.2g)\n",
		st.False, st.Comparisons, pct(st.False, st.Comparisons), a.Settings.Alpha)
	fmt.Fprintf(stdout, "per gate (one per metric, every cell, limit 0%%): %d of %d fail with Holm's correction (%s), %d without it (%s)\n",
		st.FailedHolm, st.Gates, pct(st.FailedHolm, st.Gates), st.FailedRaw, pct(st.FailedRaw, st.Gates))
	for _, m := range st.FailedMetrics {
		fmt.Fprintf(stdout, "  false gate failure: %s\n", m)
	}
	return nil
}

func pct(n, of int) string {
	if of == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(n)/float64(of))
}

// gateFlagSet is the gate command's flags, bound to rules.
func reportFlagSet(write *bool) *flag.FlagSet {
	fs := flag.NewFlagSet("report", flag.ContinueOnError)
	fs.BoolVar(write, "write", false, "write report.md, bench.txt and the plots again beside RUN.json")
	return fs
}

func gateFlagSet(rules *string) *flag.FlagSet {
	fs := flag.NewFlagSet("gate", flag.ContinueOnError)
	fs.StringVar(rules, "rules", "", "the rules, METRIC[@SCENARIO]:PCT[,...] (required)")
	return fs
}
