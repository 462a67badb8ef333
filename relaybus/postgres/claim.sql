-- Claims: the statements of DeliveryClaim's round trips (claim.go), in
-- the order a round trip runs them. Part of the store's one template set:
-- see sql.go.

-- The first statement of every claim round trip: the
-- transaction-local settings through which the round trip's later
-- statements learn what the earlier ones did: relaybus.claimed, how
-- many deliveries the claim has so far ($1; the claim's limit once it
-- holds a suspect, which is claimed alone), relaybus.taken, the lanes
-- taken by claimTake, and relaybus.own, the lanes claimLock locked.
--
-- The claim commits synchronously (the server's synchronous_commit,
-- on by default): a lease token is returned only once the write that
-- issued it is durable. A claim committed without waiting for its flush
-- is lost when the database crashes within the WAL writer's delay: the
-- lane comes back at its previous epoch, and the next take rebuilds the
-- identical token lane:epoch:claims for another holder (or the same
-- holder's next claim returns the same delivery under the same token),
-- so the stale holder's completion would be accepted and the key's next
-- delivery handed out while the first still ran (TestDatabaseCrashAfterAClaim).
-- A round trip that issued no token (it only locked
-- its lanes, handed drained ones back or charged a takeover's lost
-- deliveries) ends with claimAsync, which turns the flush wait off:
-- losing such a commit loses no token.
--
-- It also fixes how the round trip's statements are planned, whatever
-- the statistics say (both settings transaction-local, like the rest):
-- enable_seqscan off, so that a plan made while a table was small (a
-- statement cache keeps the plan it made at its sixth execution, and an
-- ANALYZE of an empty queue says the same) does not scan a table that has
-- grown since, and plan_cache_mode force_generic_plan, so that no
-- statement is planned again at every execution (the completion, given
-- arrays of a different length each time, was: 0.25 ms of planning for
-- 0.1 ms of execution). TestPlans checks the generic plans these give,
-- on tables that were never analyzed, and TestPlansAfterAnEmptyAnalyze
-- on tables analyzed while empty.
{{define "claimPrelude" -}}
SELECT set_config('relaybus.claimed', ($1::int)::text, true), set_config('relaybus.taken', '{}', true),
	set_config('relaybus.own', '{}', true), {{template "planSettings"}}
{{- end}}

-- The planner settings of the store's hot statements, transaction-local
-- (see claimPrelude).
{{define "planSettings" -}}
set_config('enable_seqscan', 'off', true), set_config('plan_cache_mode', 'force_generic_plan', true)
{{- end}}

-- The last statement of a claim round trip: synchronous_commit off for
-- this transaction when it claimed nothing ($1 is relaybus.claimed at
-- its start; see claimPrelude). Otherwise the setting is left as the
-- server or session has it.
{{define "claimAsync" -}}
SELECT CASE WHEN coalesce(nullif(current_setting('relaybus.claimed', true), ''), '0')::int <= $1
	THEN set_config('synchronous_commit', 'off', true) END
{{- end}}

-- The claim's count so far (see claimPrelude), read back at the end of
-- a busy caller's round trip.
{{define "claimCount" -}}
SELECT coalesce(nullif(current_setting('relaybus.claimed', true), ''), '0')::int
{{- end}}

-- Lock the lanes a claim from held lanes will look at, in lane order,
-- in a statement of its own before the claim (both in one implicit
-- transaction, one round trip): under READ COMMITTED a statement that
-- waits for a row lock re-reads the locked row but keeps its older
-- snapshot of every other row, so a claim that waited for the
-- holder's own reschedule of a lane would see the lane without the
-- delivery and the delivery still with its old claims counter, and
-- hand out a token that is stale from birth. Locked first, the claim's
-- snapshot is taken after every writer of those lanes committed. The
-- lanes locked go to relaybus.own, so that the claim reads them through
-- the primary key instead of scanning the 256 pages again. $1 owner,
-- $2 holder, $3 now. It returns the lanes it locked.
--
-- claimLock reads every lane (a lane is a page of its own, and no index
-- names the holder, so that lane updates stay HOT: 256 pages, about
-- 0.3 ms a claim); claimLockLanes reads only the lanes of $4, through
-- the primary key, for a store instance that knows which lanes it may
-- hold (held.go): a superset of them, checked here like any other.
{{define "claimLock" -}}
SELECT set_config('relaybus.own', coalesce(array_agg(x.lane ORDER BY x.lane), '{}')::text, true),
	coalesce(array_agg(x.lane ORDER BY x.lane), '{}')::smallint[]
FROM (
	SELECT l.lane FROM {{.Lanes}} l
	WHERE l.lease_owner = $1 AND l.lease_holder = $2 AND l.lease_expires_at > $3
	ORDER BY l.lane
	FOR NO KEY UPDATE
) x
{{- end}}

{{define "claimLockLanes" -}}
SELECT set_config('relaybus.own', coalesce(array_agg(x.lane ORDER BY x.lane), '{}')::text, true),
	coalesce(array_agg(x.lane ORDER BY x.lane), '{}')::smallint[]
FROM (
	SELECT l.lane FROM {{.Lanes}} l
	WHERE l.lane = ANY ($4::smallint[])
		AND l.lease_owner = $1 AND l.lease_holder = $2 AND l.lease_expires_at > $3
	ORDER BY l.lane
	FOR NO KEY UPDATE
) x
{{- end}}

-- Claim from the lanes this (owner, holder) holds: one statement
-- (after claimLock, in the same round trip). $1 owner, $2 holder, $3
-- now, $4 handlers, $5 the claim's limit (less relaybus.claimed is
-- what this statement may add), $6 true to look only at the lanes
-- claimTake just took in this transaction (locked by it), $7 the new
-- lease expiry, $8 whether the caller is busy (has deliveries in
-- flight), $9 to $12 the store instance's ledger (ledger.go): per lane
-- ($9), the epoch ($10) and picks ($11) of the hold it saw and how many
-- of those picks are not finished yet ($12); $13 and $14 the claim's
-- key runs (driver.DeliveryClaimParams.KeyRuns): handlers, and the most
-- deliveries of one key each takes as a run.
--
--   own:     the lanes (claimLock's, or claimTake's), through the
--            primary key, locked in lane order, with the room left
--            in their quota (claimQuota less what they gave since
--            they were taken), and, where the ledger's hint names the
--            lane's epoch and picks, how many of its deliveries are
--            still in flight (known): the hint's count, less what a
--            completion carried by this claim deleted from the lane
--            earlier in the transaction (relaybus.completed, see
--            completedLanes), which the hint, taken before the round
--            trip, still counts. FOR NO KEY UPDATE does not conflict
--            with the FOR KEY SHARE of a transactional completion, so
--            a claim never waits for a handler's transaction.
--   heads:   per lane with room, the head of every (handler, key),
--            the whole row: a skip scan of the key index, one probe
--            per key, however long the key's backlog. Only a head may
--            run (the per-key rule), and only while nothing of its key
--            is in flight.
--   flying:  what is in flight in lanes that have heads, through the
--            primary key (a completion deletes the row and leaves the
--            id in in_flight): the keys it blocks. Lanes without keyed
--            work are not probed.
--   cand:    the oldest due unkeyed deliveries of each lane (an
--            ordered scan of the unkeyed index that stops at the limit
--            or at the lane's room) and the due heads, not in flight,
--            of the handlers, the whole rows; at most the room of each
--            lane; then the oldest of all. Suspects only while the
--            claim has nothing yet, or for a busy caller (which must
--            see whether a suspect is its oldest candidate).
--   pick:    when the oldest candidate is a suspect: that one alone
--            for a caller that is not busy, nothing for a busy one
--            (it must drain first: a suspect held beside other work
--            is charged for their crash, variant SUSPECT_BUSY);
--            otherwise the non-suspects.
--   runs:    for each keyed pick of a handler in $13 (the claim's key
--            runs, with their max in $14), the deliveries of its
--            (handler, key) after it in sequence order, up to max - 1
--            of them (a probe of the key index that reads no more),
--            cut at the first that is not due or is a suspect. A pick
--            is a head with nothing of its key in flight, so nothing
--            after it is in flight either. None when the pick is a
--            suspect (claimed alone).
--   extra:   the runs that start within their lane's room, whole (a
--            lane's quota is not a multiple of a run's length: cut
--            there, a hot key's every fourth batch of 20 would be one
--            of 4, so a run may take a lane past its quota: by at most
--            max - 2, and never by more than a quota, which keeps a
--            lane's in_flight within twice the quota), and within the
--            claim's limit, ordered by their head's (available_at,
--            id), then sequence: a run cut by the limit or by that cap
--            is a prefix.
--   picks:   pick and extra, what the claim returns and records.
--   rec:     write each lane that gave something: the picks appended
--            to in_flight (to what flying found still in flight where
--            it probed; elsewhere the ids of completed deliveries are
--            left there until the lane is handed back: a hold gives at
--            most twice claimQuota ids), its picks counted, a new
--            expiry; hand back a lane that gave nothing and has
--            nothing left in flight (epoch kept), so drained and
--            spent lanes are never probed again. What is left in flight
--            is known where the ledger's hint holds; elsewhere a
--            primary-key probe of each id of in_flight finds it, through
--            the index entries of every completed (deleted) one. A lane that only
--            saw completions is not written.
--
-- The final WHERE is a constant condition, which PostgreSQL evaluates
-- once before the first row (a one-time filter), however many rows
-- there are: it records the claim's new count in relaybus.claimed for
-- the statements after it, the limit once the claim holds a suspect
-- or a busy caller met one first, so that nothing more is taken. The deliveries are returned as cand read
-- them (same statement, same snapshot), not looked up again. No
-- delivery row is written and no lock taken on one.
{{define "claimOwn" -}}
WITH RECURSIVE own AS MATERIALIZED (
	SELECT l.lane, l.epoch, l.in_flight, greatest({{.ClaimQuota}} - l.picks, 0) AS room,
		(SELECT h.outstanding - (SELECT count(*) FROM unnest(coalesce(nullif(current_setting('relaybus.completed', true), ''), '{}')::smallint[]) AS c(lane)
				WHERE c.lane = l.lane)
			FROM unnest($9::smallint[], $10::bigint[], $11::int[], $12::int[]) AS h(lane, epoch, picks, outstanding)
			WHERE h.lane = l.lane AND h.epoch = l.epoch AND h.picks = l.picks LIMIT 1) AS known
	FROM {{.Lanes}} l
	WHERE l.lane = ANY (coalesce(nullif(current_setting(CASE WHEN $6 THEN 'relaybus.taken' ELSE 'relaybus.own' END, true), ''), '{}')::smallint[])
		AND l.lease_owner = $1 AND l.lease_holder = $2 AND l.lease_expires_at > $3
	ORDER BY l.lane
	FOR NO KEY UPDATE
), heads AS (
	SELECT o.lane, ''::text AS handler, ''::text AS key, NULL::{{.Deliveries}} AS r
	FROM own o
	WHERE o.room > 0
	UNION ALL
	SELECT h.lane, n.handler, n.key, n.r FROM heads h
	CROSS JOIN LATERAL (
		SELECT p.handler, p.key, p AS r FROM {{.Deliveries}} p
		WHERE p.lane = h.lane AND p.key IS NOT NULL AND p.status = 'pending'
			AND (p.handler, p.key) > (h.handler, h.key)
		ORDER BY p.handler, p.key, p.sequence
		LIMIT 1
	) n
), flying AS MATERIALIZED (
	SELECT o.lane, d.id, d.handler, d.key FROM own o
	JOIN {{.Deliveries}} d ON d.id = ANY (o.in_flight)
	WHERE d.status = 'pending'
		AND EXISTS (SELECT 1 FROM heads h WHERE h.lane = o.lane AND (h.r).id IS NOT NULL)
), cand AS MATERIALIZED (
	SELECT y.r, (y.r).id AS id, y.lane, (y.r).available_at AS available_at, (y.r).suspect AS suspect FROM (
		SELECT x.r, x.lane, x.room,
			row_number() OVER (PARTITION BY x.lane ORDER BY (x.r).available_at, (x.r).id) AS rn
		FROM (
			SELECT c.r, o.lane, o.room FROM own o
			CROSS JOIN LATERAL (
				SELECT d AS r FROM {{.Deliveries}} d
				WHERE d.lane = o.lane AND d.status = 'pending' AND d.key IS NULL AND d.available_at <= $3
					AND d.handler = ANY ($4::text[])
					AND d.id <> ALL (o.in_flight)
					AND (NOT d.suspect OR $8 OR coalesce(nullif(current_setting('relaybus.claimed', true), ''), '0')::int = 0)
				ORDER BY d.available_at, d.id
				LIMIT least(greatest($5 - coalesce(nullif(current_setting('relaybus.claimed', true), ''), '0')::int, 0), o.room)
			) c
			UNION ALL
			SELECT h.r, h.lane, o.room FROM heads h
			JOIN own o ON o.lane = h.lane
			WHERE (h.r).id IS NOT NULL AND (h.r).available_at <= $3 AND h.handler = ANY ($4::text[])
				AND (NOT (h.r).suspect OR $8 OR coalesce(nullif(current_setting('relaybus.claimed', true), ''), '0')::int = 0)
				-- NOT IN over a set without NULLs, so that it is one hashed
				-- subplan rather than an anti join the planner might nest.
				AND (h.lane, h.handler, h.key) NOT IN (
					SELECT f.lane, f.handler, f.key FROM flying f WHERE f.key IS NOT NULL)
		) x
	) y
	WHERE y.rn <= y.room
	ORDER BY (y.r).available_at, (y.r).id
	LIMIT greatest($5 - coalesce(nullif(current_setting('relaybus.claimed', true), ''), '0')::int, 0)
), first AS (
	SELECT c.id, c.suspect FROM cand c ORDER BY c.available_at, c.id LIMIT 1
), pick AS MATERIALIZED (
	SELECT c.r, c.id, c.lane FROM cand c
	WHERE CASE WHEN (SELECT suspect FROM first) THEN NOT $8::boolean AND c.id = (SELECT id FROM first)
		ELSE NOT c.suspect END
), runs AS MATERIALIZED (
	SELECT k.lane, (k.r).available_at AS head_at, k.id AS head_id, z.r, (z.r).id AS id, z.rank
	FROM pick k
	JOIN unnest($13::text[], $14::int[]) AS m(handler, max) ON m.handler = (k.r).handler
	CROSS JOIN LATERAL (
		SELECT y.r, y.rank FROM (
			SELECT s.r, row_number() OVER w AS rank,
				bool_and((s.r).available_at <= $3 AND NOT (s.r).suspect) OVER w AS ok
			FROM (
				SELECT d AS r FROM {{.Deliveries}} d
				WHERE d.lane = k.lane AND d.handler = (k.r).handler AND d.key = (k.r).key
					AND d.status = 'pending' AND d.sequence > (k.r).sequence
				ORDER BY d.handler, d.key, d.sequence
				LIMIT greatest(m.max - 1, 0)
			) s
			WINDOW w AS (ORDER BY (s.r).sequence ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
		) y
		WHERE y.ok
	) z
	WHERE (k.r).key IS NOT NULL AND NOT (k.r).suspect
), extra AS MATERIALIZED (
	SELECT e.r, e.id, e.lane FROM (
		SELECT u.r, u.id, u.lane, u.rank,
			row_number() OVER (PARTITION BY u.lane ORDER BY u.head_at, u.head_id, u.rank) AS lrn,
			row_number() OVER (ORDER BY u.head_at, u.head_id, u.rank) AS grn
		FROM runs u
	) e
	JOIN own o ON o.lane = e.lane
	CROSS JOIN LATERAL (SELECT o.room - (SELECT count(*) FROM pick k WHERE k.lane = e.lane) AS left) x
	WHERE e.lrn - e.rank + 1 <= x.left AND e.lrn <= x.left + {{.ClaimQuota}}
		AND e.grn <= $5 - coalesce(nullif(current_setting('relaybus.claimed', true), ''), '0')::int - (SELECT count(*) FROM pick)
), picks AS MATERIALIZED (
	SELECT k.r, k.id, k.lane FROM pick k
	UNION ALL
	SELECT x.r, x.id, x.lane FROM extra x
), next AS MATERIALIZED (
	SELECT o.lane, p.ids, coalesce(p.n, 0) AS picked,
		p.n IS NULL AND CASE WHEN o.known IS NOT NULL THEN o.known = 0 ELSE NOT EXISTS (
			SELECT 1 FROM {{.Deliveries}} d WHERE d.id = ANY (o.in_flight) AND d.status = 'pending') END AS release,
		-- What is still in flight, where flying probed it anyway.
		CASE WHEN EXISTS (SELECT 1 FROM heads h WHERE h.lane = o.lane AND (h.r).id IS NOT NULL)
			THEN ARRAY(SELECT f.id FROM flying f WHERE f.lane = o.lane) END AS live
	FROM own o
	LEFT JOIN (
		SELECT k.lane, array_agg(k.id ORDER BY k.id) AS ids, count(*)::int AS n FROM picks k GROUP BY k.lane
	) p ON p.lane = o.lane
), rec AS (
	UPDATE {{.Lanes}} l SET
		in_flight = CASE WHEN n.release THEN '{}' ELSE n.ids || coalesce(n.live, l.in_flight) END,
		picks = CASE WHEN n.release THEN 0 ELSE l.picks + n.picked END,
		lease_owner = CASE WHEN n.release THEN NULL ELSE l.lease_owner END,
		lease_holder = CASE WHEN n.release THEN NULL ELSE l.lease_holder END,
		lease_expires_at = CASE WHEN n.release THEN NULL ELSE $7::timestamptz END
	FROM next n
	WHERE l.lane = n.lane AND (n.release OR n.picked > 0)
)
SELECT {{template "deliveryColumns"}} FROM picks
JOIN own o ON o.lane = picks.lane
CROSS JOIN LATERAL (SELECT $1::text AS lease_owner, o.epoch, $7::timestamptz AS lease_expires_at) f
CROSS JOIN LATERAL (SELECT (picks.r).*) d
JOIN {{.Events}} e ON e.id = d.event_id
WHERE (SELECT set_config('relaybus.claimed', (CASE
	WHEN (SELECT suspect FROM first) AND ($8 OR EXISTS (SELECT 1 FROM pick)) THEN $5
	ELSE coalesce(nullif(current_setting('relaybus.claimed', true), ''), '0')::int + (SELECT count(*) FROM picks)::int END)::text, true)) IS NOT NULL
{{- end}}

-- laneDue is the condition of a take that lane r.lane has due work of
-- the handlers $4 at $3: a probe of each index.
{{define "laneDue" -}}
coalesce(
			(SELECT true FROM {{.Deliveries}} d
				WHERE d.lane = r.lane AND d.status = 'pending' AND d.key IS NULL AND d.available_at <= $3
					AND d.handler = ANY ($4::text[])
				ORDER BY d.available_at, d.id
				LIMIT 1),
			-- The key index's order: without it, LIMIT 1 let the planner
			-- prefer a sequential scan (measured: 0.6 ms and 73 pages
			-- per lane without keyed work, on an analyzed table of 4
			-- hot keys), which reads the whole table for every such
			-- lane.
			(SELECT true FROM {{.Deliveries}} d
				WHERE d.lane = r.lane AND d.status = 'pending' AND d.key IS NOT NULL AND d.available_at <= $3
					AND d.handler = ANY ($4::text[])
				ORDER BY d.handler, d.key, d.sequence
				LIMIT 1),
			false)
{{- end}}

-- Choose and lock up to $1 lanes, and no more than the claim still
-- needs ($5, the claim's limit, less relaybus.claimed: none when the
-- claim is full, holds a suspect, or is a busy caller's whose oldest
-- candidate was a suspect), that are free or whose lease expired and
-- that have due work of the handlers $4 at $3, walking the ring of
-- lanes from $6 (a position each store instance moves past the lanes
-- it took, so that successive takes go round every lane with work):
-- with the per-hold quota (claimQuota), that serves every busy lane in
-- turn, a bounded number of deliveries at a time. The walk stops as
-- soon as it has found enough lanes: one probe of the lane row and,
-- for a free lane, one of each index, per lane visited (cands is read
-- through a LIMIT, so its conditions are evaluated lane by lane, in
-- ring order). It skips lanes another transaction has locked (a claim
-- taking them, or a transactional completion's FOR KEY SHARE: a
-- takeover never waits for one and never overtakes it), and never one
-- of $2 (lanes this claim already took and handed back). The lanes
-- locked go to relaybus.want for claimWrite, the statement after it,
-- which takes them: it raises their epoch, so every write under an
-- older lease fails, and the lanes taken go to relaybus.taken for the
-- claimOwn after that. Taking an abandoned lane (expired, whatever it
-- has in flight) charges each delivery in its in_flight that still
-- exists one attempt, marks it a suspect, and buries it when that
-- spends its budget and it was a suspect already (one that was not
-- may only have run beside the delivery that crashed the process: its
-- next attempt, alone, decides; variant BURY_ANY). The charge raises
-- claims, so a completion of the old holder that commits after this
-- finds its fence broken, and one that commits first has deleted the
-- row, which is then not charged. The charged rows are locked in
-- physical order (ctid), the order in which a completion's TID scan
-- deletes them, so the two never wait on each other in a cycle.
{{define "claimTake" -}}
WITH RECURSIVE n AS MATERIALIZED (
	SELECT least($1, greatest($5 - coalesce(nullif(current_setting('relaybus.claimed', true), ''), '0')::int, 0)) AS n
), walk AS MATERIALIZED (
	-- The first claimWalk lanes of the ring from $6, lane by lane (read
	-- through the LIMIT below, the conditions are evaluated in ring
	-- order and only until enough lanes are found). Scalar subqueries
	-- with LIMIT 1, not EXISTS: the planner may turn an EXISTS into a
	-- hashed subplan that reads every pending delivery once.
	SELECT r.lane FROM (
		SELECT ((g.i + $6) % 256)::smallint AS lane FROM generate_series(0, {{.ClaimWalk}} - 1) AS g(i)
		WHERE (SELECT n FROM n) > 0
	) r
	WHERE r.lane <> ALL ($2::smallint[])
		AND (SELECT true FROM {{.Lanes}} l WHERE l.lane = r.lane AND (l.lease_expires_at IS NULL OR l.lease_expires_at <= $3))
		AND {{template "laneDue" .}}
	LIMIT (SELECT n FROM n) + 4
), unkeyed AS (
	-- Past the walk, only the lanes that have pending work: a skip scan
	-- of each index, one probe per such lane, evaluated only when the
	-- walk fell short (a shallow queue: few lanes have work).
	(SELECT d.lane FROM {{.Deliveries}} d WHERE d.status = 'pending' AND d.key IS NULL ORDER BY d.lane LIMIT 1)
	UNION ALL
	SELECT n.lane FROM unkeyed u CROSS JOIN LATERAL (
		SELECT d.lane FROM {{.Deliveries}} d
		WHERE d.status = 'pending' AND d.key IS NULL AND d.lane > u.lane
		ORDER BY d.lane LIMIT 1
	) n
), keyed AS (
	(SELECT d.lane FROM {{.Deliveries}} d WHERE d.status = 'pending' AND d.key IS NOT NULL ORDER BY d.lane LIMIT 1)
	UNION ALL
	SELECT n.lane FROM keyed k CROSS JOIN LATERAL (
		SELECT d.lane FROM {{.Deliveries}} d
		WHERE d.status = 'pending' AND d.key IS NOT NULL AND d.lane > k.lane
		ORDER BY d.lane LIMIT 1
	) n
), rest AS MATERIALIZED (
	SELECT r.lane FROM (
		SELECT b.lane FROM (SELECT lane FROM unkeyed UNION SELECT lane FROM keyed) b
		WHERE (SELECT count(*) FROM walk) < (SELECT n FROM n) + 4
			AND (b.lane - $6 + 256) % 256 >= {{.ClaimWalk}}
		ORDER BY (b.lane - $6 + 256) % 256
	) r
	WHERE r.lane <> ALL ($2::smallint[])
		AND (SELECT true FROM {{.Lanes}} l WHERE l.lane = r.lane AND (l.lease_expires_at IS NULL OR l.lease_expires_at <= $3))
		AND {{template "laneDue" .}}
	LIMIT (SELECT n FROM n) + 4 - (SELECT count(*) FROM walk)
), cands AS MATERIALIZED (
	SELECT lane FROM walk UNION ALL SELECT lane FROM rest
), want AS MATERIALIZED (
	SELECT l.lane FROM {{.Lanes}} l
	WHERE l.lane = ANY (ARRAY(SELECT lane FROM cands))
		AND (l.lease_expires_at IS NULL OR l.lease_expires_at <= $3)
	ORDER BY array_position(ARRAY(SELECT lane FROM cands), l.lane)
	LIMIT (SELECT n FROM n)
	FOR UPDATE OF l SKIP LOCKED
)
SELECT set_config('relaybus.want', coalesce((SELECT array_agg(lane ORDER BY lane) FROM want), '{}')::text, true)
{{- end}}

-- The take's writes, the statement after claimTake (same round trip,
-- same transaction): raise the epoch of the lanes claimTake locked
-- (relaybus.want), lease them, and charge what the abandoned ones had
-- in flight. A statement of its own, so that it reads the lanes at the
-- versions claimTake locked: when a lane changed after claimTake's
-- snapshot, its lock followed the row to its newest version, while an
-- UPDATE in the same statement would read the snapshot's version again
-- and queue for that version's tuple lock, which a claimLock waiting on
-- the row holds while it waits for us: a deadlock on one row (see
-- lockLane in lease.sql; TestNoDeadlockUnderMixedLoad). $1 owner, $2
-- holder, $3 now,
-- $4 the new lease expiry, $5 the last error of a delivery buried by
-- the charge.
{{define "claimWrite" -}}
WITH want AS MATERIALIZED (
	SELECT l.lane, l.in_flight FROM {{.Lanes}} l
	WHERE l.lane = ANY (coalesce(nullif(current_setting('relaybus.want', true), ''), '{}')::smallint[])
), taken AS (
	UPDATE {{.Lanes}} l SET epoch = l.epoch + 1, lease_owner = $1, lease_holder = $2,
		lease_expires_at = $4, in_flight = '{}', picks = 0
	FROM want w WHERE l.lane = w.lane
	RETURNING l.lane
), lost AS MATERIALIZED (
	SELECT d.id FROM {{.Deliveries}} d
	WHERE d.id = ANY (ARRAY(SELECT unnest(w.in_flight) FROM want w)) AND d.status = 'pending'
	ORDER BY d.ctid
	FOR NO KEY UPDATE
), charged AS (
	UPDATE {{.Deliveries}} d SET
		attempts = d.attempts + 1,
		claims = d.claims + 1,
		suspect = true,
		-- d.suspect is the value before this update: only a delivery
		-- that was a suspect already is buried.
		status = CASE WHEN d.suspect AND d.attempts + 1 >= d.max_attempts THEN 'dead' ELSE 'pending' END,
		last_error = CASE WHEN d.suspect AND d.attempts + 1 >= d.max_attempts THEN $5 ELSE d.last_error END,
		updated_at = $3
	FROM lost WHERE d.id = lost.id
	RETURNING d.id
)
SELECT ARRAY(SELECT lane FROM taken ORDER BY lane), (SELECT count(*) FROM charged),
	set_config('relaybus.taken', ARRAY(SELECT lane FROM taken ORDER BY lane)::text, true)
{{- end}}
