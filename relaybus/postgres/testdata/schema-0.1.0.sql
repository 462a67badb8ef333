-- relaybus 0.1.0 schema: row leases.
--
-- This file is a text/template. Its only fields are Schema and Prefix: the
-- validated Options.Schema and Options.TablePrefix (see schema.go), which
-- can hold nothing but [a-z0-9_], and which the template always quotes.
-- Every statement is idempotent, so Setup can run it any number of times.
-- This file is also the verbatim 0.1.0 fixture the 0.2.0 upgrade starts
-- from: change it only in a new release, never in place.

-- Not CREATE SCHEMA IF NOT EXISTS: that checks the CREATE privilege on the
-- database before it checks existence, so a role that may only use an
-- existing schema (public, or one a DBA made) could never run Setup.
DO $relaybus$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = '{{.Schema}}') THEN
        CREATE SCHEMA "{{.Schema}}";
    END IF;
END
$relaybus$;

-- One row per published event. payload and headers are stored once and
-- joined into every delivery that is claimed or listed.
CREATE TABLE IF NOT EXISTS "{{.Schema}}"."{{.Prefix}}events" (
    id         text        PRIMARY KEY,
    type       text        NOT NULL,
    key        text,
    sequence   bigint      NOT NULL DEFAULT 0,
    payload    bytea,
    headers    jsonb,
    created_at timestamptz NOT NULL
);

-- The per-key sequence counter. A publish upserts the key's row
-- (INSERT ... ON CONFLICT DO UPDATE ... RETURNING), which keeps the row
-- locked until the publishing transaction ends: a second publisher of the
-- same key waits, so sequences follow commit order.
CREATE TABLE IF NOT EXISTS "{{.Schema}}"."{{.Prefix}}keys" (
    key           text   PRIMARY KEY,
    last_sequence bigint NOT NULL
);

-- One row per (event, handler): the unit of work. A claim, every lease
-- renewal and the completion each update this row; the lease lives on it.
CREATE TABLE IF NOT EXISTS "{{.Schema}}"."{{.Prefix}}deliveries" (
    id               bigserial   PRIMARY KEY,
    event_id         text        NOT NULL REFERENCES "{{.Schema}}"."{{.Prefix}}events" (id),
    handler          text        NOT NULL,
    event_type       text        NOT NULL,
    key              text,
    sequence         bigint      NOT NULL DEFAULT 0,
    status           text        NOT NULL DEFAULT 'pending'
                                 CHECK (status IN ('pending', 'processing', 'completed', 'dead')),
    attempts         integer     NOT NULL DEFAULT 0,
    max_attempts     integer     NOT NULL,
    available_at     timestamptz NOT NULL,
    lease_owner      text,
    lease_token      text,
    lease_expires_at timestamptz,
    last_error       text,
    created_at       timestamptz NOT NULL,
    updated_at       timestamptz NOT NULL,
    completed_at     timestamptz,
    CONSTRAINT "{{.Prefix}}deliveries_event_handler_unique" UNIQUE (event_id, handler)
);

-- Claim: due pending deliveries in claim order.
CREATE INDEX IF NOT EXISTS "{{.Prefix}}deliveries_due_idx"
    ON "{{.Schema}}"."{{.Prefix}}deliveries" (available_at, id)
    WHERE status = 'pending';

-- Claim: due pending deliveries without an ordering key (no ordering check).
CREATE INDEX IF NOT EXISTS "{{.Prefix}}deliveries_due_unkeyed_idx"
    ON "{{.Schema}}"."{{.Prefix}}deliveries" (available_at, id)
    WHERE key IS NULL AND status = 'pending';

-- Claim: the per-key ordering check (an earlier delivery of the same
-- handler and key that is still pending or processing). Only unfinished
-- rows are indexed, so the check stops at the first entry it finds
-- instead of walking past every completed predecessor of the key.
CREATE INDEX IF NOT EXISTS "{{.Prefix}}deliveries_ordering_idx"
    ON "{{.Schema}}"."{{.Prefix}}deliveries" (handler, key, sequence)
    WHERE key IS NOT NULL AND status IN ('pending', 'processing');

-- Listing and statistics by status.
CREATE INDEX IF NOT EXISTS "{{.Prefix}}deliveries_status_created_idx"
    ON "{{.Schema}}"."{{.Prefix}}deliveries" (status, created_at);

-- Listing by handler.
CREATE INDEX IF NOT EXISTS "{{.Prefix}}deliveries_handler_created_idx"
    ON "{{.Schema}}"."{{.Prefix}}deliveries" (handler, created_at);

-- Retention: completed deliveries by completion time.
CREATE INDEX IF NOT EXISTS "{{.Prefix}}deliveries_completed_idx"
    ON "{{.Schema}}"."{{.Prefix}}deliveries" (completed_at)
    WHERE status = 'completed';

-- Claim (takeover): processing deliveries by lease expiry.
CREATE INDEX IF NOT EXISTS "{{.Prefix}}deliveries_processing_idx"
    ON "{{.Schema}}"."{{.Prefix}}deliveries" (lease_expires_at)
    WHERE status = 'processing';
