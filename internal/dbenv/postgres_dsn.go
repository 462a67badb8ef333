package dbenv

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// dsnConnectTimeout bounds the first connection to a given server.
const dsnConnectTimeout = 10 * time.Second

// dsnBackend is a server the user runs: dbenv neither restarts nor stops it.
type dsnBackend struct{}

func (dsnBackend) restart(context.Context) error {
	return errors.New("dbenv: restart: not supported for provider dsn (the server is not ours to restart)")
}

func (dsnBackend) crash(context.Context) error {
	return errors.New("dbenv: crash: not supported for provider dsn (the server is not ours to crash)")
}

func (dsnBackend) stop(context.Context) error { return nil }

func (dsnBackend) source() string { return "given DSN" }

func startDSN(ctx context.Context, dsn string, logf func(string, ...any)) (*Postgres, error) {
	if dsn == "" {
		return nil, fmt.Errorf("dbenv: provider dsn: no DSN given and %s is not set", EnvDatabaseURL)
	}
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("dbenv: provider dsn: parse DSN: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, dsnConnectTimeout)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("dbenv: provider dsn: connect to %s:%d: %w", cfg.Host, cfg.Port, err)
	}
	conn.Close(ctx)
	logf("dbenv: using the given server at %s:%d", cfg.Host, cfg.Port)
	return &Postgres{provider: ProviderDSN, adminDSN: dsn, backend: dsnBackend{}, logf: logf}, nil
}
