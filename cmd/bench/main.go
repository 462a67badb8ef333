// Command bench compares two git revisions of relaybus: it builds the
// worker of each, runs every scenario cell as ABBA-interleaved windows on
// fresh databases, validates every run and reports the differences.
//
//	go run ./cmd/bench --base v0.1.0 --candidate HEAD --quick
//	go run ./cmd/bench --base main --candidate WORKTREE --smoke --gate deliveries_per_s:5
//	go run ./cmd/bench --base river --candidate HEAD --quick --scenarios 1,2,5
//	go run ./cmd/bench --base ceiling --candidate HEAD --quick --scenarios 2,3
//	bench report results/<run>/run.json
//	bench gate --rules deliveries_per_s:5 results/<run>/run.json
//	bench validate results/<run>/records   (with --keep-records)
//	bench selftest results/<run>/run.json  (an A/A run's error rates)
//	bench worker   (protocol 1 entry point; the harness starts it)
//	bench version
//
// main only dispatches: each subcommand (commands) parses its flags and
// prints; the work is done by the bench packages (the comparison by
// bench/comparison). run is a function of the arguments and output
// streams, so the whole CLI is testable.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/berkcansavur/relaybus/bench/proc"
	"github.com/berkcansavur/relaybus/bench/worker"
	_ "github.com/berkcansavur/relaybus/internal/dbenv/container" // the testcontainers provider (--db-provider)
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "worker" && !isHelp(os.Args[2:]) {
		// Protocol 1 entry point: it must never change. The worker handles
		// SIGTERM through ctx.
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
		code := worker.Main(ctx, os.Stdin, os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	proc.KillAll()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		var ee exitError
		if errors.As(err, &ee) {
			os.Exit(int(ee))
		}
		os.Exit(1)
	}
}

// exitError carries an exit status for failures that are not usage
// errors (2 = usage).
type exitError int

func (e exitError) Error() string { return "exit " + strconv.Itoa(int(e)) }

const usage = `usage:
  bench [compare] --base REF --candidate REF [--quick|--full|--smoke|--bloat] [flags]
  bench lifecycle --ref REF [--ref REF ...] [flags]  (what one delivery leaves behind)
  bench report RUN.json
  bench gate --rules METRIC[@SCENARIO]:PCT[,...] RUN.json
  bench validate [flags] DIR
  bench selftest RUN.json   (error rates of an A/A run)
  bench version
  bench worker  (started by the harness)

Each command has its own --help (or: bench help COMMAND). REF is a tag, branch, commit, HEAD,
vX.Y.Z (a tag or the commit with the trailer "Release: vX.Y.Z"), or
WORKTREE (the working tree, uncommitted changes included). A side may
also be a peer, built from this tree: river (River, the version
bench/peers/river pins) or river@vX.Y.Z, or ceiling (the lane pattern
in plain SQL, bench/peers/ceiling).

The comparison (bench compare, or bench with no command) builds both refs,
runs every scenario cell as ABBA-interleaved windows on fresh databases,
runs scenario 6 (the upgrade) once when the refs differ, validates every
run and reports the differences.`

// commands are the subcommands by name; each call makes a fresh one (its
// flags bound to new variables).
var commands = map[string]func() *command{
	"compare":   func() *command { return compareCommand(new(compareFlags)) },
	"lifecycle": lifecycleCommand,
	"report":    reportCommand,
	"gate":      gateCommand,
	"validate":  validateCommand,
	"selftest":  selftestCommand,
	"version":   versionCommand,
	"worker":    workerCommand,
}

// run runs the command args name (the comparison without one).
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	name := "compare"
	if len(args) > 0 {
		switch args[0] {
		case "help", "-h", "-help", "--help":
			if len(args) > 1 {
				// bench help NAME is bench NAME --help.
				if mk, ok := commands[args[1]]; ok {
					cmd := mk()
					writeHelp(stdout, cmd.usage, cmd.flagSet(args[1]))
					return nil
				}
				return fmt.Errorf("bench: help %s: no such command (see bench --help)", args[1])
			}
			cmd := compareCommand(new(compareFlags))
			writeHelp(stdout, usage, cmd.flagSet("compare"))
			return nil
		}
		if _, ok := commands[args[0]]; ok {
			name, args = args[0], args[1:]
		}
	}
	return commands[name]().invoke(ctx, name, args, stdout, stderr)
}
