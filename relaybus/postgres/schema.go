package postgres

import (
	_ "embed"
	"fmt"
	"strings"
	"text/template"
)

// schemaTemplate is the whole 0.1.0 schema. It lives in one file so the
// 0.2.0 upgrade test can start from it verbatim.
//
//go:embed schema.sql
var schemaTemplate string

var parsedSchema = template.Must(template.New("schema.sql").Option("missingkey=error").Parse(schemaTemplate))

// renderSchema fills the schema template. schema and prefix must have
// passed validateIdentifier: the template quotes them, and the pattern
// keeps a quote from ever being part of them.
func renderSchema(schema, prefix string) (string, error) {
	var b strings.Builder
	err := parsedSchema.Execute(&b, struct{ Schema, Prefix string }{schema, prefix})
	if err != nil {
		return "", fmt.Errorf("relaybus/postgres: render schema: %w", err)
	}
	return b.String(), nil
}

// queries are the statements of a store, with its schema and table
// prefix applied once at New (from validated identifiers only).
type queries struct {
	events, deliveries, keys string // quoted, schema-qualified table names

	publishEvents     string
	publishSequences  string
	publishDeliveries string
	publishRead       string

	claimBury string
	claim     string

	extend       string
	complete     string
	completeMany string
	reschedule   string
	bury         string
	release      string
	relinquish   string
	requeue      string
	status       string

	statisticsCounts string
	statisticsOldest string
	statisticsCheck  string
	analyze          string
	purgeDeliveries  string
	purgeEvents      string
}

// deliveryColumns are the columns scanDelivery reads, d = deliveries and
// e = events.
const deliveryColumns = `d.id, d.event_id, d.event_type, d.key, d.sequence,
	e.payload, e.headers, e.created_at,
	d.handler, d.status, d.attempts, d.max_attempts, d.available_at, d.last_error,
	d.lease_owner, d.lease_token, d.lease_expires_at,
	d.created_at, d.updated_at, d.completed_at`

// leaseCleared is the SET list that ends a lease.
const leaseCleared = `lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL`

// fenced is the WHERE clause every single-delivery write under a lease
// carries: the row must still be processing under the very token the
// claim handed out. A takeover writes a new token, so a stale holder's
// writes match nothing.
const fenced = `id = $1 AND status = 'processing' AND lease_token = $2`

// blocked is the per-key ordering check of a keyed delivery d: an
// earlier delivery of its handler and key that is not finished. It walks
// the ordering index (handler, key, sequence).
const blocked = `SELECT 1 FROM {deliveries} p
			WHERE p.handler = d.handler AND p.key = d.key AND p.sequence < d.sequence
				AND p.status IN ('pending', 'processing')`

