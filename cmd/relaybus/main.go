// Command relaybus administers a relaybus store: statistics per handler,
// dead letters (list, show, requeue), purge by retention, and the schema
// SQL for a migration tool. PostgreSQL only for now.
//
//	relaybus stats --dsn postgres://app@db/app
//	RELAYBUS_DATABASE_URL=postgres://app@db/app relaybus dead list --handler send-receipt
//	relaybus dead show 1234
//	relaybus requeue 1234 1240
//	relaybus requeue --handler send-receipt        (asks first; --yes does not)
//	relaybus purge --dead 30d --completed 7d       (asks first)
//	relaybus schema --schema app > migrations/0007_relaybus.sql
//
// relaybus help lists every command, relaybus COMMAND --help its flags;
// the exit statuses are in the help and in internal/admincli's
// documentation. main only hands the process over to admincli.Main.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/berkcansavur/relaybus/internal/admincli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := admincli.Main(ctx, os.Args[1:], admincli.Env{
		Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr,
		Getenv:      os.Getenv,
		Interactive: isTerminal(os.Stdin),
	})
	stop()
	os.Exit(code)
}
