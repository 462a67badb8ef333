-- Publish: the statements of EventPublishTx and EventPublish
-- (publish.go), in the order they are sent. Part of the store's one
-- template set: see sql.go.

-- A publish is two statements (after publishPlan or publishPlanOwn,
-- which set the planner settings, and before publishRestore in the
-- caller's transaction), sent together in one round trip (one pipelined
-- batch: in the caller's transaction, or in the implicit
-- transaction of the batch for EventPublish), the second using nothing
-- the client learns from the first. publishInsert inserts the events that
-- do not exist yet and the deliveries of the new unkeyed ones;
-- publishNumber, whose snapshot sees what publishInsert wrote and every
-- event another transaction committed meanwhile, numbers the new keyed
-- events and adds what republished events lack. A keyed event is
-- inserted with sequence -1 and no handlers, the mark that it is new:
-- only its own transaction can see it before publishNumber gives it its
-- sequence, in the same round trip, so a republished event never
-- consumes a sequence number. A call with no keyed event needs no
-- numbering, and its second statement only when an event of it existed
-- (publishStale, the part of publishNumber such a call can use: the
-- republished events' missing deliveries). It sends publishInsert alone
-- (publishInsertAlone in the store's own transaction, which fails when an
-- event existed), and publishStale after it only when an event existed
-- (publish.go's run). A call of one event sends publishInsertOne (or
-- publishInsertOneAlone) in place of publishInsert (or
-- publishInsertAlone): the same writes, its columns as scalars.

-- The planner settings of a publish (see planSettings in claim.sql),
-- sent before its statements in the same round trip: enable_seqscan off
-- for the statements and for the foreign-key checks of the deliveries
-- they insert (PostgreSQL plans those once per connection, and a plan
-- made while events was small scanned every event for each delivery as
-- the table grew: 0.2 ms a delivery at 4,000 events, measured). In the
-- caller's transaction the values it had are kept in relaybus.plan_*
-- and put back by publishRestore, the batch's last statement, so that
-- the caller's own statements after the publish are planned as before.
{{define "publishPlan" -}}
SELECT set_config('relaybus.plan_seqscan', current_setting('enable_seqscan'), true),
	set_config('relaybus.plan_cache', current_setting('plan_cache_mode'), true),
	{{template "planSettings"}}
{{- end}}

-- The planner settings of a publish in a transaction of the store's own
-- (EventPublish): publishPlan without keeping the values it had, which
-- nothing after the publish's statements would read (the implicit
-- transaction ends with the batch).
{{define "publishPlanOwn" -}}
SELECT {{template "planSettings"}}
{{- end}}

{{define "publishRestore" -}}
SELECT set_config('enable_seqscan', current_setting('relaybus.plan_seqscan'), true),
	set_config('plan_cache_mode', current_setting('relaybus.plan_cache'), true)
{{- end}}

-- Publish, statement 1: the events that do not exist yet, in id order
-- (two publishers of overlapping ids wait for each other in one order,
-- never in a cycle), and the deliveries of the unkeyed ones. $7 is each
-- event's handlers (a JSON array of names), $8 its lane for its own key,
-- $13 when its deliveries are due (the publish's time, or its later
-- Event.DeliverAt); $9 to $11 are the deliveries of the unkeyed events. A new event has no
-- delivery yet, so the delivery insert needs no ON CONFLICT (whose
-- speculative insertion costs a WAL record per row). Returns the ids
-- inserted and the deliveries.
{{define "publishInsert" -}}
{{template "publishInsertWrites" .}}
SELECT ARRAY(SELECT id FROM ins), (SELECT count(*) FROM dl)
{{- end}}