func buildQueries(schema, prefix string) queries {
	table := func(name string) string { return fmt.Sprintf(`"%s"."%s%s"`, schema, prefix, name) }
	q := queries{events: table("events"), deliveries: table("deliveries"), keys: table("keys")}
	r := strings.NewReplacer("{events}", q.events, "{deliveries}", q.deliveries, "{keys}", q.keys,
		"{columns}", deliveryColumns, "{blocked}", strings.ReplaceAll(blocked, "{deliveries}", q.deliveries), "{leaseCleared}", leaseCleared, "{fenced}", fenced)

	// Publish, step 1: insert the events that do not exist yet. Their
	// sequence is set by step 2 once the new ones are known, so that a
	// republished event never consumes a sequence number.
	q.publishEvents = r.Replace(`
INSERT INTO {events} (id, type, key, sequence, payload, headers, created_at)
SELECT u.id, u.type, u.key, 0, u.payload, u.headers, u.created_at
FROM unnest($1::text[], $2::text[], $3::text[], $4::bytea[], $5::jsonb[], $6::timestamptz[])
	WITH ORDINALITY AS u(id, type, key, payload, headers, created_at, ord)
ORDER BY u.ord
ON CONFLICT (id) DO NOTHING
RETURNING id`)

	// Publish, step 2: take n sequence numbers for each key (keys in a
	// fixed order, so two publishers of several keys cannot deadlock) and
	// number the new events of that key in call order. The upsert keeps
	// the key's counter row locked until the transaction ends: a second
	// publisher of the key waits, so sequences follow commit order.
	q.publishSequences = r.Replace(`
WITH counters AS (
	INSERT INTO {keys} AS k (key, last_sequence)
	SELECT t.key, t.n FROM unnest($1::text[], $2::bigint[]) AS t(key, n)
	ORDER BY t.key
	ON CONFLICT (key) DO UPDATE SET last_sequence = k.last_sequence + EXCLUDED.last_sequence
	RETURNING k.key, k.last_sequence
)
UPDATE {events} AS e SET sequence = c.last_sequence - u.n + u.rank
FROM unnest($3::text[], $4::text[], $5::bigint[], $6::bigint[]) AS u(id, key, rank, n)
JOIN counters c ON c.key = u.key
WHERE e.id = u.id`)

	// Publish, step 3: one delivery per (event, handler) that has none.
	// Type, key and sequence come from the stored event, so a republished
	// event's new handlers line up with its original sequence.
	q.publishDeliveries = r.Replace(`
INSERT INTO {deliveries} (event_id, handler, event_type, key, sequence, status, attempts, max_attempts,
	available_at, created_at, updated_at)
SELECT e.id, u.handler, e.type, e.key, e.sequence, 'pending', 0, u.max_attempts, $4, $4, $4
FROM unnest($1::text[], $2::text[], $3::int[]) WITH ORDINALITY AS u(event_id, handler, max_attempts, ord)
JOIN {events} e ON e.id = u.event_id
ORDER BY u.ord
ON CONFLICT (event_id, handler) DO NOTHING`)

	q.publishRead = r.Replace(`SELECT id, sequence FROM {events} WHERE id = ANY($1::text[])`)

	// Claim, step 1: a takeover whose attempt budget is spent buries the
	// delivery instead of running it once more (a crash loop ends in the
	// dead letters). Separate from step 2 so that the burial is visible
	// to step 2's ordering check: a dead predecessor does not block.
	q.claimBury = r.Replace(`
WITH expired AS (
	SELECT id FROM {deliveries}
	WHERE status = 'processing' AND lease_expires_at <= $2 AND attempts >= max_attempts
		AND handler = ANY($1::text[])
	ORDER BY lease_expires_at
	LIMIT $3
	FOR UPDATE SKIP LOCKED
)
UPDATE {deliveries} AS d
SET status = 'dead', last_error = 'lease expired after the final attempt', {leaseCleared}, updated_at = $2
FROM expired WHERE d.id = expired.id`)

	// Claim, step 2: lease due pending deliveries and expired processing
	// ones (a takeover), oldest due first. Three selections, each an
	// ordered index scan that stops at the limit: expired leases (the
	// processing index), unkeyed pending rows (the unkeyed due index) and
	// keyed pending rows (the due index), then the oldest of them. One
	// selection with an OR could not walk an index in order: it would
	// read and sort the whole backlog at every claim.
	//
	// A keyed delivery qualifies only while no delivery of its handler
	// and key with a lower sequence is pending or processing (the
	// ordering index). Under READ COMMITTED this cannot let two
	// deliveries of one key run at once: a delivery qualifies only when
	// every predecessor is completed or dead in the statement's snapshot,
	// and neither state goes back to pending except by an explicit
	// Requeue. Rows a concurrent claim holds are skipped, not waited for;
	// a row that a concurrent transaction changed and committed is
	// re-checked against its selection's conditions before it is locked.
	// Rows selected but not among the oldest stay locked only until the
	// claim's implicit transaction ends, a moment later.
	//
	// The lease token is the claim's random 128 bits ($5) and the
	// delivery ID: unguessable, new at every claim, and different for
	// each delivery of one claim, so one delivery's token never opens
	// another.
	q.claim = r.Replace(`
WITH expired AS (
	SELECT d.id, d.available_at FROM {deliveries} d
	WHERE d.status = 'processing' AND d.lease_expires_at <= $2 AND d.attempts < d.max_attempts
		AND d.handler = ANY($1::text[])
		AND (d.key IS NULL OR NOT EXISTS ({blocked}))
	ORDER BY d.lease_expires_at
	LIMIT $3
	FOR UPDATE SKIP LOCKED
), due_unkeyed AS (
	SELECT d.id, d.available_at FROM {deliveries} d
	WHERE d.status = 'pending' AND d.key IS NULL AND d.available_at <= $2
		AND d.handler = ANY($1::text[])
	ORDER BY d.available_at, d.id
	LIMIT $3
	FOR UPDATE SKIP LOCKED
), due_keyed AS (
	SELECT d.id, d.available_at FROM {deliveries} d
	WHERE d.status = 'pending' AND d.key IS NOT NULL AND d.available_at <= $2
		AND d.handler = ANY($1::text[])
		AND NOT EXISTS ({blocked})
	ORDER BY d.available_at, d.id
	LIMIT $3
	FOR UPDATE SKIP LOCKED
), picked AS (
	SELECT c.id FROM (
		SELECT * FROM expired UNION ALL SELECT * FROM due_unkeyed UNION ALL SELECT * FROM due_keyed
	) c
	ORDER BY c.available_at, c.id
	LIMIT $3
)
UPDATE {deliveries} AS d
SET status = 'processing', attempts = d.attempts + 1,
	lease_owner = $4, lease_token = $5 || '-' || d.id::text, lease_expires_at = $6, updated_at = $2
FROM picked, {events} e
WHERE d.id = picked.id AND e.id = d.event_id
RETURNING {columns}`)

	// Renewal and completion lock the same rows (a dispatcher renews while
	// its completer completes), and so may an owner's relinquish. Locking a
	// set of rows in the order UPDATE ... FROM unnest visits them has no
	// defined order: two such statements deadlocked, PostgreSQL aborted one
	// after deadlock_timeout, and leases expired into duplicate runs. So
	// every statement that locks several deliveries locks them first, in
	// ascending id, in a CTE (LockRows sits above the sort), and then
	// updates only rows it already holds. The fence is checked when each
	// row is locked, on its latest version (READ COMMITTED rechecks a row
	// that changed while we waited for it).
	//
	// The claim needs no such step: its selections lock with SKIP LOCKED,
	// which never waits, and its UPDATE writes only rows they locked.
	q.extend = r.Replace(`
WITH held AS MATERIALIZED (
	SELECT d.id, u.token FROM {deliveries} AS d
	JOIN unnest($1::bigint[], $2::text[]) AS u(id, token) ON d.id = u.id
	WHERE d.status = 'processing' AND d.lease_token = u.token AND d.lease_owner = $5
	ORDER BY d.id
	FOR UPDATE OF d
)
UPDATE {deliveries} AS d SET lease_expires_at = $3, updated_at = $4
FROM held WHERE d.id = held.id
RETURNING d.id, held.token`)

	q.complete = r.Replace(`
UPDATE {deliveries} SET status = 'completed', completed_at = $3, updated_at = $3, {leaseCleared}
WHERE {fenced}`)

	q.completeMany = r.Replace(`
WITH held AS MATERIALIZED (
	SELECT d.id, u.token FROM {deliveries} AS d
	JOIN unnest($1::bigint[], $2::text[]) AS u(id, token) ON d.id = u.id
	WHERE d.status = 'processing' AND d.lease_token = u.token
	ORDER BY d.id
	FOR UPDATE OF d
)
UPDATE {deliveries} AS d SET status = 'completed', completed_at = $3, updated_at = $3, {leaseCleared}
FROM held WHERE d.id = held.id
RETURNING d.id, held.token`)

	q.reschedule = r.Replace(`
UPDATE {deliveries} SET status = 'pending', available_at = $3, last_error = $4, updated_at = $5, {leaseCleared}
WHERE {fenced}`)

	q.bury = r.Replace(`
UPDATE {deliveries} SET status = 'dead', last_error = $3, updated_at = $4, {leaseCleared}
WHERE {fenced}`)

	// A release gives back the attempt the claim counted: the handler
	// did not fail, the process is stopping.
	q.release = r.Replace(`
UPDATE {deliveries} SET status = 'pending', attempts = attempts - 1, updated_at = $3, {leaseCleared}
WHERE {fenced}`)

	// Relinquish locks in ascending id like renewal and completion (see
	// extend).
	q.relinquish = r.Replace(`
WITH held AS MATERIALIZED (
	SELECT id FROM {deliveries}
	WHERE status = 'processing' AND lease_owner = $1
	ORDER BY id
	FOR UPDATE
)
UPDATE {deliveries} AS d SET status = 'pending', attempts = d.attempts - 1, updated_at = $2, {leaseCleared}
FROM held WHERE d.id = held.id`)

	q.requeue = r.Replace(`
UPDATE {deliveries} SET status = 'pending', attempts = 0, available_at = $2, updated_at = $2, {leaseCleared}
WHERE id = $1 AND status = 'dead'`)

	q.status = r.Replace(`SELECT status FROM {deliveries} WHERE id = $1`)

	q.statisticsCounts = r.Replace(`SELECT handler, status, count(*) FROM {deliveries} GROUP BY handler, status`)
	q.statisticsOldest = r.Replace(`
SELECT min(available_at) FROM {deliveries} WHERE status = 'pending' AND available_at <= $1`)

	// Planner statistics (see ensureStatistics): whether the deliveries
	// table has any ($1 schema, $2 table), and how many rows it holds, up
	// to $3 (counting stops there).
	q.statisticsCheck = r.Replace(`
SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_stats WHERE schemaname = $1 AND tablename = $2),
	(SELECT count(*) FROM (SELECT 1 FROM {deliveries} LIMIT $3) AS s)::int`)
	q.analyze = r.Replace(`ANALYZE {deliveries}`)

	// Purge: a NULL cutoff matches nothing, and LIMIT NULL is no limit.
	// Its rows are locked in ascending id too, so two purges at once
	// cannot deadlock.
	q.purgeDeliveries = r.Replace(`
WITH victims AS MATERIALIZED (
	SELECT id FROM {deliveries}
	WHERE (status = 'completed' AND completed_at < $1) OR (status = 'dead' AND updated_at < $2)
	ORDER BY id
	LIMIT $3
	FOR UPDATE
)
DELETE FROM {deliveries} AS d USING victims
WHERE d.id = victims.id`)

	// Events without any delivery left, once they are older than the
	// later cutoff (until then a republished event finds them). There is
	// no index on events.created_at: this scans the events, as befits a
	// retention job rather than a hot path.
	q.purgeEvents = r.Replace(`
DELETE FROM {events} AS e
WHERE e.created_at < $1
	AND NOT EXISTS (SELECT 1 FROM {deliveries} d WHERE d.event_id = e.id)`)
	return q
}
