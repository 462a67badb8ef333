package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"path/filepath"
	"runtime"

	"github.com/berkcansavur/relaybus/bench/compare"
	"github.com/berkcansavur/relaybus/bench/protocol"
	"github.com/berkcansavur/relaybus/bench/report"
	"github.com/berkcansavur/relaybus/bench/result"
	"github.com/berkcansavur/relaybus/relaybus"
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

func reportCommand() *command {
	var write bool
	return &command{usage: reportUsage, nargs: 1,
		flags: func(fs *flag.FlagSet) {
			fs.BoolVar(&write, "write", false, "write report.md, bench.txt and the plots again beside RUN.json")
		},
		run: func(_ context.Context, c *call) error {
			a, err := analyze(c.args[0])
			if err != nil {
				return err
			}
			if write {
				if err := report.WriteFiles(filepath.Dir(c.args[0]), a); err != nil {
					return err
				}
			}
			return report.WriteTerminal(c.stdout, a)
		}}
}

func gateCommand() *command {
	var rules string
	return &command{usage: gateUsage, nargs: 1,
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&rules, "rules", "", "the rules, METRIC[@SCENARIO]:PCT[,...] (required)")
		},
		run: func(_ context.Context, c *call) error {
			if rules == "" {
				return errors.New("bench: usage: bench gate --rules METRIC[@SCENARIO]:PCT[,...] RUN.json (see bench gate --help)")
			}
			parsed, err := compare.ParseGateRules(rules)
			if err != nil {
				return err
			}
			a, err := analyze(c.args[0])
			if err != nil {
				return err
			}
			return verdict(a, parsed, c.stdout)
		}}
}

// selftestCommand reports an A/A run's error rates: the false verdicts
// per comparison and the gates that would fail, per metric, with and
// without Holm's correction.
func selftestCommand() *command {
	return &command{usage: selftestUsage, nargs: 1, run: func(_ context.Context, c *call) error {
		a, err := analyze(c.args[0])
		if err != nil {
			return err
		}
		run, st := a.Run, compare.RunSelfTest(a)
		if run.Base.SHA != run.Candidate.SHA || run.Base.Dirty || run.Candidate.Dirty {
			fmt.Fprintf(c.stdout, "warning: the sides are %s@%s and %s@%s: an A/A run compares one commit with itself\n",
				run.Base.Ref, run.Base.SHA, run.Candidate.Ref, run.Candidate.SHA)
		}
		fmt.Fprintf(c.stdout, "A/A self-test of %s (%d invalid windows left out)\n", c.args[0], len(a.Invalid))
		fmt.Fprintf(c.stdout, "per comparison: %d of %d comparisons with a verdict are false (better or worse): %s (alpha %.2g)\n",
			st.False, st.Comparisons, pct(st.False, st.Comparisons), a.Settings.Alpha)
		fmt.Fprintf(c.stdout, "per gate (one per metric, every cell, limit 0%%): %d of %d fail with Holm's correction (%s), %d without it (%s)\n",
			st.FailedHolm, st.Gates, pct(st.FailedHolm, st.Gates), st.FailedRaw, pct(st.FailedRaw, st.Gates))
		for _, m := range st.FailedMetrics {
			fmt.Fprintf(c.stdout, "  false gate failure: %s\n", m)
		}
		return nil
	}}
}

func versionCommand() *command {
	return &command{usage: versionUsage, nargs: 0, run: func(_ context.Context, c *call) error {
		fmt.Fprintf(c.stdout, "relaybus %s (worker protocol %d, %s)\n", relaybus.Version, protocol.Version, runtime.Version())
		return nil
	}}
}

// workerCommand answers --help; main runs the worker itself, as the
// binary's first argument.
func workerCommand() *command {
	return &command{usage: workerUsage, nargs: 0, run: func(context.Context, *call) error {
		return errors.New("bench: worker is the protocol entry point; run it as the first argument of the binary")
	}}
}

// analyze loads a run.json and analyses it with the default settings.
func analyze(path string) (*compare.Analysis, error) {
	run, err := result.Load(path)
	if err != nil {
		return nil, err
	}
	return compare.Analyze(run, compare.DefaultSettings()), nil
}

func pct(n, of int) string {
	if of == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(n)/float64(of))
}
