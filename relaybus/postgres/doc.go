// Package postgres is the PostgreSQL store of relaybus 0.1 (0.1.0 and its
// patch releases), on pgx/v5: row leases. A claim writes the lease onto
// the delivery row; renewals and the completion write that row again.
//
// It is the baseline later versions are measured against, so it is built
// to be correct and reasonable, not to be beaten: it passes the same
// conformance suite (relaybus/storetest) as every store.
//
//	pool, err := pgxpool.New(ctx, dsn)
//	...
//	store, err := postgres.New(pool, nil) // schema "public", tables "relaybus_*"
//	...
//	if err := store.Setup(ctx); err != nil { ... }
//
//	tx, err := store.TxBegin(ctx) // or a pgx.Tx of your own
//	res, err := store.EventPublishTx(ctx, tx, &relaybus.EventPublishParams{...})
//	err = store.TxCommit(ctx, tx)
//
// # Schema
//
// The whole schema is one embedded file, schema.sql, rendered with the
// validated Options.Schema and Options.TablePrefix (lower case letters,
// digits and underscores only, always double quoted); SchemaSQL returns
// it. Setup runs it in one transaction under a transaction-level advisory
// lock, and every statement is CREATE ... IF NOT EXISTS, so Setup is
// idempotent and several processes may run it at once. The file is the
// verbatim 0.1.0 fixture that the 0.2.0 upgrade starts from.
//
//   - relaybus_events: one row per event (id, type, key, sequence,
//     payload bytea, headers jsonb, created_at).
//   - relaybus_keys: one counter row per ordering key. A publish upserts
//     it (INSERT ... ON CONFLICT DO UPDATE), which keeps it locked until
//     the publishing transaction ends: the next publisher of the key
//     waits, so sequences are given out in commit order.
//   - relaybus_deliveries: one row per (event, handler) with its status
//     (pending, processing, completed, dead), attempts, due time, lease
//     (owner, token, expiry), last error and timestamps. Eight indexes
//     besides the primary key: due (available_at, id) for pending rows,
//     the same for unkeyed pending rows, the ordering index (handler,
//     key, sequence), status+created and handler+created for listing,
//     completed_at for retention, lease expiry for processing rows, and
//     the (event_id, handler) unique key.
//
// # Claims, leases and fencing
//
// DeliveryClaim sends two statements in one round trip: first it buries
// the expired leases whose attempt budget is spent (status dead, "lease
// expired after the final attempt"), then one UPDATE leases the oldest
// due rows of three FOR UPDATE SKIP LOCKED selections, each an ordered
// index scan that stops at the limit: expired processing rows (a
// takeover), unkeyed pending rows and keyed pending rows. A keyed row qualifies
// only when no row of its handler and key with a lower sequence is
// pending or processing, so each key has at most one delivery in flight
// per handler. Each claimed delivery gets a new token (128 random bits and
// its ID); every later write under the lease is fenced by
// "id = $1 AND status = 'processing' AND lease_token = $2", so a holder
// whose lease was taken over changes nothing and is told false.
// DeliveryCompleteTx runs the same fenced UPDATE in the caller's
// transaction: the row stays locked until it ends, so a takeover skips
// it, and a rollback leaves the lease as it was.
//
// Statements that lock several deliveries (LeaseExtend,
// DeliveryCompleteMany, OwnerRelinquish, Purge) lock them in ascending id
// before they write, so that no two of them can deadlock; a claim locks
// only with SKIP LOCKED, which never waits.
//
// The claim's plan depends on planner statistics: without them
// PostgreSQL expects almost no keyed delivery to be due and plans the
// keyed selection as a sort of every keyed row. Until the deliveries
// table has statistics, DeliveryClaim checks for them first and, once the
// table holds 1,000 rows, runs ANALYZE on it (once, under an advisory
// lock); a role that may not analyze the table leaves it to autovacuum.
//
// # Costs
//
// This version's costs, which the 0.2.0 lane-lease design removes:
//
//   - Three writes of the delivery row after its insert: the claim, every
//     lease renewal, and the completion. Each of them changes status or
//     the lease expiry, which indexes contain, so none is a HOT update:
//     every write adds a new entry to every index of the table and
//     leaves a dead row version and dead index entries for autovacuum.
//   - Completed deliveries stay in the table (status completed) until
//     Purge; the table and its indexes grow with the history.
//   - A claim evaluates the per-key ordering check for each keyed
//     candidate, and returns at most one delivery per key and handler.
//   - Statistics and Purge of events scan their tables: they are admin
//     and retention calls.
//
// # Errors
//
// Invalid parameters return the relaybus validation error unchanged
// (errors.Is relaybus.ErrInvalid). Driver errors go through one mapping
// (errorFrom): no rows is relaybus.ErrNotFound, text PostgreSQL cannot
// store (such as \u0000 in a jsonb header value) is relaybus.ErrInvalid.
// Every error this package makes starts with "relaybus/postgres: ".
package postgres
