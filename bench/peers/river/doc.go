// Command river is River (github.com/riverqueue/river) as a peer in the
// relaybus benchmark harness: a worker that speaks worker protocol 1
// (bench/protocol) and records what it publishes and handles in the
// harness's record format (bench/record), so that the harness can run
// River and a relaybus ref in the same ABBA windows, on the same server,
// with the same workload, validation and statistics.
//
//	river worker    protocol 1 entry point (the harness starts it)
//	river version   prints the River version this binary was built with
//
// Build, test and measure it from this directory (the tests start a
// throwaway PostgreSQL from the binaries on PATH, or use
// RELAYBUS_TEST_DATABASE_URL; peertest says how; -short leaves out the
// two that wait for River's rescuer; -update rewrites the golden
// protocol lines and records in testdata):
//
//	go build -o river .
//	go vet ./... && go test ./...
//	go test -run '^$' -bench Dispatch -benchtime 1x
//
// The harness runs it as a side: `go run ./cmd/bench --base river
// --candidate HEAD` (from the repository's root) builds this module from
// the harness's own tree (cached by commit; `river@vX.Y.Z` builds it
// against another River release) and compares it with the candidate in
// the same windows; BENCHMARKS.md says which cells compare and why.
//
// It lives in its own module so that the library's module never depends
// on River. From the main module (through a replace directive) it
// imports bench/protocol, bench/record and bench/worker/workerkit with
// workerpg, the relaybus worker's own output, config reading and checks,
// option sorting, publish loop and pool, and no relaybus store: the
// workload (event ids, keys, poison events), the record files and the
// lines it writes are those of a relaybus worker because they come from
// the same code. Its tests share their scaffolding with every peer's
// (bench/worker/workerkit/peertest).
//
// # Hello
//
// The version is "river " and the River module version read from the
// binary's build information (for example "river v0.51.2"). The
// capabilities are those of a relaybus worker for PostgreSQL, plus:
//
//	peer          this is not a relaybus build; compare it as a peer
//	peer:river    which peer
//	no-key-order  jobs of one key are not handled in commit order: the
//	              per-key order check does not apply to this side
//
// # Workload
//
// One River job per (event, handler), so that job counts compare with
// relaybus deliveries. Each job's args carry the event id, the handler
// name, the key and the payload (the payload is therefore stored once per
// handler, where relaybus stores it once per event). A publish call
// inserts Publisher.Batch events' jobs with InsertManyTx in one
// transaction. Poison events (protocol.IsPoison) fail every attempt
// until River discards them after Workload.MaxAttempts attempts;
// Workload.FailFirst fails every job's first attempts. Workload.MaxAttempts
// is set per job at insert; 0 means River's default (25, where
// relaybus's is 10). When
// Workload.RetryBaseDelayMs or RetryMaxDelayMs is set, the client's retry
// policy is relaybus's: min(base * 2^(attempt-1), max) spread by ±10%
// (defaults 1s and 1h); otherwise River's default policy (attempt^4
// seconds).
//
// The key is recorded and carried in the job but River orders nothing by
// it, so workload.keys and workload.key_count are reported ignored.
//
// # Dispatcher options
//
// In the ready line every option is listed as applied or ignored:
//
//	dispatcher.concurrency        applied: MaxWorkers of the one queue (0: 10, relaybus's default)
//	dispatcher.poll_ms            applied: FetchPollInterval; FetchCooldown is River's
//	                              default (100ms), lowered to poll_ms when that is shorter
//	dispatcher.lease_ms           applied: JobTimeout and RescueStuckJobsAfter (see below)
//	dispatcher.batch              ignored: River fetches up to MaxWorkers minus running jobs
//	dispatcher.completion_*       ignored: River's completer batches by itself; its
//	                              settings are not exposed, nor can it be turned off
//	                              (completion_window_disabled)
//	dispatcher.extra_cost_per_delivery_us  applied
//	dispatcher.options.max_workers             applied: MaxWorkers in [1, 10000], in place of concurrency
//	dispatcher.options.fetch_cooldown_ms       applied: FetchCooldown in ms, [1, 60000]
//	dispatcher.options.fetch_poll_interval_ms  applied: FetchPollInterval in ms, [1, 3600000], in place of poll_ms
//	dispatcher.options.poll_only               applied: PollOnly (no LISTEN/NOTIFY)
//
// Any other free-form option is ignored, and so is cpu_profile_path (this
// peer writes no CPU profile). River fetches at most once per
// FetchCooldown, at most MaxWorkers minus running jobs at a time, so the
// cooldown caps a dispatcher at about MaxWorkers jobs per FetchCooldown
// (100 jobs/s at MaxWorkers 10 and the default 100ms; BenchmarkDispatch
// shows it). relaybus has no such spacing: it claims again at once
// after a full batch.
//
// # River at its best
//
// The three River options run River as its own authors tune it for
// throughput rather than through the harness's settings; unset, each
// keeps the mapping above, so a cell that passes none runs as before
// (and bench/scenarios states the resulting cap per cell; this module's
// tests hold that statement to clientConfig). River's own benchmark,
// `river bench` (cmd/river/riverbench/river_bench.go in River's
// repository, module github.com/riverqueue/river/cmd/river), sets
//
//	FetchCooldown:     2 * time.Millisecond,
//	FetchPollInterval: 20 * time.Millisecond,
//	Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 2_000}},
//
// which is, here,
//
//	"dispatcher": {"options": {"max_workers": 2000, "fetch_cooldown_ms": 2, "fetch_poll_interval_ms": 20}}
//
// With them River fetches up to 2,000 jobs every 2 ms instead of
// concurrency jobs every min(100 ms, poll_ms). A cell run so is River
// "as its own benchmark runs it", and is to be labelled so beside the
// mapped one: relaybus has no counterpart of 2,000 workers.
//
// River has no lease. The leader's rescuer, every 30 seconds (not
// configurable), retries (or discards after the last attempt) a job that
// has been running for both RescueStuckJobsAfter and its JobTimeout, and
// never rescues a job whose timeout is infinite. With lease_ms set, both
// are lease_ms: a killed dispatcher's jobs run again after lease_ms plus
// up to one rescuer interval (plus a leader election of up to about 15
// seconds when the killed process was the leader), and a live handler
// running past lease_ms has its context cancelled and may be run again,
// since nothing renews it. Without lease_ms, River's defaults hold
// (JobTimeout 1 minute, rescue after 1 hour).
//
// # Retention
//
// Completed, discarded and cancelled jobs are never deleted (the three
// retention periods are -1, which also keeps River's job cleaner from
// running at all), so inspect sees every job of the window and no
// cleaner DELETE runs inside a measured window. The harness gives every
// window a fresh database, so nothing accumulates. Within a window of
// less than a day this is what River's defaults (24 hours) would keep
// anyway. The reindexer is given no indexes (ReindexerIndexNames empty),
// so a run that crosses midnight UTC does not rebuild River's indexes in
// the middle of a window.
//
// # Stopping
//
// SIGTERM stops a publisher after its current call and a dispatcher
// with River's Stop (running jobs finish, completions are written),
// escalating to StopAndCancel after 15 seconds; the worker then writes
// done.
//
// # Records
//
// A handled job's record reaches the kernel before the job completes:
// Work writes it (record.Writer.Flush, one write(2) holding every record
// added so far, so concurrent handlers share writes) before it returns,
// and River completes a job only after Work returned. A failed attempt is
// recorded too (ok 0). The sequence field is 0: River has no per-key
// sequence. A publisher records each event after its call's commit
// returned, with the call's start and the commit's return, as a relaybus
// worker does.
//
// # Counters
//
// handled and handler_failed count Work calls; completed, rescheduled
// and buried come from River's job events (a failed job retried is
// rescheduled, a discarded or cancelled one buried), which River sends
// after the completion is written and drops only if a 65,536-event buffer
// overflows. claims, claimed, released and leases_lost stay 0: River
// exposes no fetch counts and has no leases.
//
// # Inspect
//
// River's job states map to protocol.Inspect as: pending = available,
// scheduled, retryable and pending; processing = running; completed =
// completed; dead = discarded and cancelled, each listed as a dead letter
// (event id, handler, attempt, last error).
package main
