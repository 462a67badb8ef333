package postgres

import (
	_ "embed"
	"fmt"
	"strings"
	"text/template"
)

// schemaTemplate is the whole 0.2.0 schema, install and upgrade from 0.1.0
// in one idempotent script. The 0.1.0 file it replaced is kept verbatim as
// testdata/schema-0.1.0.sql, the fixture of the upgrade tests.
//
//go:embed schema.sql
var schemaTemplate string

var parsedSchema = template.Must(template.New("schema.sql").Option("missingkey=error").Parse(schemaTemplate))

// SchemaVersion is the version number this store records in the
// <prefix>schema_version table. 0.1.0 recorded none (its marker is the
// deliveries.lease_token column). Setup refuses a schema whose recorded
// version is higher.
const SchemaVersion = 2

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
	events, deliveries, keys, lanes, history string // quoted, schema-qualified table names
	inFlight                                 string // the inFlight join, for listings

	publishEvents     string
	publishSequences  string
	publishExisting   string
	publishHandlers   string
	publishDeliveries string

	claimPrelude string
	claimAsync   string
	claimCount   string
	claimLock    string
	claimOwn     string
	claimTake    string
	claimWrite   string
	extend       string
	lockLane     string
	lockHeld     string
	lockOwned    string

	completeMany        string
	completeManyHistory string
	completeTx          string
	completeTxHistory   string
	reschedule          string
	bury                string
	release             string
	relinquish          string

	requeue       string
	requeueStatus string

	statisticsCounts string
	statisticsOldest string

	purgeDead      string
	purgeCompleted string
	purgeHistory   string
	purgeEvents    string

	setupLock string
}

// deliveryColumns are the columns scanDelivery reads: d = deliveries,
// e = events, f = the lane the delivery is in flight in (NULL columns
// when it is not).
const deliveryColumns = `d.id, d.event_id, d.event_type, d.key, d.sequence,
	e.payload, e.headers, e.created_at,
	d.handler, d.status, d.attempts, d.max_attempts, d.available_at, d.last_error,
	d.created_at, d.updated_at, d.completed_at, d.lane, d.claims, d.suspect,
	f.lease_owner, f.epoch, f.lease_expires_at`

// inFlight is the lateral subquery that finds the lane a pending delivery
// d is in flight in: a lane with an owner that lists it. A lane whose
// lease expired still counts until another claimer takes it over (the
// delivery's attempt is charged then), so a listing between a crash and
// the takeover shows the delivery as processing.
const inFlight = `LEFT JOIN LATERAL (
	SELECT l.lease_owner, l.epoch, l.lease_expires_at FROM {lanes} l
	WHERE l.lane = d.lane AND l.lease_owner IS NOT NULL AND d.id = ANY (l.in_flight)
) f ON d.status = 'pending'`

// fenced is the CTE of a plain completion that finds the rows whose fence
// holds: per lease ($1 ids, $2 lanes, $3 claims, $4 epochs), a lookup of
// the delivery by primary key (a lateral subquery with LIMIT 1, which the
// planner can only run as a parameterized index probe, whatever the
// table's statistics) checked against the token: its lane and claims, and
// the lane's epoch and in_flight. The DELETE then goes by the rows'
// physical addresses (a TID scan, in address order) and checks the
// claims again, which every concurrent write of an in-flight delivery
// raises. Written as a join (DELETE ... USING the leases or the lanes),
// the statement is left to the planner's estimates: on a table never
// analyzed it chose a sequential scan of every delivery for a batch of
// 200 (and once, with lanes on the outer side of a nested loop, repeated
// the id scan per lane).
const fenced = `fenced AS MATERIALIZED (
	SELECT x.ctid, u.id, u.claims FROM unnest($1::bigint[], $2::smallint[], $3::bigint[], $4::bigint[])
		AS u(id, lane, claims, epoch)
	CROSS JOIN LATERAL (
		SELECT d.ctid FROM {deliveries} d
		WHERE d.id = u.id AND d.lane = u.lane AND d.claims = u.claims AND d.status = 'pending'
			AND EXISTS (SELECT 1 FROM {lanes} l WHERE l.lane = u.lane AND l.epoch = u.epoch AND u.id = ANY (l.in_flight))
		LIMIT 1
	) x
)`

// deleteFenced is the DELETE of the fenced rows (see fenced). The claims
// check is for a row updated after the lookup's snapshot: the DELETE then
// re-evaluates its conditions on the newest version, where the claims
// have moved (a TID scan does not re-check the address). It is written
// NOT (... NOT IN ...), which is IN for a set without NULLs, so that it
// stays one hashed subplan: as IN the planner makes it a semi join and,
// trusting a CTE's row estimate, nests it (200 x 200 comparisons for a
// batch of 200).
const deleteFenced = `DELETE FROM {deliveries} d
WHERE d.ctid = ANY (ARRAY(SELECT f.ctid FROM fenced f))
	AND NOT ((d.id, d.claims) NOT IN (SELECT f.id, f.claims FROM fenced f))
	AND d.status = 'pending'`

