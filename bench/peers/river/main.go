package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
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
  river worker    protocol 1 worker (started by the relaybus harness)
  river version   the River version this binary was built with`

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
			fmt.Fprintln(stderr, "river: version takes no arguments")
			return 2
		}
		fmt.Fprintf(stdout, "%s (relaybus bench peer, worker protocol %d, %s)\n", peerVersion(), protocol.Version, runtime.Version())
		return 0
	case "help", "-h", "--help":
		fmt.Fprintln(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "river: unknown command %q\n%s\n", args[0], usage)
	return 2
}

// riverModule is the module whose version names this peer.
const riverModule = "github.com/riverqueue/river"

// peerVersion is "river " and the River module version this binary was
// built with, read from its build information.
func peerVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "river (unknown version)"
	}
	return "river " + moduleVersion(bi, riverModule)
}

// moduleVersion returns the version of module path in bi ("(unknown
// version)" when it is not a dependency), following a replacement.
func moduleVersion(bi *debug.BuildInfo, path string) string {
	for _, d := range bi.Deps {
		if d.Path != path {
			continue
		}
		if d.Replace != nil && d.Replace.Version != "" {
			return d.Replace.Version
		}
		if d.Version != "" {
			return d.Version
		}
	}
	return "(unknown version)"
}
