package main

import (
	"context"
	"fmt"
	"hash/fnv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// setupLockKey is the advisory lock setup runs under, so that two setups
// at once do not race on CREATE ... IF NOT EXISTS.
const setupLockKey = 0x6365696c696e67 // "ceiling"

// schemaSQL is the relaybus 0.2 schema's tables as far as the lane
// pattern uses them: the same columns, types, keys, partial indexes and
// storage parameters, without the engine's own (the lane lease columns
// epoch, owner, holder, expiry and in_flight, the deliveries' claims and
// suspect, the history and version tables). events.handlers is kept: it
// is what inspect counts completed deliveries from. Every statement is
// idempotent.
var schemaSQL = []string{
	`CREATE TABLE IF NOT EXISTS ceiling_events (
		id         text        PRIMARY KEY,
		type       text        NOT NULL,
		key        text,
		sequence   bigint      NOT NULL DEFAULT 0,
		payload    bytea,
		headers    jsonb,
		created_at timestamptz NOT NULL,
		handlers   text[]      NOT NULL DEFAULT '{}'
	)`,
	// The per-key sequence counter: a publish upserts its keys' rows, which
	// stay locked until it commits, so sequences follow commit order.
	`CREATE TABLE IF NOT EXISTS ceiling_keys (
		key           text   PRIMARY KEY,
		last_sequence bigint NOT NULL
	)`,
	`CREATE TABLE IF NOT EXISTS ceiling_deliveries (
		id           bigserial   PRIMARY KEY,
		event_id     text        NOT NULL REFERENCES ceiling_events (id),
		handler      text        NOT NULL,
		event_type   text        NOT NULL,
		key          text,
		sequence     bigint      NOT NULL DEFAULT 0,
		status       text        NOT NULL DEFAULT 'pending',
		attempts     integer     NOT NULL DEFAULT 0,
		max_attempts integer     NOT NULL,
		available_at timestamptz NOT NULL,
		last_error   text,
		created_at   timestamptz NOT NULL,
		updated_at   timestamptz NOT NULL,
		lane         smallint    NOT NULL,
		CONSTRAINT ceiling_deliveries_event_handler_unique UNIQUE (event_id, handler),
		CONSTRAINT ceiling_deliveries_status_check CHECK (status IN ('pending', 'dead'))
	)`,
	// Claims of unkeyed deliveries: a lane's due ones by due time.
	`CREATE INDEX IF NOT EXISTS ceiling_deliveries_lane_unkeyed_idx
		ON ceiling_deliveries (lane, available_at, id) WHERE status = 'pending' AND key IS NULL`,
	// Claims of keyed deliveries: a lane's by (handler, key, sequence),
	// so that the walk meets each key's head first.
	`CREATE INDEX IF NOT EXISTS ceiling_deliveries_lane_key_idx
		ON ceiling_deliveries (lane, handler, key, sequence) WHERE key IS NOT NULL AND status = 'pending'`,
	`CREATE INDEX IF NOT EXISTS ceiling_deliveries_dead_idx
		ON ceiling_deliveries (updated_at, id) WHERE status = 'dead'`,
	`ALTER TABLE ceiling_deliveries SET (autovacuum_vacuum_scale_factor = 0.02)`,
	// The lanes: a row each, only ever locked (FOR UPDATE SKIP LOCKED),
	// never written.
	`CREATE TABLE IF NOT EXISTS ceiling_lanes (
		lane smallint PRIMARY KEY CHECK (lane >= 0 AND lane < 256)
	)`,
	`INSERT INTO ceiling_lanes (lane) SELECT l FROM generate_series(0, 255) AS l ON CONFLICT (lane) DO NOTHING`,
}

// setup creates the tables in one transaction under an advisory lock.
func setup(ctx context.Context, pool *pgxpool.Pool) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(setupLockKey)); err != nil {
			return fmt.Errorf("ceiling: setup lock: %w", err)
		}
		for _, s := range schemaSQL {
			if _, err := tx.Exec(ctx, s); err != nil {
				return fmt.Errorf("ceiling: setup: %w", err)
			}
		}
		return nil
	})
}

// laneOf is driver.LaneOf: FNV-1a 32 of the key, or of the event id
// when the event has no key, modulo 256, so that the deliveries spread
// over the lanes as the candidate's do and a key lives in one lane.
func laneOf(key, eventID string) int16 {
	h := fnv.New32a()
	if key != "" {
		h.Write([]byte(key))
	} else {
		h.Write([]byte(eventID))
	}
	return int16(h.Sum32() % laneCount)
}
