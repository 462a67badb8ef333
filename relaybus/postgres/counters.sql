-- Statistics counters (counters.go): an opt-in table of delivery counts
-- per handler and status, kept by statement-level triggers on the
-- deliveries and history tables, so that Statistics reads O(handlers)
-- rows instead of scanning every delivery. Off unless
-- Store.EnableStatisticsCounters installs it; DisableStatisticsCounters
-- takes it away. docs/operations.md ("Statistics counters") has what it
-- costs and the figures.
--
-- The counts table: deltas. status is a deliveries status (pending,
-- dead, completed: the last only for rows 0.1.0 left) or 'history' (a
-- row of the history table, counted as completed); the sum of n over the
-- rows of a (handler, status) is its count. A writing statement inserts
-- one row per (handler, status) it changed, and never updates one: no
-- writer waits for another here (a publish inside a long application
-- transaction keeps no other publish waiting for its commit), and a held
-- snapshot (docs/bloat.md) does not make a writer walk the dead versions
-- of a row updated over and over (an updated counter row did: a publish
-- went from 0.40 to 0.62 ms over 20,000 calls with one snapshot held,
-- BenchmarkPublishHeldSnapshot). Every 256th row (by id) folds the
-- committed rows of its (handler, status) that no other transaction holds
-- (SKIP LOCKED: a fold never waits either) into one, so the table keeps
-- a few hundred rows per (handler, status) while vacuum keeps up.
{{define "countersTable" -}}
CREATE TABLE IF NOT EXISTS {{.Counts}} (
    id      bigserial PRIMARY KEY,
    handler text   NOT NULL,
    status  text   NOT NULL,
    n       bigint NOT NULL
);
CREATE INDEX IF NOT EXISTS "{{.Prefix}}counts_handler_status_idx" ON {{.Counts}} (handler, status);
{{- end}}

-- The variables of both trigger functions: the (handler, status, n)
-- deltas of the statement as three arrays, and the id of the counter
-- row just inserted.
{{define "countersDeclare" -}}
DECLARE
	hs text[];
	ss text[];
	ns bigint[];
	added bigint;
{{- end}}

-- Add each delta to its (handler, status), and fold every 256th time:
-- the end of both trigger functions.
{{define "countersAdd" -}}
	FOR i IN 1 .. coalesce(array_length(hs, 1), 0) LOOP
		INSERT INTO {{.Counts}} (handler, status, n) VALUES (hs[i], ss[i], ns[i]) RETURNING id INTO added;
		IF added % 256 = 0 THEN
			WITH folded AS (
				DELETE FROM {{.Counts}} c WHERE c.id IN (
					SELECT x.id FROM {{.Counts}} x WHERE x.handler = hs[i] AND x.status = ss[i] AND x.id <> added
					FOR UPDATE SKIP LOCKED)
				RETURNING c.n
			)
			INSERT INTO {{.Counts}} (handler, status, n) SELECT hs[i], ss[i], sum(n) FROM folded HAVING count(*) > 0;
		END IF;
	END LOOP;
	RETURN NULL;
{{- end}}

