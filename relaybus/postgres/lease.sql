-- Leases: renewal, the lane locks taken before a lane is written, the
-- writes that end a claim without deleting its delivery, and relinquish.
-- Part of the store's one template set: see sql.go.

-- The lane locks taken in a statement of their own, before a
-- statement that writes those lanes (same round trip, same implicit
-- transaction). Under READ COMMITTED, a statement that locks a row in
-- one part (FOR NO KEY UPDATE) and updates it in another reads it
-- twice: when the row changed after the statement's snapshot, the
-- lock follows it to its newest version (n+1), but the UPDATE finds
-- the snapshot's version (n) and queues for the tuple lock of version
-- n, which a claim waiting on the row holds while it waits for
-- version n+1: a deadlock on one row, within one store instance
-- (claimLock against reschedule, release or renewal;
-- TestNoDeadlockUnderMixedLoad). Locked first, the writing statement's
-- snapshot is taken after every other writer of those rows committed,
-- and it reads the rows at the versions it holds.
--
-- lockLane: the lane of one lease, at the token's epoch ($1 lane, $2
-- epoch): the lane of a stale lease is not locked.
{{define "lockLane" -}}
SELECT l.lane FROM {{.Lanes}} l WHERE l.lane = $1 AND l.epoch = $2 FOR NO KEY UPDATE
{{- end}}

-- lockHeld: the lanes of $3 that (owner $1, holder $2) hold, in lane
-- order (the order of claimLock).
{{define "lockHeld" -}}
SELECT l.lane FROM {{.Lanes}} l
WHERE l.lane = ANY ($3::smallint[]) AND l.lease_owner = $1 AND l.lease_holder = $2
ORDER BY l.lane
FOR NO KEY UPDATE
{{- end}}

-- lockOwned: every lane (owner $1, holder $2) holds, expired or not,
-- in lane order; the lanes locked go to relaybus.relinquish, the only
-- lanes relinquish then writes. Not the lanes the writing statement's
-- own snapshot finds held: a claim of the same store instance may take
-- a lane while this statement waits for another lane's lock, and a
-- renewal of the new lease may lock that lane and queue behind us for
-- a lane we hold; a relinquish that then locked the new lane would wait
-- for the renewal in a cycle (a lane locked out of lane order;
-- TestRelinquishAgainstARenewalOfALaneTakenMeanwhile). A lane taken
-- after this statement began is the claim's: the relinquish comes
-- before it.
{{define "lockOwned" -}}
SELECT set_config('relaybus.relinquish', coalesce(array_agg(x.lane ORDER BY x.lane), '{}')::text, true)
FROM (
	SELECT l.lane FROM {{.Lanes}} l
	WHERE l.lease_owner = $1 AND l.lease_holder = $2
	ORDER BY l.lane
	FOR NO KEY UPDATE
) x
{{- end}}

-- Renew: move the expiry of the lanes that hold current leases of
-- (owner, holder): $1 owner, $2 holder, $3..$6 the leases (ids, lanes,
-- epochs, claims), $7 the new expiry. A lease is current when its lane
-- has the token's epoch, is held by (owner, holder) and lists the
-- delivery, and the delivery's claims are the token's; a lane moves
-- only for a current lease. The lanes are locked in lane order (a
-- claim locks its lanes in the same order, so the two never wait on
-- each other in a cycle; the lanes are locked already, by lockHeld in
-- the same round trip), and the lock re-checks epoch and holder. The
-- deliveries are read, never locked or written: a renewal cannot wait
-- for a completion. It returns the ids of the leases renewed.
{{define "extend" -}}
WITH t AS (
	SELECT * FROM unnest($3::bigint[], $4::smallint[], $5::bigint[], $6::bigint[]) AS t(id, lane, epoch, claims)
), cur AS MATERIALIZED (
	SELECT t.id, t.lane, t.epoch FROM t
	JOIN {{.Lanes}} l ON l.lane = t.lane AND l.epoch = t.epoch AND t.id = ANY (l.in_flight)
	JOIN {{.Deliveries}} d ON d.id = t.id AND d.lane = t.lane AND d.claims = t.claims AND d.status = 'pending'
	WHERE l.lease_owner = $1 AND l.lease_holder = $2
), lk AS (
	SELECT l.lane FROM {{.Lanes}} l
	WHERE (l.lane, l.epoch) IN (SELECT lane, epoch FROM cur) AND l.lease_owner = $1 AND l.lease_holder = $2
	ORDER BY l.lane
	FOR NO KEY UPDATE
), moved AS (
	UPDATE {{.Lanes}} l SET lease_expires_at = $7 FROM lk WHERE l.lane = lk.lane
	RETURNING l.lane
)
SELECT cur.id FROM cur JOIN moved ON moved.lane = cur.lane
{{- end}}