// historyInsert copies deleted rows (the CTE "gone") into the history.
const historyInsert = `INSERT INTO {history} (id, event_id, handler, event_type, key, sequence, attempts, max_attempts,
	available_at, last_error, created_at, completed_at)
SELECT id, event_id, handler, event_type, key, sequence, attempts + 1, max_attempts,
	available_at, last_error, created_at, $5
FROM gone`

// claimQuota is how many deliveries a lane gives while it is held: once a
// holder has claimed this many from it since it took it, the lane gives
// nothing more and is handed back as soon as nothing of it is in flight,
// and the claim takes other lanes, the ones with the oldest due work
// first. Without a bound, a claimer kept the few lanes it held for as long
// as they had work and drained them one after another, while the other
// lanes waited: work was not served oldest first across lanes, and since
// the deliveries of a lane are spread over every page of the table (the
// lane is a hash), the deletes of a few lanes touched every page, each
// page's first change after a checkpoint writing the whole page to the
// WAL. With the bound, lanes progress within about claimQuota deliveries
// of each other, and the deletes move through the table roughly in the
// order it was written.
const claimQuota = 64

// claimWalk is how many lanes of the ring a take visits one by one
// before it looks only at the lanes that have pending work (see
// claimTake): enough for a deep backlog, where nearly every lane has work,
// to be served by the walk alone.
const claimWalk = 32

// laneDue is the condition of a take that lane r.lane has due work of
// the handlers $4 at $3: a probe of each index.
const laneDue = `coalesce(
			(SELECT true FROM {deliveries} d
				WHERE d.lane = r.lane AND d.status = 'pending' AND d.key IS NULL AND d.available_at <= $3
					AND d.handler = ANY ($4::text[])
				ORDER BY d.available_at, d.id
				LIMIT 1),
			-- The key index's order: without it, LIMIT 1 let the planner
			-- prefer a sequential scan (measured: 0.6 ms and 73 pages
			-- per lane without keyed work, on an analyzed table of 4
			-- hot keys), which reads the whole table for every such
			-- lane.
			(SELECT true FROM {deliveries} d
				WHERE d.lane = r.lane AND d.status = 'pending' AND d.key IS NOT NULL AND d.available_at <= $3
					AND d.handler = ANY ($4::text[])
				ORDER BY d.handler, d.key, d.sequence
				LIMIT 1),
			false)`

// expiredFinalAttempt is the last error of a delivery buried by a
// takeover.
const expiredFinalAttempt = "lease expired after the final attempt"

