// Package protocol is the worker protocol between the harness and the
// worker processes it spawns (`<binary> worker`).
//
// # Frozen at protocol 1
//
// Protocol 1 shipped with v0.1.0 and the harness drives every release
// forever, so the rules are:
//   - fields are only ever added, never renamed, removed or given a new
//     meaning, and every added field is optional (its zero value means
//     "as protocol 1 did");
//   - a worker lists in its ready line every option it applied and every
//     option it ignored (an option it does not know), and the harness
//     records the ignored ones per side, so a comparison never hides
//     that one side ran without a feature;
//   - an unknown message type or field on either side is skipped, not an
//     error.
//
// # Exchange
//
// The harness writes one Config as JSON on the worker's stdin and closes
// it. The worker writes JSON lines on stdout: one Hello, then Ready once
// it is connected and about to work, Counters every
// Config.CountersIntervalMs, and Done last (Error lines may come before
// Done). Logs go to stderr. SIGTERM asks a worker to stop gracefully; it
// then finishes its current unit of work and writes Done.
package protocol

// Version is the protocol this package speaks.
const Version = 1

// Roles.
const (
	// RoleSetup creates the schema (the store's Setup) and exits.
	RoleSetup = "setup"
	// RolePreload publishes Publisher.Events events as fast as it can
	// (Publisher.Publishers goroutines, Publisher.Batch per call) and
	// exits; its events are recorded like a publisher's.
	RolePreload = "preload"
	// RolePublisher publishes until stopped (or Publisher.Events are
	// published), at Publisher.RatePerSec when set.
	RolePublisher = "publisher"
	// RoleDispatcher runs the dispatcher until stopped.
	RoleDispatcher = "dispatcher"
	// RoleInspect reads the store's statistics and dead letters and
	// reports them in Done.Inspect.
	RoleInspect = "inspect"
)

// Config is what the harness sends on stdin.
type Config struct {
	Protocol int    `json:"protocol"`
	Role     string `json:"role"`
	// Name identifies the process in logs and record file names
	// ("pub-0", "disp-2").
	Name string `json:"name"`
	// RecordPath is the file the worker appends its records to
	// (bench/record format); empty for setup and inspect.
	RecordPath string `json:"record_path,omitempty"`
	// CountersIntervalMs: how often to write Counters; 0 means 1000.
	CountersIntervalMs int `json:"counters_interval_ms,omitempty"`
	// CPUProfilePath, when set, asks the worker to write a CPU profile
	// (runtime/pprof) of its role to this file: from before it connects
	// until it writes done. Added after v0.1.0: an older worker lists
	// cpu_profile_path as ignored in its ready line and writes no profile.
	CPUProfilePath string `json:"cpu_profile_path,omitempty"`

	Store      Store      `json:"store"`
	Workload   Workload   `json:"workload"`
	Publisher  Publisher  `json:"publisher"`
	Dispatcher Dispatcher `json:"dispatcher"`
}

// Store says which store to use and how to reach it. Options carries
// store options by name (e.g. "completion_history": true); the worker
// reports each as applied or ignored.
type Store struct {
	Kind     string         `json:"kind"` // "postgres", "mongo" or "memory"
	DSN      string         `json:"dsn,omitempty"`
	MongoURI string         `json:"mongo_uri,omitempty"`
	Database string         `json:"database,omitempty"` // MongoDB database name
	PoolSize int            `json:"pool_size,omitempty"`
	Options  map[string]any `json:"options,omitempty"`
}

// Workload describes the events: both sides of a comparison get the same
// one, so they publish and fail exactly the same deliveries.
type Workload struct {
	// EventType of the published events; Handlers are the handler names
	// registered for it (each event gets one delivery per handler).
	EventType string   `json:"event_type"`
	Handlers  []string `json:"handlers"`
	// Keys: "none" (unkeyed), "hot" (KeyCount keys, e.g. 4) or "many"
	// (KeyCount keys, e.g. 10000). Keys are chosen round robin by event
	// index so the run is deterministic.
	Keys     string `json:"keys"`
	KeyCount int    `json:"key_count,omitempty"`
	// PayloadBytes is the size of each event's payload.
	PayloadBytes int `json:"payload_bytes"`
	// IDPrefix makes event ids unique across processes and windows.
	IDPrefix string `json:"id_prefix"`
	// HandlerCostUs: each handler call busy-waits this long (0 = no-op).
	HandlerCostUs int `json:"handler_cost_us,omitempty"`
	// PoisonEvery: every PoisonEvery-th event (by index, 0 = none) is a
	// poison event: its payload says so and every handler fails it until
	// it is dead-lettered. FailFirst: every event's handlers fail their
	// first FailFirst attempts, then succeed (0 = none).
	PoisonEvery int `json:"poison_every,omitempty"`
	FailFirst   int `json:"fail_first,omitempty"`
	// MaxAttempts is the attempt budget of every handler (0 = default).
	MaxAttempts int `json:"max_attempts,omitempty"`
	// RetryBaseDelayMs / RetryMaxDelayMs shape the backoff (0 = default).
	RetryBaseDelayMs int `json:"retry_base_delay_ms,omitempty"`
	RetryMaxDelayMs  int `json:"retry_max_delay_ms,omitempty"`
}

