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
	rulesFlag := fs.String("rules", "", "METRIC:PCT[,...]")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("bench: gate: %w", err)
	}
	if *rulesFlag == "" || fs.NArg() != 1 {
		return errors.New("bench: usage: bench gate --rules METRIC:PCT[,...] RUN.json")
	}
	rules, err := compare.ParseGateRules(*rulesFlag)
	if err != nil {
		return err
	}
	run, err := result.Load(fs.Arg(0))
	if err != nil {
		return err
	}
	return verdict(run, compare.Analyze(run, compare.DefaultSettings()), rules, stdout)
}