func buildQueries(schema, prefix string) queries {
	table := func(name string) string { return fmt.Sprintf(`"%s"."%s%s"`, schema, prefix, name) }
	q := queries{events: table("events"), deliveries: table("deliveries"), keys: table("keys"),
		lanes: table("lanes"), history: table("history")}
	names := strings.NewReplacer("{events}", q.events, "{deliveries}", q.deliveries, "{keys}", q.keys,
		"{lanes}", q.lanes, "{history}", q.history)
	r := strings.NewReplacer("{quota}", fmt.Sprint(claimQuota), "{walk}", fmt.Sprint(claimWalk), "{due}", laneDue, "{columns}", deliveryColumns, "{inFlight}", names.Replace(inFlight),
		"{fenced}", names.Replace(fenced), "{deleteFenced}", names.Replace(deleteFenced),
		"{historyInsert}", names.Replace(historyInsert))
	sql := func(s string) string { return names.Replace(r.Replace(s)) }
	q.inFlight = names.Replace(inFlight)

	// Publish, step 1: insert the events that do not exist yet, with the
	// handlers this call gives them. Their sequence is set by step 2 once
	// the new ones are known, so that a republished event never consumes
	// a sequence number.
	q.publishEvents = sql(`
INSERT INTO {events} (id, type, key, sequence, payload, headers, created_at, handlers)
SELECT u.id, u.type, u.key, 0, u.payload, u.headers, u.created_at,
	ARRAY(SELECT jsonb_array_elements_text(u.handlers))
FROM unnest($1::text[], $2::text[], $3::text[], $4::bytea[], $5::jsonb[], $6::timestamptz[], $7::jsonb[])
	WITH ORDINALITY AS u(id, type, key, payload, headers, created_at, handlers, ord)
ORDER BY u.ord
ON CONFLICT (id) DO NOTHING
RETURNING id`)

	// Publish, step 2: take n sequence numbers for each key (keys in a
	// fixed order, so two publishers of several keys cannot deadlock) and
	// number the new events of that key in call order. The upsert keeps
	// the key's counter row locked until the transaction ends: a second
	// publisher of the key waits, so sequences follow commit order.
	q.publishSequences = sql(`
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
WHERE e.id = u.id
RETURNING e.id, e.sequence`)

	// Publish, step 3 (only for events that existed): read them, locked in
	// id order until the transaction ends, so that two transactions adding
	// the same handler to one event cannot both add it. FOR NO KEY UPDATE
	// does not conflict with the foreign key checks of delivery inserts.
	q.publishExisting = sql(`
SELECT id, type, key, sequence, handlers FROM {events}
WHERE id = ANY ($1::text[])
ORDER BY id
FOR NO KEY UPDATE`)

	// Publish, step 4a: add the new handlers to events that existed.
	q.publishHandlers = sql(`
UPDATE {events} AS e SET handlers = e.handlers || ARRAY(SELECT jsonb_array_elements_text(u.added))
FROM unnest($1::text[], $2::jsonb[]) AS u(id, added)
WHERE e.id = u.id`)

	// Publish, step 4b: the deliveries. Type, key, sequence and lane come
	// from the caller, who took them from the event as stored. ON CONFLICT
	// only guards a delivery inserted earlier in the same transaction;
	// events.handlers is what keeps a completed (deleted) one from coming
	// back.
	q.publishDeliveries = sql(`
INSERT INTO {deliveries} (event_id, handler, event_type, key, sequence, lane, status, attempts, max_attempts,
	available_at, created_at, updated_at)
SELECT u.event_id, u.handler, u.event_type, u.key, u.sequence, u.lane, 'pending', 0, u.max_attempts, $8, $8, $8
FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bigint[], $6::smallint[], $7::int[])
	WITH ORDINALITY AS u(event_id, handler, event_type, key, sequence, lane, max_attempts, ord)
ORDER BY u.ord
ON CONFLICT (event_id, handler) DO NOTHING`)

	// The first statement of every claim round trip: the
	// transaction-local settings through which the round trip's later
	// statements learn what the earlier ones did: relaybus.claimed, how
	// many deliveries the claim has so far ($1; the claim's limit once it
	// holds a suspect, which is claimed alone), relaybus.taken, the lanes
	// taken by claimTake, and relaybus.own, the lanes claimLock locked.
	//
	// The claim commits synchronously (the server's synchronous_commit,
	// on by default): a lease token is returned only once the write that
	// issued it is durable. Until 0.2.1 claims committed with
	// synchronous_commit off; a database crash within the WAL writer's
	// delay lost the claim, the lane came back at its previous epoch, and
	// the next take rebuilt the identical token lane:epoch:claims for
	// another holder (or the same holder's next claim returned the same
	// delivery under the same token): the stale holder's completion was
	// accepted and the key's next delivery was handed out while the
	// first still ran. A round trip that issued no token (it only locked
	// its lanes, handed drained ones back or charged a takeover's lost
	// deliveries) ends with claimAsync, which turns the flush wait off:
	// losing such a commit loses no token.
	q.claimPrelude = `SELECT set_config('relaybus.claimed', ($1::int)::text, true), set_config('relaybus.taken', '{}', true),
	set_config('relaybus.own', '{}', true)`

	// The last statement of a claim round trip: synchronous_commit off for
	// this transaction when it claimed nothing ($1 is relaybus.claimed at
	// its start; see claimPrelude). Otherwise the setting is left as the
	// server or session has it.
	q.claimAsync = `SELECT CASE WHEN coalesce(nullif(current_setting('relaybus.claimed', true), ''), '0')::int <= $1
	THEN set_config('synchronous_commit', 'off', true) END`

	// The claim's count so far (see claimPrelude), read back at the end of
	// a busy caller's round trip.
	q.claimCount = `SELECT coalesce(nullif(current_setting('relaybus.claimed', true), ''), '0')::int`

	// Lock the lanes a claim from held lanes will look at, in lane order,
	// in a statement of its own before the claim (both in one implicit
	// transaction, one round trip): under READ COMMITTED a statement that
	// waits for a row lock re-reads the locked row but keeps its older
	// snapshot of every other row, so a claim that waited for the
	// holder's own reschedule of a lane would see the lane without the
	// delivery and the delivery still with its old claims counter, and
	// hand out a token that is stale from birth. Locked first, the claim's
	// snapshot is taken after every writer of those lanes committed. The
	// lanes locked go to relaybus.own, so that the claim reads them through
	// the primary key instead of scanning the 256 pages again. $1 owner,
	// $2 holder, $3 now.
	q.claimLock = sql(`
SELECT set_config('relaybus.own', coalesce(array_agg(x.lane ORDER BY x.lane), '{}')::text, true)
FROM (
	SELECT l.lane FROM {lanes} l
	WHERE l.lease_owner = $1 AND l.lease_holder = $2 AND l.lease_expires_at > $3
	ORDER BY l.lane
	FOR NO KEY UPDATE
) x`)

	// Claim from the lanes this (owner, holder) holds: one statement
	// (after claimLock, in the same round trip). $1 owner, $2 holder, $3
	// now, $4 handlers, $5 the claim's limit (less relaybus.claimed is
	// what this statement may add), $6 true to look only at the lanes
	// claimTake just took in this transaction (locked by it), $7 the new
	// lease expiry, $8 whether the caller is busy (has deliveries in
	// flight).
	//
	//   own:     the lanes (claimLock's, or claimTake's), through the
	//            primary key, locked in lane order, with the room left
	//            in their quota (claimQuota less what they gave since
	//            they were taken). FOR NO KEY UPDATE does not conflict
	//            with the FOR KEY SHARE of a transactional completion, so
	//            a claim never waits for a handler's transaction.
	//   heads:   per lane with room, the head of every (handler, key),
	//            the whole row: a skip scan of the key index, one probe
	//            per key, however long the key's backlog. Only a head may
	//            run (the per-key rule), and only while nothing of its key
	//            is in flight.
	//   flying:  what is in flight in lanes that have heads, through the
	//            primary key (a completion deletes the row and leaves the
	//            id in in_flight): the keys it blocks. Lanes without keyed
	//            work are not probed.
	//   cand:    the oldest due unkeyed deliveries of each lane (an
	//            ordered scan of the unkeyed index that stops at the limit
	//            or at the lane's room) and the due heads, not in flight,
	//            of the handlers, the whole rows; at most the room of each
	//            lane; then the oldest of all. Suspects only while the
	//            claim has nothing yet, or for a busy caller (which must
	//            see whether a suspect is its oldest candidate).
	//   pick:    when the oldest candidate is a suspect: that one alone
	//            for a caller that is not busy, nothing for a busy one
	//            (it must drain first: a suspect held beside other work
	//            is charged for their crash, variant SUSPECT_BUSY);
	//            otherwise the non-suspects.
	//   rec:     write each lane that gave something: the picks appended
	//            to in_flight (to what flying found still in flight where
	//            it probed; elsewhere the ids of completed deliveries are
	//            left there until the lane is handed back: a hold gives at
	//            most claimQuota ids), its picks counted, a new
	//            expiry; hand back a lane that gave nothing and has
	//            nothing left in flight (epoch kept), so drained and
	//            spent lanes are never probed again. A lane that only
	//            saw completions is not written.
	//
	// The final WHERE is a constant condition, which PostgreSQL evaluates
	// once before the first row (a one-time filter), however many rows
	// there are: it records the claim's new count in relaybus.claimed for
	// the statements after it, the limit once the claim holds a suspect
	// or a busy caller met one first, so that nothing more is taken. The deliveries are returned as cand read
	// them (same statement, same snapshot), not looked up again. No
	// delivery row is written and no lock taken on one.
	q.claimOwn = sql(`
WITH RECURSIVE own AS MATERIALIZED (
	SELECT l.lane, l.epoch, l.in_flight, greatest({quota} - l.picks, 0) AS room FROM {lanes} l
	WHERE l.lane = ANY (coalesce(nullif(current_setting(CASE WHEN $6 THEN 'relaybus.taken' ELSE 'relaybus.own' END, true), ''), '{}')::smallint[])
		AND l.lease_owner = $1 AND l.lease_holder = $2 AND l.lease_expires_at > $3
	ORDER BY l.lane
	FOR NO KEY UPDATE
), heads AS (
	SELECT o.lane, ''::text AS handler, ''::text AS key, NULL::{deliveries} AS r
	FROM own o
	WHERE o.room > 0
	UNION ALL
	SELECT h.lane, n.handler, n.key, n.r FROM heads h
	CROSS JOIN LATERAL (
		SELECT p.handler, p.key, p AS r FROM {deliveries} p
		WHERE p.lane = h.lane AND p.key IS NOT NULL AND p.status = 'pending'
			AND (p.handler, p.key) > (h.handler, h.key)
		ORDER BY p.handler, p.key, p.sequence
		LIMIT 1
	) n
), flying AS MATERIALIZED (
	SELECT o.lane, d.id, d.handler, d.key FROM own o
	JOIN {deliveries} d ON d.id = ANY (o.in_flight)
	WHERE d.status = 'pending'
		AND EXISTS (SELECT 1 FROM heads h WHERE h.lane = o.lane AND (h.r).id IS NOT NULL)
), cand AS MATERIALIZED (
	SELECT y.r, (y.r).id AS id, y.lane, (y.r).available_at AS available_at, (y.r).suspect AS suspect FROM (
		SELECT x.r, x.lane, x.room,
			row_number() OVER (PARTITION BY x.lane ORDER BY (x.r).available_at, (x.r).id) AS rn
		FROM (
			SELECT c.r, o.lane, o.room FROM own o
			CROSS JOIN LATERAL (
				SELECT d AS r FROM {deliveries} d
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
), next AS MATERIALIZED (
	SELECT o.lane, p.ids, coalesce(p.n, 0) AS picked,
		p.n IS NULL AND NOT EXISTS (
			SELECT 1 FROM {deliveries} d WHERE d.id = ANY (o.in_flight) AND d.status = 'pending') AS release,
		-- What is still in flight, where flying probed it anyway.
		CASE WHEN EXISTS (SELECT 1 FROM heads h WHERE h.lane = o.lane AND (h.r).id IS NOT NULL)
			THEN ARRAY(SELECT f.id FROM flying f WHERE f.lane = o.lane) END AS live
	FROM own o
	LEFT JOIN (
		SELECT k.lane, array_agg(k.id ORDER BY k.id) AS ids, count(*)::int AS n FROM pick k GROUP BY k.lane
	) p ON p.lane = o.lane
), rec AS (
	UPDATE {lanes} l SET
		in_flight = CASE WHEN n.release THEN '{}' ELSE coalesce(n.live, l.in_flight) || n.ids END,
		picks = CASE WHEN n.release THEN 0 ELSE l.picks + n.picked END,
		lease_owner = CASE WHEN n.release THEN NULL ELSE l.lease_owner END,
		lease_holder = CASE WHEN n.release THEN NULL ELSE l.lease_holder END,
		lease_expires_at = CASE WHEN n.release THEN NULL ELSE $7::timestamptz END
	FROM next n
	WHERE l.lane = n.lane AND (n.release OR n.picked > 0)
)
SELECT {columns} FROM pick
JOIN own o ON o.lane = pick.lane
CROSS JOIN LATERAL (SELECT $1::text AS lease_owner, o.epoch, $7::timestamptz AS lease_expires_at) f
CROSS JOIN LATERAL (SELECT (pick.r).*) d
JOIN {events} e ON e.id = d.event_id
WHERE (SELECT set_config('relaybus.claimed', (CASE
	WHEN (SELECT suspect FROM first) AND ($8 OR EXISTS (SELECT 1 FROM pick)) THEN $5
	ELSE coalesce(nullif(current_setting('relaybus.claimed', true), ''), '0')::int + (SELECT count(*) FROM pick)::int END)::text, true)) IS NOT NULL`)

	// Choose and lock up to $1 lanes, and no more than the claim still
	// needs ($5, the claim's limit, less relaybus.claimed: none when the
	// claim is full, holds a suspect, or is a busy caller's whose oldest
	// candidate was a suspect), that are free or whose lease expired and
	// that have due work of the handlers $4 at $3, walking the ring of
	// lanes from $6 (a position each store instance moves past the lanes
	// it took, so that successive takes go round every lane with work):
	// with the per-hold quota (claimQuota), that serves every busy lane in
	// turn, a bounded number of deliveries at a time. The walk stops as
	// soon as it has found enough lanes: one probe of the lane row and,
	// for a free lane, one of each index, per lane visited (cands is read
	// through a LIMIT, so its conditions are evaluated lane by lane, in
	// ring order). It skips lanes another transaction has locked (a claim
	// taking them, or a transactional completion's FOR KEY SHARE: a
	// takeover never waits for one and never overtakes it), and never one
	// of $2 (lanes this claim already took and handed back). The lanes
	// locked go to relaybus.want for claimWrite, the statement after it,
	// which takes them: it raises their epoch, so every write under an
	// older lease fails, and the lanes taken go to relaybus.taken for the
	// claimOwn after that. Taking an abandoned lane (expired, whatever it
	// has in flight) charges each delivery in its in_flight that still
	// exists one attempt, marks it a suspect, and buries it when that
	// spends its budget and it was a suspect already (one that was not
	// may only have run beside the delivery that crashed the process: its
	// next attempt, alone, decides; variant BURY_ANY). The charge raises
	// claims, so a completion of the old holder that commits after this
	// finds its fence broken, and one that commits first has deleted the
	// row, which is then not charged. The charged rows are locked in
	// physical order (ctid), the order in which a completion's TID scan
	// deletes them, so the two never wait on each other in a cycle.
	q.claimTake = sql(`
WITH RECURSIVE n AS MATERIALIZED (
	SELECT least($1, greatest($5 - coalesce(nullif(current_setting('relaybus.claimed', true), ''), '0')::int, 0)) AS n
), walk AS MATERIALIZED (
	-- The first claimWalk lanes of the ring from $6, lane by lane (read
	-- through the LIMIT below, the conditions are evaluated in ring
	-- order and only until enough lanes are found). Scalar subqueries
	-- with LIMIT 1, not EXISTS: the planner may turn an EXISTS into a
	-- hashed subplan that reads every pending delivery once.
	SELECT r.lane FROM (
		SELECT ((g.i + $6) % 256)::smallint AS lane FROM generate_series(0, {walk} - 1) AS g(i)
		WHERE (SELECT n FROM n) > 0
	) r
	WHERE r.lane <> ALL ($2::smallint[])
		AND (SELECT true FROM {lanes} l WHERE l.lane = r.lane AND (l.lease_expires_at IS NULL OR l.lease_expires_at <= $3))
		AND {due}
	LIMIT (SELECT n FROM n) + 4
), unkeyed AS (
	-- Past the walk, only the lanes that have pending work: a skip scan
	-- of each index, one probe per such lane, evaluated only when the
	-- walk fell short (a shallow queue: few lanes have work).
	(SELECT d.lane FROM {deliveries} d WHERE d.status = 'pending' AND d.key IS NULL ORDER BY d.lane LIMIT 1)
	UNION ALL
	SELECT n.lane FROM unkeyed u CROSS JOIN LATERAL (
		SELECT d.lane FROM {deliveries} d
		WHERE d.status = 'pending' AND d.key IS NULL AND d.lane > u.lane
		ORDER BY d.lane LIMIT 1
	) n
), keyed AS (
	(SELECT d.lane FROM {deliveries} d WHERE d.status = 'pending' AND d.key IS NOT NULL ORDER BY d.lane LIMIT 1)
	UNION ALL
	SELECT n.lane FROM keyed k CROSS JOIN LATERAL (
		SELECT d.lane FROM {deliveries} d
		WHERE d.status = 'pending' AND d.key IS NOT NULL AND d.lane > k.lane
		ORDER BY d.lane LIMIT 1
	) n
), rest AS MATERIALIZED (
	SELECT r.lane FROM (
		SELECT b.lane FROM (SELECT lane FROM unkeyed UNION SELECT lane FROM keyed) b
		WHERE (SELECT count(*) FROM walk) < (SELECT n FROM n) + 4
			AND (b.lane - $6 + 256) % 256 >= {walk}
		ORDER BY (b.lane - $6 + 256) % 256
	) r
	WHERE r.lane <> ALL ($2::smallint[])
		AND (SELECT true FROM {lanes} l WHERE l.lane = r.lane AND (l.lease_expires_at IS NULL OR l.lease_expires_at <= $3))
		AND {due}
	LIMIT (SELECT n FROM n) + 4 - (SELECT count(*) FROM walk)
), cands AS MATERIALIZED (
	SELECT lane FROM walk UNION ALL SELECT lane FROM rest
), want AS MATERIALIZED (
	SELECT l.lane FROM {lanes} l
	WHERE l.lane = ANY (ARRAY(SELECT lane FROM cands))
		AND (l.lease_expires_at IS NULL OR l.lease_expires_at <= $3)
	ORDER BY array_position(ARRAY(SELECT lane FROM cands), l.lane)
	LIMIT (SELECT n FROM n)
	FOR UPDATE OF l SKIP LOCKED
)
SELECT set_config('relaybus.want', coalesce((SELECT array_agg(lane ORDER BY lane) FROM want), '{}')::text, true)`)

	// The take's writes, the statement after claimTake (same round trip,
	// same transaction): raise the epoch of the lanes claimTake locked
	// (relaybus.want), lease them, and charge what the abandoned ones had
	// in flight. A statement of its own, so that it reads the lanes at the
	// versions claimTake locked: when a lane changed after claimTake's
	// snapshot, its lock followed the row to its newest version, while an
	// UPDATE in the same statement would have read the snapshot's version
	// again and queued for that version's tuple lock, which a claimLock
	// waiting on the row holds while it waits for us: a deadlock on one
	// row (found under mixed load on 0.2.1). $1 owner, $2 holder, $3 now,
	// $4 the new lease expiry, $5 the last error of a delivery buried by
	// the charge.
	q.claimWrite = sql(`
WITH want AS MATERIALIZED (
	SELECT l.lane, l.in_flight FROM {lanes} l
	WHERE l.lane = ANY (coalesce(nullif(current_setting('relaybus.want', true), ''), '{}')::smallint[])
), taken AS (
	UPDATE {lanes} l SET epoch = l.epoch + 1, lease_owner = $1, lease_holder = $2,
		lease_expires_at = $4, in_flight = '{}', picks = 0
	FROM want w WHERE l.lane = w.lane
	RETURNING l.lane
), lost AS MATERIALIZED (
	SELECT d.id FROM {deliveries} d
	WHERE d.id = ANY (ARRAY(SELECT unnest(w.in_flight) FROM want w)) AND d.status = 'pending'
	ORDER BY d.ctid
	FOR NO KEY UPDATE
), charged AS (
	UPDATE {deliveries} d SET
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
	set_config('relaybus.taken', ARRAY(SELECT lane FROM taken ORDER BY lane)::text, true)`)

	// The lane locks taken in a statement of their own, before a
	// statement that writes those lanes (same round trip, same implicit
	// transaction). Under READ COMMITTED, a statement that locks a row in
	// one part (FOR NO KEY UPDATE) and updates it in another reads it
	// twice: when the row changed after the statement's snapshot, the
	// lock follows it to its newest version (n+1), but the UPDATE finds
	// the snapshot's version (n) and queues for the tuple lock of version
	// n, which a claim waiting on the row holds while it waits for
	// version n+1: a deadlock on one row, within one store instance
	// (found under mixed load on 0.2.1: claimLock against reschedule,
	// release and renewal). Locked first, the writing statement's
	// snapshot is taken after every other writer of those rows committed,
	// and it reads the rows at the versions it holds.
	//
	// lockLane: the lane of one lease, at the token's epoch ($1 lane, $2
	// epoch): the lane of a stale lease is not locked.
	q.lockLane = sql(`SELECT l.lane FROM {lanes} l WHERE l.lane = $1 AND l.epoch = $2 FOR NO KEY UPDATE`)
	// lockHeld: the lanes of $3 that (owner $1, holder $2) hold, in lane
	// order (the order of claimLock).
	q.lockHeld = sql(`
SELECT l.lane FROM {lanes} l
WHERE l.lane = ANY ($3::smallint[]) AND l.lease_owner = $1 AND l.lease_holder = $2
ORDER BY l.lane
FOR NO KEY UPDATE`)
	// lockOwned: every lane (owner $1, holder $2) holds, expired or not,
	// in lane order.
	q.lockOwned = sql(`
SELECT l.lane FROM {lanes} l
WHERE l.lease_owner = $1 AND l.lease_holder = $2
ORDER BY l.lane
FOR NO KEY UPDATE`)

	// Renew: move the expiry of the lanes that hold current leases of
	// (owner, holder): $1 owner, $2 holder, $3..$6 the leases (ids, lanes,
	// epochs, claims), $7 the new expiry. A lease is current when its lane
	// has the token's epoch, is held by (owner, holder) and lists the
	// delivery, and the delivery's claims are the token's; a lane moves
	// only for a current lease. The lanes are locked in lane order (a
	// claim locks its lanes in the same order, so the two never wait on
	// each other in a cycle; the lanes are locked already, by lockHeld in
	// the same round trip), and the lock re-checks epoch and holder. The
	// deliveries are read, never locked or written: a renewal cannot wait
	// for a completion. It returns the ids of the leases renewed.
	q.extend = sql(`
WITH t AS (
	SELECT * FROM unnest($3::bigint[], $4::smallint[], $5::bigint[], $6::bigint[]) AS t(id, lane, epoch, claims)
), cur AS MATERIALIZED (
	SELECT t.id, t.lane, t.epoch FROM t
	JOIN {lanes} l ON l.lane = t.lane AND l.epoch = t.epoch AND t.id = ANY (l.in_flight)
	JOIN {deliveries} d ON d.id = t.id AND d.lane = t.lane AND d.claims = t.claims AND d.status = 'pending'
	WHERE l.lease_owner = $1 AND l.lease_holder = $2
), lk AS (
	SELECT l.lane FROM {lanes} l
	WHERE (l.lane, l.epoch) IN (SELECT lane, epoch FROM cur) AND l.lease_owner = $1 AND l.lease_holder = $2
	ORDER BY l.lane
	FOR NO KEY UPDATE
), moved AS (
	UPDATE {lanes} l SET lease_expires_at = $7 FROM lk WHERE l.lane = lk.lane
	RETURNING l.lane
)
SELECT cur.id FROM cur JOIN moved ON moved.lane = cur.lane`)

	// Complete: delete the rows whose fence holds, in one statement; $1
	// ids, $2 lanes, $3 claims, $4 epochs (one entry per lease), $5 now.
	// The lane rows are read, not written or locked. It returns the token
	// each deleted row matched.
	q.completeMany = sql(`
WITH {fenced}
{deleteFenced}
RETURNING d.id, d.lane, d.claims, (SELECT l.epoch FROM {lanes} l WHERE l.lane = d.lane)`)

	q.completeManyHistory = sql(`
WITH {fenced}, gone AS (
	{deleteFenced}
	RETURNING d.*
), kept AS (
	{historyInsert}
)
SELECT g.id, g.lane, g.claims, (SELECT l.epoch FROM {lanes} l WHERE l.lane = g.lane) FROM gone g`)

	// Complete in the caller's transaction: FOR KEY SHARE on the lane
	// (the weakest lock that conflicts with a takeover's FOR UPDATE, and
	// not with the owner's claims and renewals), then the fenced delete.
	// $1 id, $2 lane, $3 claims, $4 epoch, $5 now.
	q.completeTx = sql(`
WITH l AS (
	SELECT l.lane FROM {lanes} l WHERE l.lane = $2 AND l.epoch = $4 AND $1 = ANY (l.in_flight)
	FOR KEY SHARE
)
DELETE FROM {deliveries} d USING l
WHERE d.id = $1 AND d.lane = l.lane AND d.claims = $3 AND d.status = 'pending'
RETURNING d.id`)

	q.completeTxHistory = sql(`
WITH l AS (
	SELECT l.lane FROM {lanes} l WHERE l.lane = $2 AND l.epoch = $4 AND $1 = ANY (l.in_flight)
	FOR KEY SHARE
), gone AS (
	DELETE FROM {deliveries} d USING l
	WHERE d.id = $1 AND d.lane = l.lane AND d.claims = $3 AND d.status = 'pending'
	RETURNING d.*
), kept AS (
	{historyInsert}
)
SELECT id FROM gone`)

	// The writes that end a claim without deleting the delivery (after
	// lockLane, in the same round trip): lock the lane (lanes before
	// deliveries; already held since lockLane), check the fence, update the
	// delivery and raise its claims, and take it out of in_flight. $1 id,
	// $2 lane, $3 claims, $4 epoch, $5 now; {set} adds the changes.
	ending := func(set string) string {
		return sql(`
WITH l AS (
	SELECT l.lane FROM {lanes} l WHERE l.lane = $2 AND l.epoch = $4 AND $1 = ANY (l.in_flight)
	FOR NO KEY UPDATE
), ended AS (
	UPDATE {deliveries} d SET claims = d.claims + 1, updated_at = $5, ` + set + `
	FROM l WHERE d.id = $1 AND d.lane = l.lane AND d.claims = $3 AND d.status = 'pending'
	RETURNING d.id
), u AS (
	UPDATE {lanes} x SET in_flight = array_remove(x.in_flight, $1)
	FROM ended WHERE x.lane = $2
)
SELECT count(*) FROM ended`)
	}
	// A failed attempt: charged here, when it ends.
	q.reschedule = ending(`attempts = d.attempts + 1, suspect = false, available_at = $6, last_error = $7`)
	q.bury = ending(`attempts = d.attempts + 1, suspect = false, status = 'dead', last_error = $6`)
	// A graceful release spends no attempt; a suspect stays one.
	q.release = ending(`available_at = d.available_at`)

	// Relinquish: release what (owner, holder) has in flight, expired
	// leases included (nobody took them over, so those attempts did not
	// end in a crash), and hand every such lane back. Lanes in lane
	// order (locked already, by lockOwned in the same round trip), then
	// the deliveries in physical order (as a completion).
	q.relinquish = sql(`
WITH l AS MATERIALIZED (
	SELECT l.lane, l.in_flight FROM {lanes} l
	WHERE l.lease_owner = $1 AND l.lease_holder = $2
	ORDER BY l.lane
	FOR NO KEY UPDATE
), x AS MATERIALIZED (
	SELECT d.id FROM {deliveries} d
	WHERE d.id = ANY (ARRAY(SELECT unnest(l.in_flight) FROM l)) AND d.status = 'pending'
	ORDER BY d.ctid
	FOR NO KEY UPDATE
), released AS (
	UPDATE {deliveries} d SET claims = d.claims + 1, updated_at = $3
	FROM x WHERE d.id = x.id
	RETURNING d.id
), u AS (
	UPDATE {lanes} y SET lease_owner = NULL, lease_holder = NULL, lease_expires_at = NULL, in_flight = '{}', picks = 0
	FROM l WHERE y.lane = l.lane
)
SELECT count(*) FROM released`)

	q.requeue = sql(`
UPDATE {deliveries} SET status = 'pending', attempts = 0, claims = claims + 1, suspect = false,
	available_at = $2, updated_at = $2
WHERE id = $1 AND status = 'dead'`)

	// Why a requeue found nothing: the delivery's status, or completed
	// when only the history has it.
	q.requeueStatus = sql(`
SELECT status FROM {deliveries} WHERE id = $1
UNION ALL
SELECT 'completed' FROM {history} WHERE id = $1`)

	// Statistics scan the tables: an admin call. A pending delivery that
	// is in flight counts as processing.
	q.statisticsCounts = sql(`
WITH flying AS MATERIALIZED (
	SELECT DISTINCT unnest(in_flight) AS id FROM {lanes} WHERE lease_owner IS NOT NULL
)
SELECT d.handler,
	CASE WHEN d.status = 'pending' AND EXISTS (SELECT 1 FROM flying f WHERE f.id = d.id)
		THEN 'processing' ELSE d.status END,
	count(*)
FROM {deliveries} d GROUP BY 1, 2
UNION ALL
SELECT handler, 'completed', count(*) FROM {history} GROUP BY 1`)
	q.statisticsOldest = sql(`
WITH flying AS MATERIALIZED (
	SELECT DISTINCT unnest(in_flight) AS id FROM {lanes} WHERE lease_owner IS NOT NULL
)
SELECT min(d.available_at) FROM {deliveries} d
WHERE d.status = 'pending' AND d.available_at <= $1
	AND NOT EXISTS (SELECT 1 FROM flying f WHERE f.id = d.id)`)

	// Purge, in id order and bounded by $2 (NULL: no bound). Dead rows
	// through their index; completed rows exist only as 0.1.0 left them
	// and in the history. The 0.1.0 rows have no index any more (0.2.0
	// does not write them), so their purge is a scan of the table.
	q.purgeDead = sql(`
WITH victims AS (
	SELECT id FROM {deliveries} WHERE status = 'dead' AND updated_at < $1 ORDER BY id LIMIT $2
)
DELETE FROM {deliveries} d USING victims WHERE d.id = victims.id`)
	q.purgeCompleted = sql(`
WITH victims AS (
	SELECT id FROM {deliveries} WHERE status = 'completed' AND completed_at < $1 ORDER BY id LIMIT $2
)
DELETE FROM {deliveries} d USING victims WHERE d.id = victims.id`)
	q.purgeHistory = sql(`
WITH victims AS (
	SELECT id FROM {history} WHERE completed_at < $1 ORDER BY id LIMIT $2
)
DELETE FROM {history} h USING victims WHERE h.id = victims.id`)

	// Events without any delivery or history row left, once they are
	// older than the completed cutoff (until then a republished event
	// finds them and its handlers; Purge runs it only when completed
	// deliveries have a retention). There is no index on events.created_at: this
	// scans the events, as befits a retention job rather than a hot path.
	q.purgeEvents = sql(`
DELETE FROM {events} AS e
WHERE e.created_at < $1
	AND NOT EXISTS (SELECT 1 FROM {deliveries} d WHERE d.event_id = e.id)
	AND NOT EXISTS (SELECT 1 FROM {history} h WHERE h.event_id = e.id)`)

	// Setup's advisory lock ($1 setupLockKey).
	q.setupLock = `SELECT pg_advisory_xact_lock($1)`
	return q
}
