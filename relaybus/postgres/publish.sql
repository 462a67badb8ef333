-- Publish: the statements of EventPublishTx (publish.go), in the caller's
-- transaction, in the order it runs them. Part of the store's one
-- template set: see sql.go.

-- Publish, step 1: insert the events that do not exist yet, with the
-- handlers this call gives them. Their sequence is set by step 2 once
-- the new ones are known, so that a republished event never consumes
-- a sequence number.
{{define "publishEvents" -}}
INSERT INTO {{.Events}} (id, type, key, sequence, payload, headers, created_at, handlers)
SELECT u.id, u.type, u.key, 0, u.payload, u.headers, u.created_at,
	ARRAY(SELECT jsonb_array_elements_text(u.handlers))
FROM unnest($1::text[], $2::text[], $3::text[], $4::bytea[], $5::jsonb[], $6::timestamptz[], $7::jsonb[])
	WITH ORDINALITY AS u(id, type, key, payload, headers, created_at, handlers, ord)
ORDER BY u.ord
ON CONFLICT (id) DO NOTHING
RETURNING id
{{- end}}

-- Publish, step 2: take n sequence numbers for each key (keys in a
-- fixed order, so two publishers of several keys cannot deadlock) and
-- number the new events of that key in call order. The upsert keeps
-- the key's counter row locked until the transaction ends: a second
-- publisher of the key waits, so sequences follow commit order.
{{define "publishSequences" -}}
WITH counters AS (
	INSERT INTO {{.Keys}} AS k (key, last_sequence)
	SELECT t.key, t.n FROM unnest($1::text[], $2::bigint[]) AS t(key, n)
	ORDER BY t.key
	ON CONFLICT (key) DO UPDATE SET last_sequence = k.last_sequence + EXCLUDED.last_sequence
	RETURNING k.key, k.last_sequence
)
UPDATE {{.Events}} AS e SET sequence = c.last_sequence - u.n + u.rank
FROM unnest($3::text[], $4::text[], $5::bigint[], $6::bigint[]) AS u(id, key, rank, n)
JOIN counters c ON c.key = u.key
WHERE e.id = u.id
RETURNING e.id, e.sequence
{{- end}}

-- Publish, step 3 (only for events that existed): read them, locked in
-- id order until the transaction ends, so that two transactions adding
-- the same handler to one event cannot both add it. FOR NO KEY UPDATE
-- does not conflict with the foreign key checks of delivery inserts.
{{define "publishExisting" -}}
SELECT id, type, key, sequence, handlers FROM {{.Events}}
WHERE id = ANY ($1::text[])
ORDER BY id
FOR NO KEY UPDATE
{{- end}}

-- Publish, step 4a: add the new handlers to events that existed.
{{define "publishHandlers" -}}
UPDATE {{.Events}} AS e SET handlers = e.handlers || ARRAY(SELECT jsonb_array_elements_text(u.added))
FROM unnest($1::text[], $2::jsonb[]) AS u(id, added)
WHERE e.id = u.id
{{- end}}

-- Publish, step 4b: the deliveries. Type, key, sequence and lane come
-- from the caller, who took them from the event as stored; available_at
-- is the publish's time, or its event's later DeliverAt. ON CONFLICT
-- only guards a delivery inserted earlier in the same transaction;
-- events.handlers is what keeps a completed (deleted) one from coming
-- back.
{{define "publishDeliveries" -}}
INSERT INTO {{.Deliveries}} (event_id, handler, event_type, key, sequence, lane, status, attempts, max_attempts,
	available_at, created_at, updated_at)
SELECT u.event_id, u.handler, u.event_type, u.key, u.sequence, u.lane, 'pending', 0, u.max_attempts, u.available_at, $8, $8
FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bigint[], $6::smallint[], $7::int[], $9::timestamptz[])
	WITH ORDINALITY AS u(event_id, handler, event_type, key, sequence, lane, max_attempts, available_at, ord)
ORDER BY u.ord
ON CONFLICT (event_id, handler) DO NOTHING
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
