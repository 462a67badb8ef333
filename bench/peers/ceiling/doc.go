// Command ceiling is the lane pattern in plain SQL, as a peer in the
// relaybus benchmark harness: a worker that speaks worker protocol 1
// (bench/protocol) and records what it publishes, handles and completes
// in the harness's record format (bench/record), on tables shaped like
// relaybus 0.2's, with nothing of the engine (no leases, fencing,
// suspects, renewals, completion batcher or dispatcher). It is the
// ceiling the engine is measured against: what the database does with
// the same pattern when a program does nothing else, in the same ABBA
// windows, on the same server, with the same workload and validation.
//
//	ceiling worker    protocol 1 entry point (the harness starts it)
//	ceiling version   prints this peer's version
//
// Build, test and measure it from this directory (the tests start a
// throwaway PostgreSQL from the binaries on PATH, or use
// RELAYBUS_TEST_DATABASE_URL; peertest says how; -update rewrites the
// golden protocol lines and records in testdata):
//
//	go build -o ceiling .
//	go vet ./... && go test ./...
//	go test -run '^$' -bench Dispatch -benchtime 1x
//
// It lives in its own module, like bench/peers/river, and imports from
// the main module (through a replace directive) only bench/protocol,
// bench/record, bench/stats and bench/worker/workerkit with workerpg:
// the relaybus worker's output, config reading and checks, option
// sorting, publish loop, pool and key-state query. Its only other
// dependency is pgx v5, the driver relaybus's PostgreSQL store uses. Its
// tests share their scaffolding with every peer's
// (bench/worker/workerkit/peertest).
//
// # Hello
//
// The version is "ceiling N (plain SQL lane pattern, pgx v5)", N raised
// whenever a statement or a setting below changes. The capabilities are
// those of a relaybus worker for PostgreSQL, plus:
//
//	peer                this is not a relaybus build; compare it as a peer
//	peer:ceiling        which peer
//	no-faults           not for the fault cells (see Cells)
//	completion-records  its dispatchers write a completion line per commit
//
// It keeps per-key order, so it does not list no-key-order: the keyed
// cells run on it and their order check applies.
//
// # Tables
//
// ceiling_events, ceiling_keys, ceiling_deliveries and ceiling_lanes, in
// the connection's default schema: relaybus 0.2's events, keys and
// deliveries tables with the same columns, types, keys, foreign key,
// partial indexes (lane, available_at, id) for unkeyed and (lane,
// handler, key, sequence) for keyed pending deliveries, and autovacuum
// setting, less the columns only the engine uses (deliveries.claims,
// suspect, completed_at; the lanes' epoch, owner, holder, expiry,
// in_flight and picks); no history and no version table. A lane is one
// row (lane smallint primary key, 256 of them) that is only ever locked,
// never written. Setup creates them in one transaction under an advisory
// lock; it is idempotent.
//
// # Publish
//
// A publish call is one statement (publishSQL), so one round trip and
// one implicit transaction: upsert the call's keys' sequence counters
// (keys in order; the rows stay locked until the commit, so sequences
// follow commit order), insert the events, and insert one delivery per
// (event, handler) with its lane (driver.LaneOf's FNV-1a of the key or
// the event id, modulo 256) and max_attempts. Publishers share a pool of
// store.pool_size connections.
//
// # Dispatch
//
// A dispatcher process runs claim streams, each on a connection of its
// own. A stream's steady state is one round trip per claim: one pgx.Batch
// (a pipeline, one Sync) of
//
//	DELETE FROM ceiling_deliveries WHERE ctid = ANY ($1::tid[])   the last claim's successes
//	UPDATE ceiling_deliveries ... FROM unnest(...)                 its failures: attempts + 1, retry or dead
//	COMMIT                                                         (ROLLBACK when it wrote nothing)
//	BEGIN
//	SELECT ... FROM (SELECT lane FROM ceiling_lanes WHERE lane >= $1 AND <work>
//	                 ORDER BY lane LIMIT $2 FOR UPDATE SKIP LOCKED)  lock the next lanes with work
//	SELECT ... LATERAL (due deliveries of each locked lane, in index order, LIMIT) JOIN ceiling_events
//
// after which the stream runs the claim's handlers, records them
// (record.Writer.Flush: one write(2)) and sends the next round trip. A
// lane is held by the row lock from the claim until that COMMIT, which
// holds the stream's completions: one process at a time holds a lane,
// and the claim that takes it next starts after that commit. The lock is
// a statement of its own before the claim (the lanes pass through a
// transaction-local setting), because under READ COMMITTED a statement
// that started before the last holder's commit could lock the lane and
// still read the deliveries that holder deleted. Lanes another stream
// holds are skipped, never waited for. Each stream walks the ring of
// lanes from its own position (spread over the ring by process and
// stream), past the lanes it took, so every lane with work is served in
// turn; a claim asks for one lane, then twice as many each time the
// lanes it got did not fill its batch (up to max_lanes), and for as many
// as it used when they did. Only lanes with work are locked: a due
// pending delivery. A claim that ran nothing is rolled back at once, and
// a stream whose whole turn of the ring ran nothing waits poll_ms. About
// once a second a stream sends its COMMIT in a round trip of its own and
// the next claim in another: PostgreSQL flushes a backend's statistics
// (pg_stat_user_tables, pg_stat_wal, which the harness's per-table and
// WAL-record metrics read) only while it waits outside a transaction
// block, which a stream that begins each claim in its commit's round
// trip never does. Completions delete by address (a TID scan,
// whatever the statistics): the claim read those rows in the same
// transaction, under the lanes' locks, and nothing else writes a pending
// delivery of a locked lane.
//
// The per-key rule: the keyed claim reads, per lane, the first pending
// deliveries in (handler, key, sequence) order, so each (handler, key)
// comes as a prefix of its pending deliveries from its head. A key whose
// head is not due (waiting for its retry) runs nothing; otherwise its
// deliveries run one at a time in sequence order, and a failure stops
// the key's run (the later ones stay pending behind their head). Dead
// deliveries are not pending, so they block nothing. A key lives in one
// lane, and a lane is held by one stream at a time, so one delivery of a
// key and handler is in flight at a time, across processes. Taking a
// key's several next deliveries in one claim, in order, is what the
// lane lock allows and what makes a hot key cost one claim per batch
// rather than one per delivery.
//
// Failures: a failed attempt's row gets attempts + 1, its error, and
// either available_at = now + relaybus's backoff (min(base * 2^(n-1),
// max) spread by ±10%, from the workload's retry delays, default 1 s and
// 1 h) or, at its last attempt (workload.max_attempts, default 10),
// status dead.
//
// # Settings
//
// The settings BENCHMARKS.md quotes for this side, per dispatcher
// process:
//
//	streams                 4 connections, each one claim stream (dispatcher.options.streams,
//	                        [1, 64]; at most store.pool_size when that is set): the lane pattern
//	                        in plain pgx peaked at 8 connections in all on this 2-core machine,
//	                        and the dispatch cells run 2 processes
//	batch                   dispatcher.batch (default 10): the most deliveries of one claim
//	max lanes               16 lanes at most per claim (dispatcher.options.max_lanes, [1, 256])
//	poll                    dispatcher.poll_ms (default 1 s): the wait after a turn of the
//	                        ring that found nothing to run
//	handler goroutines      dispatcher.concurrency / streams per stream, for handlers that cost
//	                        something (handler_cost_us or extra_cost_per_delivery_us); a no-op
//	                        handler runs inline on its stream, since spreading it over
//	                        goroutines only spends CPU the server needs
//	statements              pgx's default statement cache: each statement is prepared once per
//	                        connection and then sent as Bind/Execute in the pipeline
//	durability              the server's: nothing sets fsync or synchronous_commit, so with the
//	                        harness's servers (fsync on, synchronous_commit on) every COMMIT of
//	                        completions and every publish waits for its WAL flush, as
//	                        relaybus's do; several streams' commits share flushes (group commit)
//
// In the ready line, every option is applied or ignored:
//
//	dispatcher.concurrency, batch, poll_ms, extra_cost_per_delivery_us  applied
//	dispatcher.options.streams, max_lanes                               applied
//	dispatcher.lease_ms          ignored: no lease, a lane is held by a row lock for one transaction
//	dispatcher.completion_*      ignored: a claim's completions are one statement, sent with the
//	                             next claim
//
// and so is any other free-form option. cpu_profile_path is applied: a
// CPU profile of the role (runtime/pprof), as the relaybus worker writes.
//
// # Cells
//
// The ceiling is meant for the work cells: publish (1), dispatch (2),
// keyed (3) and mixed (5). It lists no-faults, and the harness is to skip
// the fault scenario (4) for it: nothing is written at claim, so a
// dispatcher killed, or a database restarted or crashed, between a
// handle and the commit of its completion leaves the delivery pending at
// the same attempt. It runs again (nothing is lost), but the repeat
// carries the attempt of the handle it repeats, which the validator
// rightly calls a duplicate; counting that attempt needs a write at
// claim (the engine's lease), which is what the ceiling leaves out. The
// handler-work cells (7) compare lease renewals beside completions,
// which the ceiling has none of, and the upgrade (6) is relaybus's own.
//
// # Records
//
// A handled delivery's record (with its end, the process name as holder
// and the token lane:transaction id, unique per claim) reaches the
// kernel before the round trip that completes it is sent. A failed
// attempt is recorded too (ok 0). After a commit returns, each completed
// delivery gets a completion line, written with the next claim's records
// or when the file is closed. A publisher records each event after its
// statement returned, with the call's start and the commit's return, as
// a relaybus worker does; an error before the statement was sent, or
// from the server, means nothing was published, any other error is an
// uncertain commit.
//
// # Counters
//
// handled and handler_failed count handler calls; completed, rescheduled
// and buried count rows whose commit returned; claims counts claim
// round trips and claimed the deliveries they returned (after the cut to
// the batch); released counts claimed deliveries not run (behind a
// failure of their key, or not due). leases_lost stays 0.
//
// # Inspect
//
// pending is the pending rows (a delivery in flight is one: it is in
// flight only inside a dispatcher's open transaction); processing is 0;
// dead the dead rows, each listed as a dead letter (event id, handler,
// attempts, last error); completed is the deliveries the events were
// published with (events.handlers) less the pending and dead ones; keys
// are every key's sequence counter beside its events' count and highest
// sequence, as the relaybus worker reports its store's.
//
// # Stopping
//
// SIGTERM stops each stream after its current claim: it handles it,
// completes and commits it, and claims no more; the worker then writes
// done.
package main