-- endClaim: the writes that end a claim without deleting the delivery
-- (after lockLane, in the same round trip): lock the lane (lanes before
-- deliveries; already held since lockLane), check the fence, update the
-- delivery and raise its claims, and take it out of in_flight. $1 id,
-- $2 lane, $3 claims, $4 epoch, $5 now; .Set adds the changes of
-- reschedule, bury or release.
{{define "endClaim" -}}
WITH l AS (
	SELECT l.lane FROM {{.Lanes}} l WHERE l.lane = $2 AND l.epoch = $4 AND $1 = ANY (l.in_flight)
	FOR NO KEY UPDATE
), ended AS (
	UPDATE {{.Deliveries}} d SET claims = d.claims + 1, updated_at = $5, {{.Set}}
	FROM l WHERE d.id = $1 AND d.lane = l.lane AND d.claims = $3 AND d.status = 'pending'
	RETURNING d.id
), u AS (
	UPDATE {{.Lanes}} x SET in_flight = array_remove(x.in_flight, $1)
	FROM ended WHERE x.lane = $2
)
SELECT count(*) FROM ended
{{- end}}

-- A failed attempt, charged here, when it ends: due again at $6, last
-- error $7.
{{define "reschedule"}}{{template "endClaim" .Ending "attempts = d.attempts + 1, suspect = false, available_at = $6, last_error = $7"}}{{end}}

-- A failed last attempt, charged here: dead, last error $6.
{{define "bury"}}{{template "endClaim" .Ending "attempts = d.attempts + 1, suspect = false, status = 'dead', last_error = $6"}}{{end}}

-- A graceful release spends no attempt; a suspect stays one. $6, when
-- not null, is a later time it is due at (a batch held back to fill).
{{define "release"}}{{template "endClaim" .Ending "available_at = greatest(d.available_at, coalesce($6::timestamptz, d.available_at))"}}{{end}}

-- Relinquish: release what (owner, holder) has in flight, expired
-- leases included (nobody took them over, so those attempts did not
-- end in a crash), and hand every such lane back: the lanes lockOwned
-- locked in the same round trip (relaybus.relinquish), in lane order,
-- then the deliveries in physical order (as a completion).
{{define "relinquish" -}}
WITH l AS MATERIALIZED (
	SELECT l.lane, l.in_flight FROM {{.Lanes}} l
	WHERE l.lane = ANY (coalesce(nullif(current_setting('relaybus.relinquish', true), ''), '{}')::smallint[])
		AND l.lease_owner = $1 AND l.lease_holder = $2
	ORDER BY l.lane
	FOR NO KEY UPDATE
), x AS MATERIALIZED (
	SELECT d.id FROM {{.Deliveries}} d
	WHERE d.id = ANY (ARRAY(SELECT unnest(l.in_flight) FROM l)) AND d.status = 'pending'
	ORDER BY d.ctid
	FOR NO KEY UPDATE
), released AS (
	UPDATE {{.Deliveries}} d SET claims = d.claims + 1, updated_at = $3
	FROM x WHERE d.id = x.id
	RETURNING d.id
), u AS (
	UPDATE {{.Lanes}} y SET lease_owner = NULL, lease_holder = NULL, lease_expires_at = NULL, in_flight = '{}', picks = 0
	FROM l WHERE y.lane = l.lane
)
SELECT count(*) FROM released
{{- end}}