-- The trigger functions. One call per statement (FOR EACH STATEMENT),
-- with the statement's rows in transition tables: a completion that
-- deletes 200 deliveries adds to its handlers' rows once, not 200 times.
-- An update counts only rows whose status changed (bury, requeue); the
-- others (reschedules, a takeover's charges) add nothing. TRUNCATE
-- empties the counts of its table.
{{define "countersFunctions" -}}
CREATE OR REPLACE FUNCTION "{{.Schema}}"."{{.Prefix}}count_deliveries"() RETURNS trigger
LANGUAGE plpgsql AS $relaybus$
{{template "countersDeclare"}}
BEGIN
	IF TG_OP = 'TRUNCATE' THEN
		DELETE FROM {{.Counts}} WHERE status <> 'history';
		RETURN NULL;
	ELSIF TG_OP = 'INSERT' THEN
		SELECT array_agg(handler), array_agg(status), array_agg(n) INTO hs, ss, ns
		FROM (SELECT handler, status, count(*) AS n FROM relaybus_new GROUP BY 1, 2) x;
	ELSIF TG_OP = 'DELETE' THEN
		SELECT array_agg(handler), array_agg(status), array_agg(n) INTO hs, ss, ns
		FROM (SELECT handler, status, -count(*) AS n FROM relaybus_old GROUP BY 1, 2) x;
	ELSE
		SELECT array_agg(handler), array_agg(status), array_agg(n) INTO hs, ss, ns
		FROM (
			SELECT v.handler, v.status, sum(v.n)::bigint AS n
			FROM relaybus_old o JOIN relaybus_new w ON w.id = o.id AND w.status <> o.status
			CROSS JOIN LATERAL (VALUES (o.handler, o.status, -1), (w.handler, w.status, 1)) AS v(handler, status, n)
			GROUP BY 1, 2 HAVING sum(v.n) <> 0
		) x;
	END IF;
	{{template "countersAdd" .}}
END
$relaybus$;

CREATE OR REPLACE FUNCTION "{{.Schema}}"."{{.Prefix}}count_history"() RETURNS trigger
LANGUAGE plpgsql AS $relaybus$
{{template "countersDeclare"}}
BEGIN
	IF TG_OP = 'TRUNCATE' THEN
		DELETE FROM {{.Counts}} WHERE status = 'history';
		RETURN NULL;
	ELSIF TG_OP = 'INSERT' THEN
		SELECT array_agg(handler), array_agg('history'::text), array_agg(n) INTO hs, ss, ns
		FROM (SELECT handler, count(*) AS n FROM relaybus_new GROUP BY 1) x;
	ELSE
		SELECT array_agg(handler), array_agg('history'::text), array_agg(n) INTO hs, ss, ns
		FROM (SELECT handler, -count(*) AS n FROM relaybus_old GROUP BY 1) x;
	END IF;
	{{template "countersAdd" .}}
END
$relaybus$;
{{- end}}

-- The seven triggers, if they exist.
{{define "countersDropTriggers" -}}
DROP TRIGGER IF EXISTS "{{.Prefix}}count_deliveries_insert" ON {{.Deliveries}};
DROP TRIGGER IF EXISTS "{{.Prefix}}count_deliveries_delete" ON {{.Deliveries}};
DROP TRIGGER IF EXISTS "{{.Prefix}}count_deliveries_update" ON {{.Deliveries}};
DROP TRIGGER IF EXISTS "{{.Prefix}}count_deliveries_truncate" ON {{.Deliveries}};
DROP TRIGGER IF EXISTS "{{.Prefix}}count_history_insert" ON {{.History}};
DROP TRIGGER IF EXISTS "{{.Prefix}}count_history_delete" ON {{.History}};
DROP TRIGGER IF EXISTS "{{.Prefix}}count_history_truncate" ON {{.History}};
{{- end}}

-- The triggers, by name <prefix>count_<table>_<op> (countersState
-- counts them). History rows are never updated.
{{define "countersTriggers" -}}
{{template "countersDropTriggers" .}}
CREATE TRIGGER "{{.Prefix}}count_deliveries_insert" AFTER INSERT ON {{.Deliveries}}
	REFERENCING NEW TABLE AS relaybus_new FOR EACH STATEMENT EXECUTE FUNCTION "{{.Schema}}"."{{.Prefix}}count_deliveries"();
CREATE TRIGGER "{{.Prefix}}count_deliveries_delete" AFTER DELETE ON {{.Deliveries}}
	REFERENCING OLD TABLE AS relaybus_old FOR EACH STATEMENT EXECUTE FUNCTION "{{.Schema}}"."{{.Prefix}}count_deliveries"();
CREATE TRIGGER "{{.Prefix}}count_deliveries_update" AFTER UPDATE ON {{.Deliveries}}
	REFERENCING OLD TABLE AS relaybus_old NEW TABLE AS relaybus_new FOR EACH STATEMENT EXECUTE FUNCTION "{{.Schema}}"."{{.Prefix}}count_deliveries"();
CREATE TRIGGER "{{.Prefix}}count_deliveries_truncate" AFTER TRUNCATE ON {{.Deliveries}}
	FOR EACH STATEMENT EXECUTE FUNCTION "{{.Schema}}"."{{.Prefix}}count_deliveries"();
CREATE TRIGGER "{{.Prefix}}count_history_insert" AFTER INSERT ON {{.History}}
	REFERENCING NEW TABLE AS relaybus_new FOR EACH STATEMENT EXECUTE FUNCTION "{{.Schema}}"."{{.Prefix}}count_history"();
CREATE TRIGGER "{{.Prefix}}count_history_delete" AFTER DELETE ON {{.History}}
	REFERENCING OLD TABLE AS relaybus_old FOR EACH STATEMENT EXECUTE FUNCTION "{{.Schema}}"."{{.Prefix}}count_history"();
CREATE TRIGGER "{{.Prefix}}count_history_truncate" AFTER TRUNCATE ON {{.History}}
	FOR EACH STATEMENT EXECUTE FUNCTION "{{.Schema}}"."{{.Prefix}}count_history"();
{{- end}}

-- EnableStatisticsCounters' transaction (after the due index is built):
-- the deliveries and history tables locked against writers (SHARE ROW
-- EXCLUSIVE: readers, claims' reads included, go on; a writer waits,
-- for at most lock_timeout), the table, functions and triggers
-- installed, and the counts taken from one scan of both tables. Every
-- write committed before the lock is in the scan, and every one after
-- it runs the triggers: the counts are exact from the commit on.
{{define "countersInstall" -}}
SELECT set_config('lock_timeout', '10s', true);
LOCK TABLE {{.Deliveries}}, {{.History}} IN SHARE ROW EXCLUSIVE MODE;
{{template "countersTable" .}}
{{template "countersFunctions" .}}
{{template "countersTriggers" .}}
DELETE FROM {{.Counts}};
INSERT INTO {{.Counts}} (handler, status, n)
	SELECT handler, status, count(*) FROM {{.Deliveries}} GROUP BY 1, 2
	UNION ALL
	SELECT handler, 'history', count(*) FROM {{.History}} GROUP BY 1;
{{- end}}

-- The index through which counted Statistics find each handler's
-- oldest due pending delivery: in due order, skipping the few in
-- flight. Built CONCURRENTLY (outside any transaction), so that writers
-- go on while it is built; a build that failed leaves an invalid index,
-- which countersDueIndexState finds and EnableStatisticsCounters drops
-- and builds again. It adds an index entry to every publish; a
-- reschedule, which changes available_at, already writes entries.
{{define "countersDueIndex" -}}
CREATE INDEX CONCURRENTLY IF NOT EXISTS "{{.Prefix}}deliveries_pending_due_idx"
    ON {{.Deliveries}} (handler, available_at) WHERE status = 'pending'
{{- end}}

{{define "countersDueIndexDrop" -}}
DROP INDEX CONCURRENTLY IF EXISTS "{{.Schema}}"."{{.Prefix}}deliveries_pending_due_idx"
{{- end}}

-- Whether the due index exists (1st) and is valid (2nd).
{{define "countersDueIndexState" -}}
SELECT i.indexrelid IS NOT NULL, coalesce(i.indisvalid AND i.indisready, false)
FROM (SELECT to_regclass('"{{.Schema}}"."{{.Prefix}}deliveries_pending_due_idx"') AS oid) r
LEFT JOIN pg_catalog.pg_index i ON i.indexrelid = r.oid
{{- end}}

-- Whether counters are on: the table, the due index (valid) and all
-- seven triggers, enabled. Anything less (a half-removed install) and
-- Statistics scans.
{{define "countersState" -}}
SELECT to_regclass('{{.Counts}}') IS NOT NULL
	AND coalesce((SELECT i.indisvalid FROM pg_catalog.pg_index i
		WHERE i.indexrelid = to_regclass('"{{.Schema}}"."{{.Prefix}}deliveries_pending_due_idx"')), false)
	AND (SELECT count(*) FROM pg_catalog.pg_trigger t
		WHERE t.tgrelid IN (to_regclass('"{{.Schema}}"."{{.Prefix}}deliveries"'), to_regclass('"{{.Schema}}"."{{.Prefix}}history"'))
			AND t.tgname LIKE '{{.Prefix}}count\_%' AND t.tgenabled <> 'D') = 7
{{- end}}

-- DisableStatisticsCounters: the triggers, functions and table, in one
-- transaction (the due index is dropped after it, concurrently).
{{define "countersRemove" -}}
SELECT set_config('lock_timeout', '10s', true);
{{template "countersDropTriggers" .}}
DROP FUNCTION IF EXISTS "{{.Schema}}"."{{.Prefix}}count_deliveries"();
DROP FUNCTION IF EXISTS "{{.Schema}}"."{{.Prefix}}count_history"();
DROP TABLE IF EXISTS {{.Counts}};
{{- end}}

-- Statistics from the counters: the same rows as statisticsCounts
-- (handler, status, count not in flight, count in flight, oldest due
-- not in flight), in one snapshot. Pending is the counted pending less
-- what is in flight (the lanes' ids, through the primary key); the
-- oldest due pending delivery of each handler comes from the due index,
-- in due order, skipping the ids in flight (a few hundred at most
-- before it meets one that is not). $1 is now.
{{define "statisticsCounted" -}}
WITH {{template "statisticsFlying" .}}, fly AS MATERIALIZED (
	SELECT d.handler, count(*) AS n FROM flying f JOIN {{.Deliveries}} d ON d.id = f.id WHERE d.status = 'pending' GROUP BY 1
), c AS MATERIALIZED (
	SELECT handler, status, sum(n)::bigint AS n FROM {{.Counts}} GROUP BY 1, 2 HAVING sum(n) <> 0
)
SELECT c.handler, CASE c.status WHEN 'history' THEN 'completed' ELSE c.status END,
	c.n - coalesce(fl.n, 0), coalesce(fl.n, 0),
	CASE WHEN c.status = 'pending' THEN (
		SELECT d.available_at FROM {{.Deliveries}} d
		WHERE d.handler = c.handler AND d.status = 'pending' AND d.available_at <= $1
			AND d.id NOT IN (SELECT f.id FROM flying f)
		ORDER BY d.handler, d.available_at LIMIT 1) END
FROM c LEFT JOIN fly fl ON fl.handler = c.handler AND c.status = 'pending'
{{- end}}
