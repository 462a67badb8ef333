// Command dbserver starts a database server through dbenv, writes where it
// is to a file of environment assignments, and stops it on SIGINT or
// SIGTERM. CI's Testcontainers step (scripts/ci-testcontainers) uses it to
// run the library's tests, which link no container code, against a
// PostgreSQL (and, where a mongo image is present, a MongoDB replica set)
// in a container:
//
//	dbserver -env-file FILE [-provider testcontainers] [-mongo]
//
// Once every server is ready, FILE holds lines such as
//
//	RELAYBUS_TEST_DATABASE_URL=postgres://postgres:postgres@127.0.0.1:PORT/postgres?sslmode=disable
//	RELAYBUS_TEST_MONGO_URI=mongodb://127.0.0.1:PORT/?directConnection=true
//
// written at once (a rename), so a reader that sees the file sees it
// whole. The servers listen on 127.0.0.1 only and are removed on exit.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/berkcansavur/relaybus/internal/dbenv"
	_ "github.com/berkcansavur/relaybus/internal/dbenv/container" // the testcontainers provider
)

// startTimeout bounds starting the servers (an image check included).
const startTimeout = 5 * time.Minute

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// run starts the servers, writes the environment file, and waits for ctx
// to end; then it stops what it started.
func run(ctx context.Context, args []string, stderr io.Writer) (err error) {
	fs := flag.NewFlagSet("dbserver", flag.ContinueOnError)
	fs.SetOutput(stderr)
	envFile := fs.String("env-file", "", "write the servers' environment assignments to `FILE` once they are ready (required)")
	providerFlag := fs.String("provider", string(dbenv.ProviderTestcontainers), "PostgreSQL provider: auto, local, testcontainers or dsn")
	withMongo := fs.Bool("mongo", false, "also start a MongoDB replica set in a container")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *envFile == "" || fs.NArg() > 0 {
		fs.Usage()
		return errors.New("dbserver: -env-file is required and no arguments are taken")
	}
	provider, err := dbenv.ParseProvider(*providerFlag)
	if err != nil {
		return err
	}
	logf := func(format string, args ...any) { fmt.Fprintf(stderr, format+"\n", args...) }

	startCtx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	pg, err := dbenv.StartPostgres(startCtx, dbenv.PostgresOptions{Provider: provider, Logf: logf})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, pg.Stop(context.WithoutCancel(ctx))) }()
	env := dbenv.EnvDatabaseURL + "=" + pg.AdminDSN() + "\n"
	if *withMongo {
		m, err := dbenv.StartMongo(startCtx, dbenv.MongoOptions{Logf: logf})
		if err != nil {
			return err
		}
		defer func() { err = errors.Join(err, m.Stop(context.WithoutCancel(ctx))) }()
		env += dbenv.EnvMongoURI + "=" + m.URI() + "\n"
	}
	if err := writeAtomically(*envFile, env); err != nil {
		return err
	}
	logf("dbserver: ready (%s); stop with SIGTERM", *envFile)
	<-ctx.Done()
	logf("dbserver: stopping")
	return nil
}

// writeAtomically writes text to a temporary file beside path and renames
// it into place.
func writeAtomically(path, text string) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".dbserver-*")
	if err != nil {
		return fmt.Errorf("dbserver: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.WriteString(text); err != nil {
		tmp.Close()
		return fmt.Errorf("dbserver: write %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("dbserver: write %s: %w", tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("dbserver: %w", err)
	}
	return nil
}
