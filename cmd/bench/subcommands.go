package main

import (
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/berkcansavur/relaybus/bench/compare"
	"github.com/berkcansavur/relaybus/bench/report"
	"github.com/berkcansavur/relaybus/bench/result"
)

func runReport(args []string, stdout io.Writer) error {
	if len(args) != 1 {
		return errors.New("bench: usage: bench report RUN.json")
	}
	run, err := result.Load(args[0])
	if err != nil {
		return err
	}
	return report.WriteTerminal(stdout, compare.Analyze(run, compare.DefaultSettings()))
}

func runGate(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("gate", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	rulesFlag := fs.String("rules", "", "METRIC[@SCENARIO]:PCT[,...]")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("bench: gate: %w", err)
	}
	if *rulesFlag == "" || fs.NArg() != 1 {
		return errors.New("bench: usage: bench gate --rules METRIC[@SCENARIO]:PCT[,...] RUN.json")
	}
	rules, err := compare.ParseGateRules(*rulesFlag)
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
	if len(args) != 1 {
		return errors.New("bench: usage: bench selftest RUN.json (an A/A run: both sides the same code)")
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
