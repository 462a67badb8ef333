// Package postgres is the PostgreSQL store of relaybus 0.2.0, on pgx/v5:
// lane leases and delete on complete. A claim writes lane rows, not
// delivery rows; a completion deletes the delivery. On the happy path a
// delivery row is inserted once and deleted once, and every other write is
// a HOT update of one of 256 lane rows.
//
//	pool, err := pgxpool.New(ctx, dsn)
//	...
//	store, err := postgres.New(pool, nil) // schema "public", tables "relaybus_*"
//	...
//	if err := store.Setup(ctx); err != nil { ... } // installs 0.2.0, or upgrades 0.1.0 in place
//
//	tx, err := store.TxBegin(ctx) // or a pgx.Tx of your own
//	res, err := store.EventPublishTx(ctx, tx, &driver.EventPublishParams{...})
//	err = store.TxCommit(ctx, tx)
//
// The protocol, the same for every 0.2.0 store, is docs/lane-protocol.md;
// the conformance suite (relaybus/storetest) holds this store to it, with
// and without the completion history.
//
// # Schema
//
// The whole schema is one script, schema.sql with upgrade.sql (see SQL
// below), rendered with the validated Options.Schema and
// Options.TablePrefix (lower case letters, digits and underscores only,
// always double quoted); SchemaSQL returns it. Setup runs it in one
// transaction under a transaction-level advisory lock. Every statement is
// idempotent: Setup can run any number of times and from several
// processes at once.
//
//   - relaybus_events: one row per event (id, type, key, sequence, payload
//     bytea, headers jsonb, created_at) and handlers, every handler the
//     event ever had a delivery for. A republished event id gets
//     deliveries only for handlers not in the list, so a completed
//     handler never runs twice although its delivery row is gone.
//   - relaybus_keys: one counter row per ordering key. A publish upserts
//     it, which keeps it locked until the publishing transaction ends, so
//     sequences are given out in commit order.
//   - relaybus_deliveries: one row per (event, handler) from publish until
//     its completion commits: status (pending or dead; completed only for
//     rows 0.1.0 left), attempts (the attempts that have ended), the due
//     time, lane (driver.LaneOf(key, event id)), claims (raised by
//     every write that ends a claim without deleting the row) and
//     suspect (in flight when its lane was taken over). No lease columns.
//     Indexes: the primary key; (event_id, handler) unique (idempotent
//     publish); (lane, available_at, id) of pending unkeyed rows (claims);
//     (lane, handler, key, sequence) of pending keyed rows (the heads of a
//     lane's keys, and the per-key rule); (updated_at, id) of dead rows
//     (retention). None of them covers a column the happy path writes.
//     autovacuum_vacuum_scale_factor is 0.02: deletes leave a dead tuple
//     per delivery.
//   - relaybus_lanes: 256 rows (epoch, lease owner, holder, expiry,
//     in_flight ids), fillfactor 50, no secondary index, each row in a
//     page of its own, so that every update of a lane is HOT.
//   - relaybus_history: the optional completion history
//     (Options.CompletionHistory): one row inserted per completion, listed
//     and counted as completed, deleted by Purge.
//   - relaybus_paused_handlers: a row per paused handler (Bus.PauseHandler:
//     name, reason, time), read by every dispatcher once per poll.
//   - relaybus_schema_version: the schema version, 2.
//
// The (lane, available_at, id) index holds unkeyed deliveries only: were
// every pending row in it, a claim on lanes whose hot keys have long
// backlogs behind their running heads would walk every one of those
// followers (with an ordering check each) to find the unkeyed work or the
// next head. Keyed deliveries are found by a skip scan of the key index
// instead, one probe per key, and TestPlans bounds the buffers a claim
// touches on such a backlog.
//
// # Publishing
//
// A publish is one round trip: publish.sql's publishInsert and
// publishNumber, sent as one pipelined batch whose second statement
// needs nothing the client learns from the first (EventPublishTx has the
// details). A call with no keyed event sends the first alone, and the
// second (publishStale) only when an event of the call existed: then in
// a second round trip in the caller's transaction, and in the store's
// own by sending the call again whole. A call of one event sends its
// first statement with scalar parameters (publishInsertOne), a cheaper
// statement with the same writes. EventPublish, the Bus's Publish,
// sends its batch without BEGIN and COMMIT: the server runs a pipeline
// in one implicit transaction, committed when the batch ends and rolled
// back whole when one of its statements fails. docs/publishing.md has
// what each keeps of
// the guarantees, and the group commit above it.
//
// # SQL
//
// Every statement is in a .sql file of this package, one file per
// concern, embedded and parsed at init into one text/template set:
// schema.sql (the schema script, rendered whole) and upgrade.sql (its
// 0.1.0 upgrade step), publish.sql, claim.sql, lease.sql (renewal, the
// lane locks, reschedule, bury, release, relinquish), complete.sql,
// admin.sql, and delivery.sql (the columns a delivery is read with, and
// DeliveryList). A statement is a {{define "name"}} block with its
// comment above it, outside the block, so that the comment is not sent;
// name is the field of the store's queries it is rendered into, once, at
// New. Shared pieces are templates too ({{template "fenced" .}}), and the
// table names and limits are fields ({{.Deliveries}}, {{.ClaimQuota}}).
// DeliveryList's statement is rendered per call, its filters being
// {{with}} blocks that hold only parameter numbers. TestStatementsGolden
// compares every rendered statement with testdata/statements.golden, and
// TestPlans checks the plans of the hot ones.
//
// The hot statements are planned the same whatever the statistics: the
// statement that opens each round trip of a claim, of a completion in a
// transaction of the store's own and of a publish sets enable_seqscan off
// and plan_cache_mode to force_generic_plan for its transaction
// (planSettings in claim.sql), so that each runs the generic plan
// TestPlans checks, on tables never analyzed or analyzed while empty
// (TestPlansAfterAnEmptyAnalyze), and a plan a connection made while a
// table was small does not scan it as it grows. In the caller's
// transaction a publish puts the caller's values back after its
// statements.
//
// # Claims, leases and fencing
//
// A dispatcher (owner) leases lanes, and within a lane every delivery it
// claims; the lane is held by (owner, holder), where holder is a random
// name of the Store instance, new at every New. DeliveryClaim:
//
//  1. Lock the lanes held (FOR NO KEY UPDATE, lane order), then in one
//     statement drop the completed ids from their in_flight, pick the
//     oldest due unkeyed deliveries (an ordered index scan per lane that
//     stops at the limit) and the due heads of the lanes' keys (nothing of
//     the key in flight), record the picks in the lanes' rows and hand
//     back every lane left with nothing in flight. The lock comes first in
//     a statement of its own: a statement that waited for a lane lock
//     would see the lane as it is now and the deliveries as they were,
//     and could hand out a stale token.
//  2. If that did not fill the limit: take up to 4 lanes that are free or
//     whose lease expired and that have due work, oldest first (FOR
//     UPDATE SKIP LOCKED; lanes with any work are found by a skip scan of
//     each index), raising their epoch; taking an abandoned lane charges
//     each delivery it had in flight one attempt, marks it a suspect and
//     buries it when that spends its budget and it was a suspect already
//     (one that was not may only have run beside the crasher: its next
//     attempt, alone, decides). Then step 1 on the lanes just taken.
//
// Steps 1 and 2 are one round trip and one implicit transaction: the
// statements pass the claim's count and the lanes taken along in
// transaction-local settings, so step 2 takes nothing when step 1 filled
// the claim. Only when step 2 got every lane it asked for and the claim is
// still short does another round trip take 8, then 16, ... lanes.
//
// A suspect is claimed alone, only as the first thing a claim finds, and
// never by a busy caller (DeliveryClaimParams.Busy): when a busy caller's
// oldest candidate is a suspect, its claim returns nothing and takes no
// lanes, so that it drains and claims the suspect with nothing in flight.
// A claim round trip that hands out deliveries commits synchronously (as
// the server's synchronous_commit says, on by default; one that hands out
// nothing commits without waiting for its flush): a lease token is handed
// out only once the write that issued it is durable, so a database crash
// cannot make the store issue one token twice (a claim lost in a crash
// leaves its lane at the previous epoch, and the next take would rebuild
// the same token for another holder). A server configured with
// synchronous_commit off for every transaction gives that guarantee up,
// for claims and completions alike.
//
// The lease token is "lane:epoch:claims" (driver.LaneToken). A fenced
// write holds when the lane still has the epoch and lists the delivery in
// in_flight, and the delivery's claims counter is the token's; a stale
// lease's write changes nothing and reports false, and a token or ID of
// another form is an ErrInvalid error that writes nothing.
//
//   - LeaseExtend writes lane rows only, for current leases only.
//   - DeliveryCompleteMany is one statement: a primary-key probe per lease
//     that checks its fence, then a DELETE of those rows by address (TID
//     scan) that re-checks the claims, plus the history rows when on. The
//     lane rows are read, never written or locked.
//   - DeliveryCompleteClaim (driver.CompletingClaimer) runs that
//     statement inside a claim's first round trip, after step 1's lane
//     lock and before step 1 reads deliveries: one transaction, one
//     synchronous commit (whatever it claimed), and a claim that sees the
//     keys and lanes the completions freed. The dispatcher lets each claim
//     carry the successes waiting to be completed.
//   - DeliveryCompleteTx takes FOR KEY SHARE on the lane in the caller's
//     transaction and deletes there. A takeover locks the lane FOR UPDATE
//     SKIP LOCKED, so it skips the lane until the transaction ends: a
//     completion and a takeover never both commit.
//   - Reschedule and bury lock the lane, charge the attempt, raise claims
//     and take the delivery out of in_flight; release does the same
//     without charging; OwnerRelinquish releases everything (owner,
//     holder) has in flight and hands its lanes back at once.
//
// Lock order: lanes before deliveries; several lanes in lane order;
// several deliveries in physical order (a completion's TID scan, a
// takeover's charge and a relinquish all sort by ctid). A completion
// locks no lane and a renewal no delivery, so the two never wait on each
// other. No statement locks a lane row in one part and writes it in
// another: the lock comes first, in a statement of its own (lease.sql).
// TestNoDeadlockRenewalsCompletionsClaims and TestNoDeadlockUnderMixedLoad
// run all of them at once.
//
// # Costs
//
// Measured with the benchmarks of bench_test.go on a 2-core machine shared
// with other work, a server with fsync on (read the shapes and ratios,
// not the rates):
//
//	RELAYBUS_TEST_DATABASE_URL=postgres://USER@127.0.0.1:PORT/postgres \
//	go test ./relaybus/postgres -run '^$' -bench ClaimCompleteParallel -benchtime 400x
//
// Dispatch of a deep unkeyed backlog, four claimers, batches of 200: 0
// delivery updates, 0.023 to 0.03 lane updates per delivery, all HOT,
// 206 to 256 B of WAL per delivery after a checkpoint (a heap delete
// record and the full-page images of the deleted rows' pages), 0.03
// statements per delivery. A hot key costs a claim and a completion per
// delivery (BenchmarkClaimHotKeys), the claim committing without a WAL
// flush.
//
// What got worse, and what to do about it:
//
//   - Completed deliveries are deleted: not listed or counted unless
//     CompletionHistory is on (one more insert per completion).
//   - Lane exclusivity: while a dispatcher holds a lane under a live
//     lease, other dispatchers do not see its deliveries. A crashed
//     dispatcher delays its lanes by the lease duration; a stopping one
//     hands them back (OwnerRelinquish). A few hot keys live in few lanes
//     and run on few dispatchers.
//   - A claim that its held lanes do not fill looks for more lanes (a skip
//     scan of each index, a probe per busy free lane): the cost of a
//     shallow queue. A claim from held lanes costs about a probe per
//     in-flight delivery (to drop completed ids) and per key of the lane.
//   - Deletes leave one dead tuple per delivery for autovacuum. Watch it
//     with StoreHealth (dead rows, last vacuum, the HOT share of lane
//     updates, the transaction holding the xmin horizon back) and
//     Bus.WatchStoreHealth; docs/operations.md says what to do about each
//     warning.
//   - Reschedule, bury and requeue update indexed columns (not HOT): the
//     rare path.
//   - Listings, statistics and the purge of 0.1.0's completed rows scan
//     the table (no index on status or created_at: it would cover columns
//     the happy path writes). Statistics is one scan, 53 ms at best at
//     200,000 deliveries (BenchmarkStatistics), unless statistics
//     counters are on (Store.EnableStatisticsCounters): triggers then
//     keep counts on every write and Statistics reads them, under a
//     millisecond at that size (docs/operations.md has both costs).
//   - An attempt is charged when it ends or at takeover; between a crash
//     and the takeover the deliveries are listed as processing.
//   - Events outlive their deliveries until Purge; after a purge a
//     republished event id is a new event.
//
// # Wake-ups
//
// The store offers driver.Waker on LISTEN/NOTIFY, so that an idle Bus
// claims new work within milliseconds of its commit instead of at its
// next poll (listen.go has the details, listen.sql and publish.sql's
// publishWake the statements):
//
//   - A publish that adds deliveries announces them in its own
//     transaction, with the deliveries' insert (no round trip of its
//     own); PostgreSQL delivers the notification at commit, and not at
//     all on a rollback. NOTIFY holds a database-wide lock from commit
//     until the commit's WAL flush ends, so a store has one notifying
//     transaction at a time: a publish tries at most every 2 ms, and
//     notifies only when the store's last notifying transaction has
//     ended. The publishes that do not are announced by the next one
//     that does, or by a notification outside any transaction (no WAL,
//     no flush) 2 ms after the last of them (at most 10 ms after the
//     first while they keep coming), and once more 100 ms after the last.
//     A transaction that commits later than that after its publish, with
//     nothing announced after it, waits for the next wake-up or poll.
//   - A Bus listens on one connection of its own per dispatcher, made
//     with the pool's settings (not taken from the pool), application_name
//     "relaybus wake-up listener" unless the settings name one. It pings
//     every 15 s, and the Bus reconnects with a backoff when it is lost.
//   - Behind a connection pooler in transaction or statement mode
//     (PgBouncer), LISTEN runs on a server connection that is handed to
//     others at once, and no notification comes back. The listener sends
//     itself one after its LISTEN and waits for it; when it does not come
//     it gives its LISTEN up, the Bus says once that wake-ups are
//     unavailable and polls (Config.PollInterval). In session pooling
//     wake-ups work. The pool itself needs pgx's exec or simple protocol
//     behind a transaction pooler (no named prepared statements), as any
//     pgx pool does.
//
// The announcement costs a publish one statement in its last round trip
// at most every 2 ms, and the store a notification on the pool at most
// every 10 ms while publishes keep coming that cannot announce
// themselves, whether or not anyone listens; relaybus.Config's
// DisableWakeups stops a Bus from listening, not a store from
// announcing.
//
// # Upgrading from 0.1.0
//
// Setup upgrades a 0.1.0 schema in place, in the same advisory-lock
// transaction as an install, when deliveries.lease_token (0.1.0's marker)
// exists, and can run any number of times: it fills events.handlers from
// every delivery (completed ones included), adds lane, claims and suspect
// and fills lane with the hash LaneOf uses, turns processing deliveries
// into pending suspects with their attempt counted (not buried even on
// their last attempt: 0.1.0 had no suspects, and a takeover buries only a
// delivery that was a suspect already), drops the seven
// 0.1.0 indexes and the lease columns, creates the new indexes, lanes,
// history and version tables, and sets the storage parameters. 0.1.0's
// completed rows stay, listed, counted and purged as completed. Every
// delivery row is rewritten once: purge old completed deliveries first.
// Stop every 0.1.0 worker before: they would fail on the dropped columns.
// There is no way back but a backup. SchemaSQL is the same script, for a
// migration tool of your own. Setup refuses, writing nothing, a schema
// whose recorded version is newer than SchemaVersion or whose tables are
// neither 0.1.0's nor 0.2.0's (ErrUnknownSchema).
//
// # Errors
//
// Invalid parameters return the relaybus validation error unchanged
// (errors.Is relaytype.ErrInvalid). Driver errors go through one mapping
// (errorFrom): no rows is relaytype.ErrNotFound, text PostgreSQL cannot
// store (such as \u0000 in a jsonb header value) is relaytype.ErrInvalid,
// a missing table, schema or column (a store used before Setup) is
// ErrNotSetUp, whose text says to call Setup.
// Every error this package makes starts with "relaybus/postgres: ".
package postgres