// Publisher options (roles preload and publisher).
type Publisher struct {
	// Publishers is the number of concurrent publishing goroutines.
	Publishers int `json:"publishers"`
	// Batch is the number of events per publish call (one transaction).
	Batch int `json:"batch"`
	// Events stops the role after this many events in total (0 = until
	// stopped; required for preload).
	Events int `json:"events,omitempty"`
	// RatePerSec caps the offered rate across all publishers (0 = as fast
	// as possible).
	RatePerSec float64 `json:"rate_per_sec,omitempty"`
	// StartIndex is the index of the first event (ids and keys derive
	// from it), so several processes publish disjoint events.
	StartIndex int64 `json:"start_index,omitempty"`
	// Stride: this process publishes indexes StartIndex, StartIndex+Stride,
	// ... (0 or 1 = consecutive).
	Stride int64 `json:"stride,omitempty"`
	// Options: further publisher options by name (reported applied or
	// ignored).
	Options map[string]any `json:"options,omitempty"`
}

// Dispatcher options (role dispatcher). Zero means the library default.
type Dispatcher struct {
	Concurrency        int `json:"concurrency,omitempty"`
	Batch              int `json:"batch,omitempty"`
	PollMs             int `json:"poll_ms,omitempty"`
	LeaseMs            int `json:"lease_ms,omitempty"`
	CompletionWindowUs int `json:"completion_window_us,omitempty"`
	CompletionBatchMax int `json:"completion_batch_max,omitempty"`
	// CompletionWindowDisabled turns completion batching off
	// (relaybus.Disabled: every success is completed on its own), which
	// CompletionWindowUs cannot say: 0 there is the library default, and a
	// negative window is out of range. It needs CompletionWindowUs 0.
	// Added after v0.1.0: an older worker lists
	// dispatcher.completion_window_disabled as ignored and batches.
	CompletionWindowDisabled bool `json:"completion_window_disabled,omitempty"`
	// ExtraCostPerDeliveryUs adds a fixed cost to every delivery on this
	// side only (a planted slowdown for the harness's self-test).
	ExtraCostPerDeliveryUs int `json:"extra_cost_per_delivery_us,omitempty"`
	// HandlerBatchMax, when above 0, registers the workload's handlers
	// as batch handlers (relaybus HandleBatch, BatchOptions.MaxSize this):
	// one call takes up to this many consecutive deliveries of one key.
	// HandlerCallWaitUs makes every handler call wait this long (a
	// sleep, not a busy wait: the round trip of a handler that reads and
	// conditionally writes its key's row elsewhere), once per delivery
	// for a handler of one delivery, once per batch for a batch handler.
	// Added for issue 32; a worker that applies them lists
	// CapabilityBatchHandlers, and an older one lists them ignored.
	HandlerBatchMax   int `json:"handler_batch_max,omitempty"`
	HandlerCallWaitUs int `json:"handler_call_wait_us,omitempty"`
	// HandlerBatchCalls, with HandlerBatchMax, is the batch handlers'
	// BatchOptions.MaxCalls (calls of one claim's run of a key); 0 is
	// the library's default. Added after BatchOptions.MaxCalls: an older
	// worker lists it ignored (and runs one call a claim, or its
	// library's default).
	HandlerBatchCalls int `json:"handler_batch_calls,omitempty"`
	// Options: further dispatcher options by name (reported applied or
	// ignored).
	Options map[string]any `json:"options,omitempty"`
}

// Message types on stdout.
const (
	TypeHello    = "hello"
	TypeReady    = "ready"
	TypeCounters = "counters"
	TypeError    = "error"
	TypeDone     = "done"
)

