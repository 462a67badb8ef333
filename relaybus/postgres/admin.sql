-- Admin: requeue, statistics, purge, and Setup's lock. Part of the
-- store's one template set: see sql.go.

{{define "requeue" -}}
UPDATE {{.Deliveries}} SET status = 'pending', attempts = 0, claims = claims + 1, suspect = false,
	available_at = $2, updated_at = $2
WHERE id = $1 AND status = 'dead'
{{- end}}

-- Why a requeue found nothing: the delivery's status, or completed
-- when only the history has it.
{{define "requeueStatus" -}}
SELECT status FROM {{.Deliveries}} WHERE id = $1
UNION ALL
SELECT 'completed' FROM {{.History}} WHERE id = $1
{{- end}}

-- The first statement of Statistics' batch (one implicit transaction):
-- no parallel workers for the statement after it (see Statistics).
{{define "statisticsSerial" -}}
SELECT set_config('max_parallel_workers_per_gather', '0', true)
{{- end}}

-- The ids in flight: those the lanes with an owner list (a completion
-- leaves its id there until the lane is handed back). Shared by both
-- Statistics statements (statisticsCounts, counters.sql's
-- statisticsCounted).
{{define "statisticsFlying" -}}
flying AS MATERIALIZED (
	SELECT DISTINCT f.id FROM {{.Lanes}} l CROSS JOIN LATERAL unnest(l.in_flight) AS f(id) WHERE l.lease_owner IS NOT NULL
)
{{- end}}

-- Statistics (admin.go): exact counts and the oldest due delivery, in
-- one statement, read-only (no statement of the claim or completion
-- path writes anything for it). A pending delivery that is in flight
-- counts as processing, and is not waiting; in flight is what the lanes
-- with an owner list (a completion leaves its id there until the lane
-- is handed back: a listed id that is gone matches no row).
--
-- One sequential scan of the deliveries table, grouped by the stored
-- handler and status, each pending row probing the hash of the ids in
-- flight; $1 is now. No index holds the handler of an unkeyed delivery,
-- and none orders the keyed ones by due time, so an exact answer reads
-- every row: the scan is the floor (docs/operations.md, "What
-- Statistics costs", has the figures; counters.sql's statisticsCounted
-- is what Statistics runs instead when statistics counters are on).
{{define "statisticsCounts" -}}
WITH {{template "statisticsFlying" .}}
SELECT d.handler, d.status,
	count(*) FILTER (WHERE fl.id IS NULL),
	count(*) FILTER (WHERE fl.id IS NOT NULL),
	min(d.available_at) FILTER (WHERE fl.id IS NULL AND d.status = 'pending' AND d.available_at <= $1)
FROM {{.Deliveries}} d
LEFT JOIN flying fl ON fl.id = d.id AND d.status = 'pending'
GROUP BY d.handler, d.status
UNION ALL
SELECT handler, 'completed', count(*), 0, NULL FROM {{.History}} GROUP BY 1
{{- end}}

-- Purge, in id order and bounded by $2 (NULL: no bound). Dead rows
-- through their index; completed rows exist only as 0.1.0 left them
-- and in the history. No index covers the 0.1.0 rows (this store never
-- writes one), so their purge is a scan of the table.
{{define "purgeDead" -}}
WITH victims AS (
	SELECT id FROM {{.Deliveries}} WHERE status = 'dead' AND updated_at < $1 ORDER BY id LIMIT $2
)
DELETE FROM {{.Deliveries}} d USING victims WHERE d.id = victims.id
{{- end}}

{{define "purgeCompleted" -}}
WITH victims AS (
	SELECT id FROM {{.Deliveries}} WHERE status = 'completed' AND completed_at < $1 ORDER BY id LIMIT $2
)
DELETE FROM {{.Deliveries}} d USING victims WHERE d.id = victims.id
{{- end}}

{{define "purgeHistory" -}}
WITH victims AS (
	SELECT id FROM {{.History}} WHERE completed_at < $1 ORDER BY id LIMIT $2
)
DELETE FROM {{.History}} h USING victims WHERE h.id = victims.id
{{- end}}

-- Events without any delivery or history row left, once they are
-- older than the completed cutoff (until then a republished event
-- finds them and its handlers; Purge runs it only when completed
-- deliveries have a retention). There is no index on events.created_at: this
-- scans the events, as befits a retention job rather than a hot path.
{{define "purgeEvents" -}}
DELETE FROM {{.Events}} AS e
WHERE e.created_at < $1
	AND NOT EXISTS (SELECT 1 FROM {{.Deliveries}} d WHERE d.event_id = e.id)
	AND NOT EXISTS (SELECT 1 FROM {{.History}} h WHERE h.event_id = e.id)
{{- end}}

-- Setup's advisory lock ($1 setupLockKey).
{{define "setupLock" -}}
SELECT pg_advisory_xact_lock($1)
{{- end}}
