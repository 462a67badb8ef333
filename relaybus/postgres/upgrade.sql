-- The in-place upgrade of a 0.1.0 schema: step 3 of schema.sql, which
-- includes it. Part of the store's one template set: see sql.go. Its
-- fields are schema.sql's (Schema and Prefix). It does something only
-- while 0.1.0's marker column, deliveries.lease_token, exists, so it can
-- run any number of times; docs/lane-protocol.md and the package
-- documentation ("# Upgrading from 0.1.0") say what it keeps and what it
-- drops.
{{define "upgradeFrom010" -}}
DO $relaybus$
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM pg_catalog.pg_attribute
        WHERE attrelid = to_regclass('"{{.Schema}}"."{{.Prefix}}deliveries"')
            AND attname = 'lease_token' AND NOT attisdropped) THEN
        RETURN;
    END IF;

    -- The lane hash of relaybus.LaneOf in SQL, for this upgrade only (a
    -- temporary function, gone when the session ends): 32-bit FNV-1a of
    -- the UTF-8 bytes of the key, or of the event id when the event has
    -- no key, modulo 256. The product stays below 2^57, so bigint holds
    -- it before the mask.
    EXECUTE $fn$
        CREATE OR REPLACE FUNCTION pg_temp.relaybus_lane(k text) RETURNS smallint
        LANGUAGE plpgsql IMMUTABLE STRICT AS $body$
        DECLARE
            h bigint := 2166136261;
            b bytea := convert_to(k, 'UTF8');
        BEGIN
            FOR i IN 0 .. length(b) - 1 LOOP
                h := ((h # get_byte(b, i)) * 16777619) & 4294967295;
            END LOOP;
            RETURN (h % 256)::smallint;
        END
        $body$
    $fn$;

    -- Events remember every handler they had a delivery for, completed
    -- ones included, so nothing completed under 0.1.0 runs again when its
    -- event id is published again.
    ALTER TABLE "{{.Schema}}"."{{.Prefix}}events" ADD COLUMN IF NOT EXISTS handlers text[] NOT NULL DEFAULT '{}';
    UPDATE "{{.Schema}}"."{{.Prefix}}events" AS e SET handlers = h.handlers
    FROM (
        SELECT event_id, array_agg(handler ORDER BY handler) AS handlers
        FROM "{{.Schema}}"."{{.Prefix}}deliveries" GROUP BY event_id
    ) h
    WHERE e.id = h.event_id;

    -- The indexes of 0.1.0 that 0.2.0 does not have (they index columns
    -- the hot path writes, or serve listings). Dropped first, so that the
    -- rewrite below does not maintain them.
    DROP INDEX IF EXISTS "{{.Schema}}"."{{.Prefix}}deliveries_due_idx";
    DROP INDEX IF EXISTS "{{.Schema}}"."{{.Prefix}}deliveries_due_unkeyed_idx";
    DROP INDEX IF EXISTS "{{.Schema}}"."{{.Prefix}}deliveries_ordering_idx";
    DROP INDEX IF EXISTS "{{.Schema}}"."{{.Prefix}}deliveries_status_created_idx";
    DROP INDEX IF EXISTS "{{.Schema}}"."{{.Prefix}}deliveries_handler_created_idx";
    DROP INDEX IF EXISTS "{{.Schema}}"."{{.Prefix}}deliveries_completed_idx";
    DROP INDEX IF EXISTS "{{.Schema}}"."{{.Prefix}}deliveries_processing_idx";

    ALTER TABLE "{{.Schema}}"."{{.Prefix}}deliveries"
        ADD COLUMN IF NOT EXISTS lane smallint,
        ADD COLUMN IF NOT EXISTS claims bigint NOT NULL DEFAULT 0,
        ADD COLUMN IF NOT EXISTS suspect boolean NOT NULL DEFAULT false,
        DROP CONSTRAINT IF EXISTS "{{.Prefix}}deliveries_status_check";

    -- A processing delivery was running when its worker stopped: its
    -- attempt was counted at claim and stays counted, exactly as a
    -- takeover of its lost lease would count it. It becomes pending and a
    -- suspect (run alone), even when that attempt was its last: 0.1.0
    -- had no suspects, so nothing says it is what stopped its worker (it
    -- may have run beside that), and a takeover buries only a delivery
    -- that was a suspect already (docs/lane-protocol.md, variant
    -- BURY_ANY). Its next attempt, alone, decides.
    EXECUTE $up$
        UPDATE "{{.Schema}}"."{{.Prefix}}deliveries" SET
            lane = pg_temp.relaybus_lane(coalesce(key, event_id)),
            suspect = (status = 'processing'),
            status = CASE WHEN status = 'processing' THEN 'pending' ELSE status END
    $up$;

    ALTER TABLE "{{.Schema}}"."{{.Prefix}}deliveries"
        ALTER COLUMN lane SET NOT NULL,
        ADD CONSTRAINT "{{.Prefix}}deliveries_status_check" CHECK (status IN ('pending', 'completed', 'dead'));

    ALTER TABLE "{{.Schema}}"."{{.Prefix}}deliveries"
        DROP COLUMN lease_owner,
        DROP COLUMN lease_token,
        DROP COLUMN lease_expires_at;
END
$relaybus$;
{{- end}}