// Message is one JSON line on stdout. Type says which fields are set.
type Message struct {
	Type string `json:"type"`
	// TimeNs is the wall clock (UnixNano) when the line was written.
	TimeNs int64 `json:"t_ns"`

	// hello
	Protocol     int      `json:"protocol,omitempty"`
	Version      string   `json:"version,omitempty"` // relaybus.Version
	Capabilities []string `json:"capabilities,omitempty"`

	// ready
	Applied []string `json:"applied,omitempty"`
	Ignored []string `json:"ignored,omitempty"`

	// counters and done
	Counters *Counters `json:"counters,omitempty"`

	// error (and done when the role failed)
	Error string `json:"error,omitempty"`

	// done of a publisher or preload
	Publish *PublishSummary `json:"publish,omitempty"`
	// done of inspect
	Inspect *Inspect `json:"inspect,omitempty"`
}

// Counters are cumulative since the role started.
type Counters struct {
	Published     int64 `json:"published,omitempty"`      // events committed
	PublishCalls  int64 `json:"publish_calls,omitempty"`  // committed publish calls
	PublishErrors int64 `json:"publish_errors,omitempty"` // failed calls (events not published)
	Uncertain     int64 `json:"uncertain,omitempty"`      // events whose commit outcome is unknown
	Handled       int64 `json:"handled,omitempty"`        // handler calls that succeeded
	HandlerFailed int64 `json:"handler_failed,omitempty"` // handler calls that failed
	Completed     int64 `json:"completed,omitempty"`      // deliveries completed (store said held)
	Claims        int64 `json:"claims,omitempty"`         // claim calls
	Claimed       int64 `json:"claimed,omitempty"`        // deliveries claimed
	Rescheduled   int64 `json:"rescheduled,omitempty"`
	Buried        int64 `json:"buried,omitempty"`
	Released      int64 `json:"released,omitempty"`
	LeasesLost    int64 `json:"leases_lost,omitempty"`
	RecordBytes   int64 `json:"record_bytes,omitempty"`  // bytes written to the record file
	RecordWrites  int64 `json:"record_writes,omitempty"` // write(2) calls on the record file
	RecordNs      int64 `json:"record_ns,omitempty"`     // time spent writing records
}

// PublishSummary summarises publish call latencies (milliseconds).
type PublishSummary struct {
	Calls int64   `json:"calls"`
	P50Ms float64 `json:"p50_ms"`
	P95Ms float64 `json:"p95_ms"`
	P99Ms float64 `json:"p99_ms"`
	MaxMs float64 `json:"max_ms"`
	// ElapsedNs is the time from the first call's start to the last
	// call's end.
	ElapsedNs int64 `json:"elapsed_ns"`
}

// Inspect is the store's state as role inspect saw it.
type Inspect struct {
	Pending     int64        `json:"pending"`
	Processing  int64        `json:"processing"`
	Completed   int64        `json:"completed"`
	Dead        int64        `json:"dead"`
	DeadLetters []DeadLetter `json:"dead_letters,omitempty"`
	// DeadLettersTruncated: there were more than the worker lists.
	DeadLettersTruncated bool `json:"dead_letters_truncated,omitempty"`
	// KeysReported: Keys is the store's per-key state, every key (up
	// to MaxKeyStates, then KeysTruncated). A worker that cannot read it
	// (older than the field, a peer, a store it does not read) leaves it
	// false and the validator reports the keys as not checked.
	KeysReported  bool       `json:"keys_reported,omitempty"`
	Keys          []KeyState `json:"keys,omitempty"`
	KeysTruncated bool       `json:"keys_truncated,omitempty"`
}

// KeyState is one key as the store holds it after the drain: the key's
// sequence counter, and the events of the key it still holds with their
// highest sequence. A store whose per-key sequences run 1, 2, 3, ...
// has LastSequence == Events == MaxSequence while it keeps every event.
type KeyState struct {
	Key          string `json:"key"`
	LastSequence int64  `json:"last_sequence"`
	Events       int64  `json:"events"`
	MaxSequence  int64  `json:"max_sequence"`
}

// MaxKeyStates bounds Inspect.Keys.
const MaxKeyStates = 200_000

// DeadLetter is one dead delivery.
type DeadLetter struct {
	EventID  string `json:"event_id"`
	Handler  string `json:"handler"`
	Attempts int    `json:"attempts"`
	Error    string `json:"error,omitempty"`
}

// MaxDeadLetters bounds Inspect.DeadLetters.
const MaxDeadLetters = 100_000
