package workerkit

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

// WorkerMain is a worker's protocol 1 entry point: it plays one role and
// returns the process exit code (0 done or stopped by ctx, 1 failed, 2 a
// bad config).
type WorkerMain func(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer) int

// Command is the command line of a peer's binary (bench/peers/<name>):
//
//	<name> worker    protocol 1 worker (started by the relaybus harness)
//	<name> version   the version its hello says, with the protocol and Go's
type Command struct {
	// Name is the binary's name and the prefix of its error texts.
	Name string
	// VersionHelp says in the usage what `version` prints.
	VersionHelp string
	// Version is the hello's version.
	Version func() string
	// Worker is the protocol 1 entry point.
	Worker WorkerMain
}

// Main runs the command on os.Args and exits with its code. The worker
// handles SIGTERM (and an interrupt) through its ctx, exactly as
// cmd/bench's worker does.
func (c *Command) Main() {
	if len(os.Args) > 1 && os.Args[1] == "worker" {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
		code := c.Worker(ctx, os.Stdin, os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	os.Exit(c.Run(os.Args[1:], os.Stdout, os.Stderr))
}

// Run is the command line without the worker entry point; it returns the
// exit code.
func (c *Command) Run(args []string, stdout, stderr io.Writer) int {
	usage := fmt.Sprintf("usage:\n  %[1]s worker    protocol 1 worker (started by the relaybus harness)\n  %[1]s version   %[2]s", c.Name, c.VersionHelp)
	if len(args) == 0 {
		fmt.Fprintln(stderr, usage)
		return 2
	}
	switch args[0] {
	case "version":
		if len(args) > 1 {
			fmt.Fprintf(stderr, "%s: version takes no arguments\n", c.Name)
			return 2
		}
		fmt.Fprintf(stdout, "%s (relaybus bench peer, worker protocol %d, %s)\n", c.Version(), protocol.Version, runtime.Version())
		return 0
	case "help", "-h", "--help":
		fmt.Fprintln(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "%s: unknown command %q\n%s\n", c.Name, args[0], usage)
	return 2
}
