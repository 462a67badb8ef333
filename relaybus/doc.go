// Package relaybus is a transactional outbox and delivery engine: a service
// publishes events in the same transaction as its own writes, and relaybus
// runs every handler registered for each event, in key order, at least
// once, retrying failures and keeping dead letters, without losing
// anything.
//
// A Bus sits on a Store, which is generic over the store's transaction
// type, so events are published inside the caller's own transaction
// (pgx.Tx for relaybus/postgres, *memory.Tx for relaybus/memory).
//
//	store := memory.New(nil)
//	bus, err := relaybus.New[*memory.Tx](store, relaybus.Config{})
//	if err != nil { ... }
//	err = bus.Handle("order.created", "mailer", sendMail, nil)
//	...
//	go bus.Run(ctx) // until ctx is done
//
// # Publishing
//
// PublishTx inserts events, and one delivery per handler of their type,
// in the caller's transaction: they exist if and only if the transaction
// commits, and nothing is visible to dispatchers before. Publish does the
// same in a transaction of its own, and gathers concurrent calls into
// group commits (Config.PublishGroupWait): one transaction for the calls
// that arrive while two others are being written, each call still returning
// its own outcome once its events committed. With the PostgreSQL store a
// PublishTx is one round trip, and so is a whole Publish (see
// docs/publishing.md).
//
//	tx, _ := pool.Begin(ctx)
//	_, _ = tx.Exec(ctx, "UPDATE orders SET state = 'paid' WHERE id = $1", id)
//	err := bus.PublishTx(ctx, tx, &relaybus.Event{Type: "order.paid", Key: id, Payload: body})
//	...
//	err = tx.Commit(ctx)
//
// Event.ID is the idempotency key: republishing an ID adds no delivery a
// handler already has. An empty ID is generated (a UUIDv7) and written back
// into the event, so a caller that retries after an error republishes the
// same event. Every event is validated before anything is written (type,
// key, headers, payload size against Config.MaxPayloadBytes); an event
// type with no handler is an error rather than a silent drop.
//
// # Handlers
//
// Handle registers a HandlerFunc for an event type under a name that is
// unique across the bus and is stored with each delivery, so renaming a
// handler orphans its pending deliveries. Several handlers may share an
// event type; each gets its own delivery with its own attempts, retries
// and dead letter. A process that publishes but does not run some
// handlers lists them with Declare: publishing needs to know every handler
// that exists.
//
//	err := bus.Handle("order.paid", "invoice", func(ctx context.Context, d *relaybus.Delivery) error {
//		return invoices.Issue(ctx, d.EventID, d.Payload)
//	}, &relaybus.HandlerOptions{MaxAttempts: 5, Timeout: 30 * time.Second})
//
// A handler's ctx is cancelled on shutdown, on its Timeout, and when its
// lease is lost; handlers should return promptly then.
//
// # Dispatching
//
// Run (or Start and Stop) runs the dispatcher: one claim loop leases up to
// min(BatchSize, free slots) due deliveries at a time and hands each to
// one of Concurrency workers, so at most Concurrency run at once. A full batch is followed by
// another claim at once, and so is a keyed delivery that completed or was
// buried (its key's next delivery may be due); otherwise the loop waits
// PollInterval, which stays the correctness path: it finds everything,
// whatever was announced. Where the store offers wake-ups
// (driver.Waker: PostgreSQL's LISTEN/NOTIFY, the memory store's), the
// dispatcher listens on one connection of its own, and the idle loop
// claims as soon as a publish commits, another process hands its lanes
// back, or the listener (re)connects, instead of at its next poll; a lost
// wake-up costs latency, never a delivery (Config.DisableWakeups, and
// PollInterval for how the two work together). When most slots are busy
// it waits up to a millisecond for more to free up, so a busy dispatcher
// claims in batches, not one delivery per handler. Claim errors are logged and retried with a backoff
// capped at 16 poll intervals; they never stop Run.
//
// Every LeaseRenewInterval one LeaseExtend call renews every lease the
// dispatcher holds: of the deliveries whose handlers run, and of those
// whose final write is queued or under way (a completion that waits must
// not outlive its lease). A lease the store reports lost (or one our
// clock sees expire because renewals kept failing) cancels its handler,
// and nothing more is written for it: another worker owns the delivery
// now.
//
// Successes are completed in batches (relaybus/batch): those that finish
// within CompletionBatchWindow (2ms) of each other, up to
// CompletionBatchMax, go to the store in one DeliveryCompleteMany call.
// Config.BeforeComplete, if set, sees each batch first (the benchmark
// harness records handled deliveries there). A final write (complete,
// reschedule, bury, release) that fails is retried with backoff for as
// long as its (renewed) lease holds, and never past it, so a database
// restart does not make finished work run again.
//
// A delivery the store marks Suspect (it was in flight when its lease was
// taken over, so it may be what crashed its last process) runs alone:
// every claim tells the store whether the dispatcher has anything in
// flight, and a store answers a busy dispatcher nothing while a suspect is
// the oldest due delivery, so the dispatcher drains; its next claim with
// nothing in flight gets the suspect alone, which it runs before it claims
// again. A suspect that reaches a busy dispatcher anyway is released
// unstarted. A delivery that keeps crashing its process is then charged
// into the dead letters by itself, and a takeover buries only a delivery
// that was a suspect already, never one that merely ran beside it.
//
// Stopping is graceful: claims stop, running handlers' contexts are
// cancelled, handlers that still return nil are completed, deliveries that
// were aborted by the shutdown or never started are released without
// spending an attempt, and finally OwnerRelinquish hands back anything the
// owner still holds, so other workers need not wait for leases to expire.
//
// DispatcherStats returns cheap atomic counters of all of this, and what
// the dispatcher has in flight. A handler fences its own writes elsewhere
// with Delivery.FencingToken, which grows per key from one lease holder
// to the next; StoreHealth and WatchStoreHealth report on the store's
// upkeep (docs/operations.md in the repository says what to do about
// each warning).
//
// # Ordering
//
// Deliveries of events with the same non-empty Key run per handler one at
// a time, in the order their publishing transactions committed: the store
// only hands out a keyed delivery when no lower sequence of its handler and
// key is pending or processing. A failing delivery holds its key back until
// it succeeds or becomes a dead letter. Events without a Key are unordered
// and run concurrently.
//
// # Retries and dead letters
//
// A handler error or panic (recovered, logged with its stack) fails the
// attempt. The delivery is rescheduled after min(RetryBaseDelay *
// 2^(attempt-1), RetryMaxDelay), spread by ±RetryJitter, until its attempt
// budget (HandlerOptions.MaxAttempts, else Config.MaxAttempts) is spent;
// then it is buried as a dead letter with its last error. Wrapping an error
// in Permanent buries the delivery at once. Dead letters stay until
// Requeue gives them a fresh budget or PurgeExpired removes them.
//
//	if errors.Is(err, ErrMalformed) {
//		return relaybus.Permanent(err)
//	}
//
// # Transactional handlers
//
// HandleTx runs the handler inside a store transaction and completes the
// delivery in it: the handler's writes and the completion commit together
// or not at all, so they happen effectively once even though the handler
// may run more than once. A failure, a panic or a lost lease rolls the
// transaction back.
//
//	err := bus.HandleTx("order.paid", "ledger", func(ctx context.Context, tx pgx.Tx, d *relaybus.Delivery) error {
//		_, err := tx.Exec(ctx, "INSERT INTO ledger (event_id, amount) VALUES ($1, $2)", d.EventID, amount(d))
//		return err
//	}, nil)
//
// # Batch handlers
//
// HandleBatch registers a handler that takes several deliveries in one
// call: for a keyed batch, the key and up to BatchOptions.MaxSize
// consecutive due deliveries of it, in sequence order; for unkeyed
// deliveries, any mix of them. It returns one error per delivery. A
// handler whose cost is a round trip per call (a read-modify-write of an
// entity with a conditional write) then pays it once for many updates of
// the entity. At most one batch of a (handler, key) is in flight, across
// every process, and a failure keeps the order: in a keyed batch the
// deliveries before the first failure are completed, the failed one is
// retried with its own attempts, and those after it are released and run
// again after it. A suspect runs alone, in a batch of one. A claim takes
// up to BatchOptions.MaxCalls batches of a key at once (a run) and hands
// them to the handler one after the other, each after the one before
// succeeded, so a hot key pays one claim for several calls.
//
//	err := bus.HandleBatch("deposit", "balance", func(ctx context.Context, account string, ds []*relaybus.Delivery) []error {
//		return applyAll(ctx, account, ds) // one read, one conditional write
//	}, &relaybus.BatchOptions{MaxSize: 50})
//
// docs/adr/0002-batch-handlers.md has the design.
//
// # Testing
//
// Work runs the due deliveries of the bus's handlers once, on the calling
// goroutine, through the dispatcher's own code, and returns how each
// attempt ended: a test publishes, calls Work, and checks the handlers'
// effects without starting a dispatcher or waiting for one. Package
// relaybus/relaybustest builds on it, and checks what a transaction
// published.
//
//	res, err := bus.Work(ctx, nil)
//	for _, w := range res.Worked {
//		fmt.Println(w.Delivery.Handler, w.Outcome, w.HandlerErr)
//	}
//
// # Stores
//
// relaybus/memory keeps everything in process (tests, examples, single
// process programs); relaybus/postgres and relaybus/mongo are durable.
// New takes any of them, or one wrapped by otel.WrapStore.
//
// This package is the user's API. What a store implements, and what the
// Bus calls (the Store interface, its params and their validation, lanes
// and lease tokens, the limits a store enforces), is package
// relaybus/driver: a store author reads that package and
// relaybus/relaytype, the rows both sides share, which this package
// names with aliases (Event, Delivery, Status, Statistics, Counts and the
// sentinel errors are relaytype's).
//
// Every store passes relaybus/storetest, the shared conformance suite,
// and holds every call to the same validation, so a bad call is the same
// ErrInvalid error everywhere. The Bus validates what it hands a store
// once, where it enters (Publish, Start), and the store trusts that; a
// store called directly validates everything. Every limit is in
// limits.go (the Bus's) and relaybus/driver's limits.go (those a store
// enforces), with its unit and reason. Stores never read a clock: every
// time comes from Config.Now via the params.
//
// # Guarantees
//
//   - Atomic publish: events and their deliveries commit with the caller's
//     transaction or not at all.
//   - At-least-once: a delivery is finished only by its handler's success
//     (completed), its budget being spent (dead) or an operator. A crash,
//     a lost lease or a failed completion leaves it to be claimed again
//     when its lease expires, so handlers must be idempotent (Event.ID is
//     a natural key), or transactional.
//   - Fencing: every write after a claim carries the claim's lease token; a
//     worker whose lease was taken over cannot complete, reschedule or
//     release what is no longer its own.
//   - Per-key order in commit order, per handler.
//   - Effectively-once writes for transactional handlers.
//   - Bounded everything: every queue, batch, retry loop and lease has a
//     named limit, checked by New and Handle; nothing panics on user input.
package relaybus
