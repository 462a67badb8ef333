-- Completions: the deletes of deliveries whose handler succeeded, under
-- their fence. Part of the store's one template set: see sql.go.

-- The planner settings of a completion in a transaction of the store's
-- own (see planSettings in claim.sql), sent before it in the same round
-- trip.
{{define "completePlan" -}}
SELECT {{template "planSettings"}}
{{- end}}

-- fenced is the CTE of a plain completion that finds the rows whose fence
-- holds: per lease ($1 ids, $2 lanes, $3 claims, $4 epochs), a lookup of
-- the delivery by primary key (a lateral subquery with LIMIT 1, which the
-- planner can only run as a parameterized index probe, whatever the
-- table's statistics) checked against the token: its lane and claims, and
-- the lane's epoch and in_flight. The DELETE then goes by the rows'
-- physical addresses (a TID scan, in address order) and checks the
-- claims again, which every concurrent write of an in-flight delivery
-- raises. Not a join (DELETE ... USING the leases or the lanes): that
-- leaves the statement to the planner's estimates, and on a table never
-- analyzed it chooses a sequential scan of every delivery for a batch of
-- 200 (or, with lanes on the outer side of a nested loop, repeats the id
-- scan per lane).
--
-- The lanes of the leases are read once each (fenced_lanes: a probe of
-- the primary key per distinct lane, the index scan deduplicating $2),
-- not once per lease: a batch of 100 comes from a few lanes, and a probe
-- per lease read each lane again for every delivery of it, and again for
-- the epoch the completion returns.
{{define "fenced" -}}
fenced_lanes AS MATERIALIZED (
	SELECT l.lane, l.epoch, l.in_flight FROM {{.Lanes}} l WHERE l.lane = ANY ($2::smallint[])
), fenced AS MATERIALIZED (
	SELECT x.ctid, u.id, u.claims FROM unnest($1::bigint[], $2::smallint[], $3::bigint[], $4::bigint[])
		AS u(id, lane, claims, epoch)
	CROSS JOIN LATERAL (
		SELECT d.ctid FROM {{.Deliveries}} d
		WHERE d.id = u.id AND d.lane = u.lane AND d.claims = u.claims AND d.status = 'pending'
			AND EXISTS (SELECT 1 FROM fenced_lanes l WHERE l.lane = u.lane AND l.epoch = u.epoch AND u.id = ANY (l.in_flight))
		LIMIT 1
	) x
)
{{- end}}

-- deleteFenced is the DELETE of the fenced rows (see fenced). The claims
-- check is for a row updated after the lookup's snapshot: the DELETE then
-- re-evaluates its conditions on the newest version, where the claims
-- have moved (a TID scan does not re-check the address). It is written
-- NOT (... NOT IN ...), which is IN for a set without NULLs, so that it
-- stays one hashed subplan: as IN the planner makes it a semi join and,
-- trusting a CTE's row estimate, nests it (200 x 200 comparisons for a
-- batch of 200).
{{define "deleteFenced" -}}
DELETE FROM {{.Deliveries}} d
WHERE d.ctid = ANY (ARRAY(SELECT f.ctid FROM fenced f))
	AND NOT ((d.id, d.claims) NOT IN (SELECT f.id, f.claims FROM fenced f))
	AND d.status = 'pending'
{{- end}}

-- historyInsert copies deleted rows (the CTE "gone") into the history.
{{define "historyInsert" -}}
INSERT INTO {{.History}} (id, event_id, handler, event_type, key, sequence, attempts, max_attempts,
	available_at, last_error, created_at, completed_at)
SELECT id, event_id, handler, event_type, key, sequence, attempts + 1, max_attempts,
	available_at, last_error, created_at, $5
FROM gone
{{- end}}

-- completedLanes is the final WHERE of a completion: a constant
-- condition (evaluated once, before the first row, whether or not any
-- row was deleted) that records the lane of each deleted row in the
-- transaction-local relaybus.completed. A claim that carries the
-- completion (DeliveryCompleteClaim) runs claimOwn after it in the same
-- transaction, and claimOwn subtracts these from the store instance's
-- hint of what a lane has in flight (ledger.go): the hint was taken
-- before the round trip, when they were still in flight. Elsewhere the
-- setting is read by nothing and ends with the transaction.
{{define "completedLanes" -}}
WHERE (SELECT set_config('relaybus.completed', coalesce((SELECT array_agg(g.lane) FROM gone g), '{}')::text, true)) IS NOT NULL
{{- end}}

-- Complete: delete the rows whose fence holds, in one statement; $1
-- ids, $2 lanes, $3 claims, $4 epochs (one entry per lease), $5 now.
-- The lane rows are read, not written or locked. It returns the token
-- each deleted row matched, and records their lanes (completedLanes).
{{define "completeMany" -}}
WITH {{template "fenced" .}}, gone AS (
	{{template "deleteFenced" .}}
	RETURNING d.id, d.lane, d.claims
)
SELECT g.id, g.lane, g.claims, (SELECT l.epoch FROM fenced_lanes l WHERE l.lane = g.lane) FROM gone g
{{template "completedLanes" .}}
{{- end}}

-- completeMany, with Options.CompletionHistory: the deleted rows are
-- copied into the history, completed at $5.
{{define "completeManyHistory" -}}
WITH {{template "fenced" .}}, gone AS (
	{{template "deleteFenced" .}}
	RETURNING d.*
), kept AS (
	{{template "historyInsert" .}}
)
SELECT g.id, g.lane, g.claims, (SELECT l.epoch FROM fenced_lanes l WHERE l.lane = g.lane) FROM gone g
{{template "completedLanes" .}}
{{- end}}

-- Complete in the caller's transaction: FOR KEY SHARE on the lane
-- (the weakest lock that conflicts with a takeover's FOR UPDATE, and
-- not with the owner's claims and renewals), then the fenced delete.
-- $1 id, $2 lane, $3 claims, $4 epoch, $5 now.
{{define "completeTx" -}}
WITH l AS (
	SELECT l.lane FROM {{.Lanes}} l WHERE l.lane = $2 AND l.epoch = $4 AND $1 = ANY (l.in_flight)
	FOR KEY SHARE
)
DELETE FROM {{.Deliveries}} d USING l
WHERE d.id = $1 AND d.lane = l.lane AND d.claims = $3 AND d.status = 'pending'
RETURNING d.id
{{- end}}

-- completeTx, with Options.CompletionHistory: the deleted row is copied
-- into the history, completed at $5.
{{define "completeTxHistory" -}}
WITH l AS (
	SELECT l.lane FROM {{.Lanes}} l WHERE l.lane = $2 AND l.epoch = $4 AND $1 = ANY (l.in_flight)
	FOR KEY SHARE
), gone AS (
	DELETE FROM {{.Deliveries}} d USING l
	WHERE d.id = $1 AND d.lane = l.lane AND d.claims = $3 AND d.status = 'pending'
	RETURNING d.*
), kept AS (
	{{template "historyInsert" .}}
)
SELECT id FROM gone
{{- end}}