-- Publish, statement 1 alone, for a call with no keyed event in a
-- transaction of the store's own (EventPublish): publishInsert, which
-- fails the statement, and so the whole implicit transaction, when an
-- event of the call was not inserted (it existed, or a concurrent
-- publish of its id committed while the insert waited for it). A call of
-- new events is then this one statement: nothing is left for
-- publishStale to do. One that fails so is sent again whole, with
-- publishStale (publish.go: errEventExisted). The error is a failed cast
-- of a text that names it, made of a count the statement reads, so that
-- the planner cannot fold it into a failure of every call.
{{define "publishInsertAlone" -}}
{{template "publishInsertWrites" .}}
SELECT ARRAY(SELECT id FROM ins), (SELECT count(*) FROM dl),
	CASE WHEN (SELECT count(*) FROM ins) < cardinality($1::text[])
		THEN ('relaybus: publish: an event of the call exists (' || (SELECT count(*) FROM ins) || ' inserted)')::int
	END
{{- end}}

-- Publish, statement 1 of a call of one event, in place of
-- publishInsert (same results): the event's columns as scalar
-- parameters ($1 to $6; $7 its handlers, $8 its lane, $9 when its
-- deliveries are due) and its deliveries' max attempts ($10, in the
-- order of $7), $11 the publish's time. The same writes without the
-- unnest of thirteen arrays and the joins that match deliveries to
-- their events: a call of one new unkeyed event took about a third less
-- time with synchronous_commit off and a fifth less with it on
-- (BenchmarkPublishOwn, BENCHMARKS.md). A keyed event is inserted with
-- sequence -1 and no handlers, and gets its deliveries from
-- publishNumber, as in publishInsert.
{{define "publishInsertOne" -}}
{{template "publishInsertOneWrites" .}}
SELECT ARRAY(SELECT id FROM ins), (SELECT count(*) FROM dl)
{{- end}}

-- publishInsertOne for a call of one unkeyed event in a transaction of
-- the store's own: it fails as publishInsertAlone does when the event
-- was not inserted.
{{define "publishInsertOneAlone" -}}
{{template "publishInsertOneWrites" .}}
SELECT ARRAY(SELECT id FROM ins), (SELECT count(*) FROM dl),
	CASE WHEN (SELECT count(*) FROM ins) < 1
		THEN ('relaybus: publish: an event of the call exists (' || (SELECT count(*) FROM ins) || ' inserted)')::int
	END
{{- end}}

-- What publishInsertOne and publishInsertOneAlone write: the event if it
-- does not exist (ins), and its deliveries when it has no key (dl).
{{define "publishInsertOneWrites" -}}
WITH ins AS (
	INSERT INTO {{.Events}} (id, type, key, sequence, payload, headers, created_at, handlers)
	VALUES ($1, $2, $3, CASE WHEN $3::text IS NULL THEN 0 ELSE -1 END, $4, $5, $6,
		CASE WHEN $3::text IS NULL THEN $7::text[] ELSE '{}' END)
	ON CONFLICT (id) DO NOTHING
	RETURNING id, type, key
), dl AS (
	INSERT INTO {{.Deliveries}} (event_id, handler, event_type, key, sequence, lane, status, attempts, max_attempts,
		available_at, created_at, updated_at)
	SELECT ins.id, d.handler, ins.type, NULL, 0, $8, 'pending', 0, d.max_attempts, $9, $11, $11
	FROM ins CROSS JOIN unnest($7::text[], $10::int[]) WITH ORDINALITY AS d(handler, max_attempts, ord)
	WHERE ins.key IS NULL
	ORDER BY d.ord
	RETURNING 1
)
{{- end}}

-- What publishInsert and publishInsertAlone write: the events of the
-- call that do not exist (ins) and their deliveries (dl).
{{define "publishInsertWrites" -}}
WITH u AS (
	SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bytea[], $5::jsonb[], $6::timestamptz[], $7::jsonb[], $8::smallint[],
			$13::timestamptz[])
		AS u(id, type, key, payload, headers, created_at, handlers, lane, due)
), ins AS (
	INSERT INTO {{.Events}} (id, type, key, sequence, payload, headers, created_at, handlers)
	SELECT u.id, u.type, u.key, CASE WHEN u.key IS NULL THEN 0 ELSE -1 END, u.payload, u.headers, u.created_at,
		CASE WHEN u.key IS NULL THEN ARRAY(SELECT jsonb_array_elements_text(u.handlers)) ELSE '{}' END
	FROM u
	ORDER BY u.id
	ON CONFLICT (id) DO NOTHING
	RETURNING id, type, key
), dl AS (
	INSERT INTO {{.Deliveries}} (event_id, handler, event_type, key, sequence, lane, status, attempts, max_attempts,
		available_at, created_at, updated_at)
	SELECT d.event_id, d.handler, ins.type, NULL, 0, u.lane, 'pending', 0, d.max_attempts, u.due, $12, $12
	FROM unnest($9::text[], $10::text[], $11::int[]) WITH ORDINALITY AS d(event_id, handler, max_attempts, ord)
	JOIN ins ON ins.id = d.event_id AND ins.key IS NULL
	JOIN u ON u.id = d.event_id
	ORDER BY d.ord
	RETURNING 1
)
{{- end}}

