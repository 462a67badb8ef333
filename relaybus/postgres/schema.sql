-- relaybus 0.2.0 schema: lane leases, delete on complete.
--
-- This file is a text/template, in one set with the store's other .sql
-- files (sql.go); step 3 is upgrade.sql's upgradeFrom010. Its only fields
-- are Schema and Prefix: the validated Options.Schema and
-- Options.TablePrefix, which can hold nothing but [a-z0-9_], and which
-- the template always quotes.
--
-- Setup runs it in one transaction under an advisory lock, and SchemaSQL
-- returns it. Every statement is idempotent, so it can run any number of
-- times: on an empty schema it installs 0.2.0, on a 0.1.0 schema it
-- upgrades in place, on a 0.2.0 schema it changes nothing, and on a schema
-- it does not know (a newer version, or tables in a shape it cannot place)
-- it raises an error before it writes anything.
--
-- Versions: 0.1.0 has no version table; its marker is the column
-- deliveries.lease_token. 0.2.0 records schema version 2 in the table
-- <prefix>schema_version. The 0.1.0 file is kept verbatim as
-- testdata/schema-0.1.0.sql, the fixture the upgrade tests start from.

-- 1. Refuse what this version does not know, before writing anything.
DO $relaybus$
DECLARE
    found integer;
    state text;
    t record;
    required text[];
    missing text[];
