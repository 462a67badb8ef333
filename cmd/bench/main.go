// Command bench compares two git revisions of relaybus: it builds the
// worker of each, runs every scenario cell as ABBA-interleaved windows on
// fresh databases, validates every run and reports the differences.
//
//	go run ./cmd/bench --base v0.1.0 --candidate HEAD --quick
//	go run ./cmd/bench --base main --candidate WORKTREE --smoke --gate deliveries_per_s:5
//	go run ./cmd/bench --base river --candidate HEAD --quick --scenarios 1,2,5
//	bench report results/<run>/run.json
//	bench gate --rules deliveries_per_s:5 results/<run>/run.json
//	bench validate results/<run>/records   (with --keep-records)
//	bench selftest results/<run>/run.json  (an A/A run's error rates)
//	bench worker   (protocol 1 entry point; the harness starts it)
//	bench version
//
// main only dispatches: each subcommand is a function of its arguments
// and output streams (run), so the whole CLI is testable.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"syscall"

	"github.com/berkcansavur/relaybus/bench/proc"
	"github.com/berkcansavur/relaybus/bench/protocol"
	"github.com/berkcansavur/relaybus/bench/worker"
	"github.com/berkcansavur/relaybus/relaybus"
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
  bench [compare] --base REF --candidate REF [--quick|--full|--smoke] [flags]
  bench lifecycle --ref REF [--ref REF ...] [flags]  (what one delivery leaves behind)
  bench report RUN.json
  bench gate --rules METRIC[@SCENARIO]:PCT[,...] RUN.json
  bench validate [flags] DIR
  bench selftest RUN.json   (error rates of an A/A run)
  bench version
  bench worker  (started by the harness)

Each command has its own --help. REF is a tag, branch, commit, HEAD,
vX.Y.Z (a tag or the commit with the trailer "Release: vX.Y.Z"), or
WORKTREE (the working tree, uncommitted changes included). A side may
also be a peer: river (River, the version bench/peers/river pins) or
river@vX.Y.Z, built from this tree.

The comparison (bench compare, or bench with no command) builds both refs,
runs every scenario cell as ABBA-interleaved windows on fresh databases,
runs scenario 6 (the upgrade) once when the refs differ, validates every
run and reports the differences.`

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 {
		switch args[0] {
		case "worker":
			if _, err := noFlagArgs("worker", workerUsage, args[1:], 0, stdout); err != nil {
				return helpOK(err)
			}
			return errors.New("bench: worker is the protocol entry point; run it as the first argument of the binary")
		case "version":
			if _, err := noFlagArgs("version", versionUsage, args[1:], 0, stdout); err != nil {
				return helpOK(err)
			}
			fmt.Fprintf(stdout, "relaybus %s (worker protocol %d, %s)\n", relaybus.Version, protocol.Version, runtime.Version())
			return nil
		case "compare":
			return runCompare(ctx, args[1:], stdout, stderr)
		case "lifecycle":
			return runLifecycle(ctx, args[1:], stdout, stderr)
		case "report":
			return runReport(args[1:], stdout)
		case "gate":
			return runGate(args[1:], stdout)
		case "validate":
			return runValidate(args[1:], stdout, stderr)
		case "selftest":
			return runSelfTest(args[1:], stdout)
		case "help", "-h", "-help", "--help":
			var o options
			writeHelp(stdout, usage, compareFlagSet(&o, &compareVars{}))
			return nil
		}
	}
	return runCompare(ctx, args, stdout, stderr)
}