-- The reads every publish's second statement starts with (publishNumber,
-- publishStale): u, the call's events; cur, each one's row as the
-- statement's snapshot sees it; stale, the existing events that lack a
-- handler of the call, locked and re-read at their newest version; d,
-- every delivery of the call ($5 to $7).
{{define "publishRead" -}}
u AS (
	SELECT * FROM unnest($1::text[], $2::text[], $3::smallint[], $4::jsonb[], $9::timestamptz[]) WITH ORDINALITY AS u(id, key, lane, handlers, due, ord)
), cur AS MATERIALIZED (
	-- Per event of the call, its row as this statement's snapshot sees
	-- it, and that row's address: a lateral subquery with LIMIT 1, which
	-- the planner can only run as a parameterized probe of the primary
	-- key, whatever the table's statistics (a join of the call's ids with
	-- events, or an = ANY of them, is left to the estimates, and a generic
	-- plan made while the table was small scans every event, every call).
	SELECT u.ord, u.key AS given_key, u.lane, u.handlers AS given, u.due,
		e.ctid, e.id, e.type, e.key, e.sequence, e.handlers
	FROM u CROSS JOIN LATERAL (
		SELECT e.ctid, e.id, e.type, e.key, e.sequence, e.handlers FROM {{.Events}} e WHERE e.id = u.id LIMIT 1
	) e
), stale AS (
	-- The events that lacked a handler of the call, locked in id order
	-- (the outer side of a nested loop, sorted) through the same probe,
	-- which re-reads the newest version and re-checks what it lacks.
	SELECT c.ctid, x.id, x.type, x.key, x.sequence, x.handlers, c.due,
		CASE WHEN x.key IS NOT DISTINCT FROM c.given_key THEN c.lane ELSE (
			WITH RECURSIVE f(i, h) AS (
				SELECT 0, 2166136261::bigint
				UNION ALL
				SELECT f.i + 1, ((f.h # get_byte(b.b, f.i)) * 16777619) % 4294967296
				FROM f, (SELECT convert_to(coalesce(x.key, x.id), 'UTF8') AS b) b
				WHERE f.i < length(b.b)
			)
			SELECT (h % 256)::smallint FROM f ORDER BY i DESC LIMIT 1)
		END AS lane
	FROM (
		SELECT * FROM cur c
		WHERE c.sequence <> -1
			AND EXISTS (SELECT FROM jsonb_array_elements_text(c.given) AS h(name) WHERE h.name <> ALL (c.handlers))
		ORDER BY c.id
	) c CROSS JOIN LATERAL (
		SELECT e.id, e.type, e.key, e.sequence, e.handlers FROM {{.Events}} e
		WHERE e.id = c.id
			AND EXISTS (SELECT FROM jsonb_array_elements_text(c.given) AS h(name) WHERE h.name <> ALL (e.handlers))
		LIMIT 1
		FOR NO KEY UPDATE
	) x
), d AS (
	SELECT * FROM unnest($5::text[], $6::text[], $7::int[]) WITH ORDINALITY AS d(event_id, handler, max_attempts, ord)
)
{{- end}}

-- The deliveries of the call that a stale event lacks (publishNumber,
-- publishStale).
{{define "publishStaleAdded" -}}
stale_added AS (
	SELECT s.id, s.type, s.key, s.sequence, s.lane, s.due, d.handler, d.max_attempts, d.ord
	FROM stale s JOIN d ON d.event_id = s.id
	WHERE d.handler <> ALL (s.handlers)
)
{{- end}}

-- The insert of stale_added (publishNumber, publishStale).
{{define "publishStaleInsert" -}}
dl_stale AS (
	-- ON CONFLICT only guards a delivery no events.handlers lists (none
	-- is written so); events.handlers is what keeps a completed (deleted)
	-- one from coming back.
	INSERT INTO {{.Deliveries}} (event_id, handler, event_type, key, sequence, lane, status, attempts, max_attempts,
		available_at, created_at, updated_at)
	SELECT a.id, a.handler, a.type, a.key, a.sequence, a.lane, 'pending', 0, a.max_attempts, a.due, $8, $8
	FROM stale_added a
	ORDER BY a.ord
	ON CONFLICT (event_id, handler) DO NOTHING
	RETURNING 1
)
{{- end}}

-- Publish, statement 2: for the events of the call ($1, with the key and
-- lane given and each one's handlers, as in statement 1, and $9 when
-- its deliveries are due; $5 to $7 are every delivery of the call):
--   - fresh: the keyed events statement 1 inserted (sequence -1). Their
--     keys' counters are upserted in key order (two publishers of several
--     keys cannot deadlock), which keeps each counter row locked until
--     the transaction ends: a second publisher of the key waits, so
--     sequences follow commit order. They are numbered per key in call
--     order and get all their deliveries.
--   - stale: the events that existed and lack a handler of this call,
--     locked in id order (FOR NO KEY UPDATE, which does not conflict
--     with the foreign key checks of delivery inserts) and re-read at
--     their latest version, so that two transactions adding the same
--     handler to one event cannot both add it. They get deliveries only
--     for those handlers, with the type, key and sequence stored; the
--     lane is the one given unless the stored key differs, then it is
--     computed here (LaneOf: FNV-1a of the key, or of the id when
--     unkeyed, modulo 256).
-- Events that have every handler already are only read. Returns the
-- deliveries inserted, how many of the call's events were found, and the
-- ordinals (1-based) and sequences of the keyed ones.
{{define "publishNumber" -}}
WITH {{template "publishRead" .}}, counters AS (
	INSERT INTO {{.Keys}} AS k (key, last_sequence)
	SELECT c.key, count(*) FROM cur c WHERE c.sequence = -1 GROUP BY c.key
	ORDER BY c.key
	ON CONFLICT (key) DO UPDATE SET last_sequence = k.last_sequence + EXCLUDED.last_sequence
	RETURNING k.key, k.last_sequence
), fresh AS (
	SELECT c.ctid, c.id, c.type, c.key, c.lane, c.due,
		k.last_sequence - count(*) OVER (PARTITION BY c.key) + row_number() OVER (PARTITION BY c.key ORDER BY c.ord) AS sequence
	FROM cur c JOIN counters k ON k.key = c.key
	WHERE c.sequence = -1
), fresh_added AS (
	SELECT f.id, f.type, f.key, f.sequence, f.lane, f.due, d.handler, d.max_attempts, d.ord
	FROM fresh f JOIN d ON d.event_id = f.id
), {{template "publishStaleAdded" .}}, names AS (
	SELECT a.id, array_agg(a.handler ORDER BY a.ord) AS added
	FROM (SELECT id, handler, ord FROM fresh_added UNION ALL SELECT id, handler, ord FROM stale_added) AS a
	GROUP BY a.id
), work AS MATERIALIZED (
	SELECT f.ctid, f.id, f.sequence, '{}'::text[] AS handlers FROM fresh f
	UNION ALL
	SELECT s.ctid, s.id, s.sequence, s.handlers FROM stale s
), upd AS (
	-- By address, the addresses cur read (an event of stale updated
	-- since is reached from there, the UPDATE going on to its newest
	-- version, the one stale locked; a TID scan does not re-check the
	-- address, the id check keeps each row to its own work), and only
	-- when there is work (a one-time filter): a call of new unkeyed
	-- events reads no event here, whatever the plan.
	UPDATE {{.Events}} AS e SET sequence = w.sequence, handlers = w.handlers || coalesce(n.added, '{}')
	FROM work w LEFT JOIN names n ON n.id = w.id
	WHERE EXISTS (SELECT FROM work) AND e.ctid = ANY (ARRAY(SELECT ctid FROM work)) AND e.id = w.id
	RETURNING e.id
), dl_fresh AS (
	INSERT INTO {{.Deliveries}} (event_id, handler, event_type, key, sequence, lane, status, attempts, max_attempts,
		available_at, created_at, updated_at)
	SELECT a.id, a.handler, a.type, a.key, a.sequence, a.lane, 'pending', 0, a.max_attempts, a.due, $8, $8
	FROM fresh_added a
	ORDER BY a.ord
	RETURNING 1
), {{template "publishStaleInsert" .}}, seqs AS (
	SELECT c.ord, coalesce(f.sequence, c.sequence) AS sequence
	FROM cur c LEFT JOIN fresh f ON f.id = c.id
	WHERE c.key IS NOT NULL
)
SELECT (SELECT count(*) FROM dl_fresh) + (SELECT count(*) FROM dl_stale), (SELECT count(*) FROM cur),
	(SELECT count(*) FROM upd),
	ARRAY(SELECT ord FROM seqs ORDER BY ord), ARRAY(SELECT sequence FROM seqs ORDER BY ord)
{{- end}}

-- Publish, statement 2 of a call with no keyed event, in place of
-- publishNumber (same parameters and results): only its stale part,
-- which a call of new unkeyed events finds empty. The server initializes
-- every CTE, insert and update of a statement's plan whether it runs or
-- not, and for publishNumber that start was a large part of a publish of
-- one new unkeyed event: without the key counter's upsert, the numbering
-- and the keyed inserts, the call took 20% less time with
-- synchronous_commit off and 11% less with it on
-- (BenchmarkPublishFloor/publish, BENCHMARKS.md).
{{define "publishStale" -}}
WITH {{template "publishRead" .}}, {{template "publishStaleAdded" .}}, names AS (
	SELECT a.id, array_agg(a.handler ORDER BY a.ord) AS added FROM stale_added a GROUP BY a.id
), upd AS (
	-- As publishNumber's: by the addresses cur read, only when there is
	-- work.
	UPDATE {{.Events}} AS e SET handlers = s.handlers || coalesce(n.added, '{}')
	FROM stale s LEFT JOIN names n ON n.id = s.id
	WHERE EXISTS (SELECT FROM stale) AND e.ctid = ANY (ARRAY(SELECT ctid FROM stale)) AND e.id = s.id
	RETURNING e.id
), {{template "publishStaleInsert" .}}
SELECT (SELECT count(*) FROM dl_stale), (SELECT count(*) FROM cur), (SELECT count(*) FROM upd),
	'{}'::bigint[], '{}'::bigint[]
{{- end}}

-- Publish, the wake-up (listen.go): a publish that tries to announce
-- itself queues this with its deliveries' insert. It notifies, in the
-- publish's transaction (so listeners hear of it at commit, and never on
-- a rollback), only when the store's last publish that notified ($1, its
-- transaction id as text, or NULL) is no longer in progress: NOTIFY
-- holds a database-wide lock from commit until the commit's WAL flush
-- ends, so one notifying transaction of a store at a time. An id not
-- below ours is another server's (a failover, a restore): no longer in
-- progress here. CASE, not AND, so that the status is read only of an id
-- that can have one (pg_xact_status fails on one in the future) and
-- pg_notify runs only when chosen. Returns this transaction's id and
-- whether it notified. The channel is made of the validated schema and
-- prefix: it needs no escaping.
{{define "publishWake" -}}
SELECT pg_current_xact_id()::text,
	CASE WHEN CASE
			WHEN $1::text IS NULL THEN true
			WHEN $1::text::xid8 >= pg_current_xact_id() THEN true
			ELSE pg_xact_status($1::text::xid8) IS DISTINCT FROM 'in progress'
		END
		THEN (SELECT true FROM (SELECT pg_notify('{{.Channel}}', '')) AS n)
		ELSE false
	END
{{- end}}