BEGIN
    IF to_regclass('"{{.Schema}}"."{{.Prefix}}schema_version"') IS NOT NULL THEN
        EXECUTE 'SELECT max(version) FROM "{{.Schema}}"."{{.Prefix}}schema_version"' INTO found;
        IF found IS NULL OR found > 2 THEN
            RAISE EXCEPTION 'relaybus: schema "{{.Schema}}" with prefix "{{.Prefix}}" has schema version %, which relaybus 0.2.0 does not know; refusing to change it', coalesce(found::text, 'none')
                USING ERRCODE = 'object_not_in_prerequisite_state';
        END IF;
        state := '0.2.0';
    ELSIF to_regclass('"{{.Schema}}"."{{.Prefix}}deliveries"') IS NOT NULL THEN
        IF NOT EXISTS (
            SELECT 1 FROM pg_catalog.pg_attribute
            WHERE attrelid = to_regclass('"{{.Schema}}"."{{.Prefix}}deliveries"')
                AND attname = 'lease_token' AND NOT attisdropped) THEN
            -- Tables without a version and without the 0.1.0 marker: not
            -- something this version made. Do not guess.
            RAISE EXCEPTION 'relaybus: table "{{.Schema}}"."{{.Prefix}}deliveries" is neither relaybus 0.1.0 nor 0.2.0 (no schema version, no lease_token column); refusing to change it'
                USING ERRCODE = 'object_not_in_prerequisite_state';
        END IF;
        state := '0.1.0';
    ELSE
        state := 'none';
    END IF;

    -- Every table with a relaybus name must be the one that version has:
    -- its columns (by name) all there. A table of that name that relaybus
    -- did not make (another application's, or one made by hand) is
    -- refused by name, before anything is written: with the other tables
    -- created beside it and the version recorded, the first publish
    -- would fail on a missing column. A version without a table
    -- (NULL) means the table must not exist: a fresh schema has none, and
    -- 0.1.0 had no lanes and no history.
    FOR t IN SELECT * FROM (VALUES
        ('events',
            ARRAY['id', 'type', 'key', 'sequence', 'payload', 'headers', 'created_at'],
            ARRAY['id', 'type', 'key', 'sequence', 'payload', 'headers', 'created_at', 'handlers']),
        ('keys', ARRAY['key', 'last_sequence'], ARRAY['key', 'last_sequence']),
        ('deliveries',
            ARRAY['id', 'event_id', 'handler', 'event_type', 'key', 'sequence', 'status', 'attempts',
                'max_attempts', 'available_at', 'lease_owner', 'lease_token', 'lease_expires_at',
                'last_error', 'created_at', 'updated_at', 'completed_at'],
            ARRAY['id', 'event_id', 'handler', 'event_type', 'key', 'sequence', 'status', 'attempts',
                'max_attempts', 'available_at', 'last_error', 'created_at', 'updated_at', 'completed_at',
                'lane', 'claims', 'suspect']),
        ('lanes', NULL,
            ARRAY['lane', 'epoch', 'lease_owner', 'lease_holder', 'lease_expires_at', 'in_flight']),
        ('history', NULL,
            ARRAY['id', 'event_id', 'handler', 'event_type', 'key', 'sequence', 'attempts', 'max_attempts',
                'available_at', 'last_error', 'created_at', 'completed_at']),
        ('paused_handlers', NULL, ARRAY['handler', 'reason', 'paused_at'])
    ) AS x(name, v010, v020) LOOP
        CONTINUE WHEN to_regclass('"{{.Schema}}"."{{.Prefix}}' || t.name || '"') IS NULL;
        required := CASE state WHEN '0.1.0' THEN t.v010 WHEN '0.2.0' THEN t.v020 END;
        IF required IS NULL THEN
            RAISE EXCEPTION 'relaybus: table "{{.Schema}}"."{{.Prefix}}%" exists, but relaybus did not make it (%); refusing to change anything', t.name,
                CASE state WHEN 'none' THEN 'no other relaybus table is there' ELSE 'relaybus ' || state || ' has no such table' END
                USING ERRCODE = 'object_not_in_prerequisite_state';
        END IF;
        SELECT array_agg(c ORDER BY c) INTO missing FROM unnest(required) AS c
        WHERE NOT EXISTS (
            SELECT 1 FROM pg_catalog.pg_attribute
            WHERE attrelid = to_regclass('"{{.Schema}}"."{{.Prefix}}' || t.name || '"')
                AND attname = c AND NOT attisdropped);
        IF missing IS NOT NULL THEN
            RAISE EXCEPTION 'relaybus: table "{{.Schema}}"."{{.Prefix}}%" is not the relaybus % table of that name (no column %); refusing to change anything', t.name, state, array_to_string(missing, ', ')
                USING ERRCODE = 'object_not_in_prerequisite_state';
        END IF;
    END LOOP;
END
$relaybus$;

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

-- In a lanes table made by 0.2.0 to 0.2.2, in_flight comes before picks;
-- since 0.3.0 it is the row's last column. PostgreSQL logs an update that
-- stays on its page as the new tuple less the bytes it shares with the
-- old one at its start and at its end, and a claim puts its new ids at
-- the front of in_flight (claimOwn), so with in_flight last the ids
-- already in flight are the shared end, and a claim's update record
-- carries only the expiry, picks and the new ids (BENCHMARKS.md, "The
-- lane row's update record"). PostgreSQL cannot reorder columns: the
-- list is copied into a new last column, and the old one dropped (a
-- dropped column costs a row one bit of its null bitmap). This runs
-- before any other statement of the transaction takes a lock, so that
-- the exclusive lock on the lanes is the first it takes: dispatchers of
-- the old version that are running meanwhile wait for it (the copy of
-- 256 rows) and go on by column name, instead of deadlocking with a lock
-- this transaction took on the deliveries first. A lanes table without
-- picks gets it here, before in_flight moves. On any other lanes table,
-- or none, this changes nothing.
DO $relaybus$
DECLARE
    lanes regclass := to_regclass('"{{.Schema}}"."{{.Prefix}}lanes"');
BEGIN
    -- in_flight's place, and picks' (NULL where it has none yet).
    IF lanes IS NULL OR NOT EXISTS (
        SELECT 1 FROM pg_catalog.pg_attribute f
        WHERE f.attrelid = lanes AND f.attname = 'in_flight' AND NOT f.attisdropped
            AND f.attnum < coalesce((SELECT p.attnum FROM pg_catalog.pg_attribute p
                WHERE p.attrelid = lanes AND p.attname = 'picks' AND NOT p.attisdropped), 32767)) THEN
        RETURN;
    END IF;
    LOCK TABLE "{{.Schema}}"."{{.Prefix}}lanes" IN ACCESS EXCLUSIVE MODE;
    ALTER TABLE "{{.Schema}}"."{{.Prefix}}lanes" ADD COLUMN IF NOT EXISTS picks integer NOT NULL DEFAULT 0;
    ALTER TABLE "{{.Schema}}"."{{.Prefix}}lanes" ADD COLUMN in_flight_last bigint[] NOT NULL DEFAULT '{}';
    UPDATE "{{.Schema}}"."{{.Prefix}}lanes" SET in_flight_last = in_flight;
    ALTER TABLE "{{.Schema}}"."{{.Prefix}}lanes" DROP COLUMN in_flight;
    ALTER TABLE "{{.Schema}}"."{{.Prefix}}lanes" RENAME COLUMN in_flight_last TO in_flight;
END
$relaybus$;

-- 2. The tables of a fresh install, in their 0.2.0 shape. On a 0.1.0
-- schema they exist, and step 3 brings them to this shape.

-- One row per published event. payload and headers are stored once and
-- joined into every delivery that is claimed or listed. handlers is every
-- handler the event ever had a delivery for: the delivery rows go when
-- they complete, the list stays, so a republished event id gets
-- deliveries only for handlers that are not listed (a completed handler
-- never runs twice).
CREATE TABLE IF NOT EXISTS "{{.Schema}}"."{{.Prefix}}events" (
    id         text        PRIMARY KEY,
    type       text        NOT NULL,
    key        text,
    sequence   bigint      NOT NULL DEFAULT 0,
    payload    bytea,
    headers    jsonb,
    created_at timestamptz NOT NULL,
    handlers   text[]      NOT NULL DEFAULT '{}'
);

-- The per-key sequence counter. A publish upserts the key's row
-- (INSERT ... ON CONFLICT DO UPDATE ... RETURNING), which keeps the row
-- locked until the publishing transaction ends: a second publisher of the
-- same key waits, so sequences follow commit order.
CREATE TABLE IF NOT EXISTS "{{.Schema}}"."{{.Prefix}}keys" (
    key           text   PRIMARY KEY,
    last_sequence bigint NOT NULL
);

-- One row per (event, handler): the unit of work, from publish until its
-- handler's success commits, when it is deleted. No lease lives here: a
-- claim writes only lane rows, so on the happy path a delivery row is
-- inserted once and deleted once. status is pending or dead (completed
-- only for rows left by 0.1.0); a delivery is processing when its id is
-- in the in_flight list of a lane that has an owner. lane is
-- relaybus.LaneOf(key, event id); claims is raised by every write that
-- ends a claim without deleting the row, and is part of the lease token;
-- suspect marks a delivery that was in flight when its lane was taken
-- over (it may be what crashed its process), which a claim returns alone.
CREATE TABLE IF NOT EXISTS "{{.Schema}}"."{{.Prefix}}deliveries" (
    id           bigserial   PRIMARY KEY,
    event_id     text        NOT NULL REFERENCES "{{.Schema}}"."{{.Prefix}}events" (id),
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
    completed_at timestamptz,
    lane         smallint    NOT NULL,
    claims       bigint      NOT NULL DEFAULT 0,
    suspect      boolean     NOT NULL DEFAULT false,
    CONSTRAINT "{{.Prefix}}deliveries_event_handler_unique" UNIQUE (event_id, handler),
    CONSTRAINT "{{.Prefix}}deliveries_status_check" CHECK (status IN ('pending', 'completed', 'dead'))
);

-- 3. Upgrade a 0.1.0 schema in place (only while its marker column,
-- deliveries.lease_token, exists; afterwards this block does nothing).
-- The workers of 0.1.0 must be stopped: they would fail on the dropped
-- columns. Every delivery row is rewritten once.
{{template "upgradeFrom010" .}}

-- 4. The indexes of deliveries: only columns that no happy-path statement
-- writes, so a claim writes no index entry and a completion (a delete)
-- none either. Besides the primary key and the (event_id, handler) unique
-- key (idempotent publish):

-- Claims: the pending unkeyed deliveries of a lane by due time. Unkeyed
-- only: a claim looking for
-- unkeyed work would otherwise walk every keyed row of the lane, and a
-- hot key's backlog behind its running head is thousands of rows none of
-- which may run (see the package documentation).
CREATE INDEX IF NOT EXISTS "{{.Prefix}}deliveries_lane_unkeyed_idx"
    ON "{{.Schema}}"."{{.Prefix}}deliveries" (lane, available_at, id)
    WHERE status = 'pending' AND key IS NULL;

-- Claims: the keyed deliveries of a lane by (handler, key, sequence). A
-- claim walks it from key to key (a skip scan, one probe per key) to find
-- the head of each, which is the only delivery of its key that may run:
-- the per-key ordering check is the walk itself. A key lives in one lane.
CREATE INDEX IF NOT EXISTS "{{.Prefix}}deliveries_lane_key_idx"
    ON "{{.Schema}}"."{{.Prefix}}deliveries" (lane, handler, key, sequence)
    WHERE key IS NOT NULL AND status = 'pending';

-- Retention: dead deliveries by their last change.
CREATE INDEX IF NOT EXISTS "{{.Prefix}}deliveries_dead_idx"
    ON "{{.Schema}}"."{{.Prefix}}deliveries" (updated_at, id)
    WHERE status = 'dead';

-- Deletes leave one dead tuple per delivery: vacuum the table after 2% of
-- it changed instead of the default 20%.
ALTER TABLE "{{.Schema}}"."{{.Prefix}}deliveries" SET (autovacuum_vacuum_scale_factor = 0.02);

-- 5. The lanes: 256 rows, leased by dispatchers. epoch is the fencing
-- token (raised whenever the lane changes hands); lease_owner is the
-- bus's owner name and lease_holder the store instance (new at every
-- New), so a restarted process with the same owner name does not adopt
-- its predecessor's lanes; in_flight are the ids of the deliveries the
-- holder claimed and has not finished; picks counts the deliveries
-- claimed from the lane since it was taken (a held lane gives a bounded
-- number, then is handed back: see claimQuota in claim.go). No secondary
-- index and half of every page free, so that an update of a lane row can
-- be heap-only (HOT): it adds no index entry. toast_tuple_target keeps an
-- in_flight list of up to about a thousand ids in the row, uncompressed,
-- rather than in the TOAST table.
CREATE TABLE IF NOT EXISTS "{{.Schema}}"."{{.Prefix}}lanes" (
    lane             smallint    PRIMARY KEY CHECK (lane >= 0 AND lane < 256),
    epoch            bigint      NOT NULL DEFAULT 0,
    lease_owner      text,
    lease_holder     text,
    lease_expires_at timestamptz,
    picks            integer     NOT NULL DEFAULT 0,
    in_flight        bigint[]    NOT NULL DEFAULT '{}'
) WITH (fillfactor = 50, toast_tuple_target = 8160);

-- A lanes table made without picks gets it (step 1 does not require the
-- column); on any other this changes nothing.
ALTER TABLE "{{.Schema}}"."{{.Prefix}}lanes" ADD COLUMN IF NOT EXISTS picks integer NOT NULL DEFAULT 0;

ALTER TABLE "{{.Schema}}"."{{.Prefix}}lanes" SET (fillfactor = 50, toast_tuple_target = 8160);

-- Each lane gets a page of its own. A HOT update needs room in the row's
-- page for the new version until the old one is pruned, and an in_flight
-- list of 200 ids is 1.7 KB: 67 lane rows to a page, updated by several
-- claimers at once, would leave too little room, and many updates would
-- not be HOT (BenchmarkClaimCompleteParallel reports the share). So each
-- row is first inserted with a filler of 300 ids (2.4 KB, more than half of
-- what fillfactor 50 lets an insert use, so no second row joins it), and
-- then emptied, in place. Only rows inserted by this statement carry the
-- filler (-1 is never a delivery id); the UPDATE finds nothing on a
-- second run.
INSERT INTO "{{.Schema}}"."{{.Prefix}}lanes" (lane, in_flight)
SELECT l, array_fill(-1::bigint, ARRAY[300]) FROM generate_series(0, 255) AS l
ON CONFLICT (lane) DO NOTHING;

UPDATE "{{.Schema}}"."{{.Prefix}}lanes" SET in_flight = '{}' WHERE in_flight[1] = -1;

-- 6. The optional completion history (Options.CompletionHistory): one row
-- inserted per completion, never updated, listed and counted as
-- completed, deleted by Purge. id is the delivery's id. Its rows keep
-- their events from being purged (the event index).
CREATE TABLE IF NOT EXISTS "{{.Schema}}"."{{.Prefix}}history" (
    id           bigint      PRIMARY KEY,
    event_id     text        NOT NULL,
    handler      text        NOT NULL,
    event_type   text        NOT NULL,
    key          text,
    sequence     bigint      NOT NULL,
    attempts     integer     NOT NULL,
    max_attempts integer     NOT NULL,
    available_at timestamptz NOT NULL,
    last_error   text,
    created_at   timestamptz NOT NULL,
    completed_at timestamptz NOT NULL
);

CREATE INDEX IF NOT EXISTS "{{.Prefix}}history_completed_idx"
    ON "{{.Schema}}"."{{.Prefix}}history" (completed_at, id);

CREATE INDEX IF NOT EXISTS "{{.Prefix}}history_event_idx"
    ON "{{.Schema}}"."{{.Prefix}}history" (event_id);

-- 7. The paused handlers (Bus.PauseHandler, since 0.3.0): a row per
-- handler no dispatcher claims for until it is resumed. Every dispatcher
-- reads the whole table once per poll. Added to schema version 2 as it
-- stands: a 0.2 store neither reads nor refuses it (its dispatchers do
-- not know pauses: pause only where every dispatcher is 0.3 or later).
CREATE TABLE IF NOT EXISTS "{{.Schema}}"."{{.Prefix}}paused_handlers" (
    handler   text        PRIMARY KEY,
    reason    text        NOT NULL,
    paused_at timestamptz NOT NULL
);

-- 8. The schema version, last: a version is recorded only with everything
-- it names in place.
CREATE TABLE IF NOT EXISTS "{{.Schema}}"."{{.Prefix}}schema_version" (
    version integer PRIMARY KEY
);

INSERT INTO "{{.Schema}}"."{{.Prefix}}schema_version" (version) VALUES (2)
ON CONFLICT (version) DO NOTHING;
