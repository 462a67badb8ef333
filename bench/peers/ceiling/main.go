package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"syscall"

	"github.com/berkcansavur/relaybus/bench/protocol"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "worker" {
		// Protocol 1 entry point, exactly as cmd/bench's: the worker
		// handles SIGTERM through ctx.
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
		code := workerMain(ctx, os.Stdin, os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `usage:
  ceiling worker    protocol 1 worker (started by the relaybus harness)
  ceiling version   this peer's version`

// run is the command line without the worker entry point; it returns the
// exit code.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, usage)
		return 2
	}
	switch args[0] {
	case "version":
		if len(args) > 1 {
			fmt.Fprintln(stderr, "ceiling: version takes no arguments")
			return 2
		}
		fmt.Fprintf(stdout, "%s (relaybus bench peer, worker protocol %d, %s)\n", peerVersion, protocol.Version, runtime.Version())
		return 0
	case "help", "-h", "--help":
		fmt.Fprintln(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "ceiling: unknown command %q\n%s\n", args[0], usage)
	return 2
}
