// Package record reads and writes the per-process record files of the
// benchmark harness: one line per committed event (publisher, preload)
// and, from a dispatcher, one line per handler call and one per
// completion the store confirmed. The validator reads them after every
// window to check that the run was exact.
//
// # Format
//
// Text lines, tab-separated, the first field says the kind:
//
//	P <event_id> <event_type> <key> <commit_unix_ns> <uncertain 0|1> [<call_start_unix_ns>]
//	H <event_id> <handler> <key> <sequence> <attempt> <handle_start_unix_ns> <ok 1|0> [<end_unix_ns> <holder> <token>]
//	C <event_id> <handler> <attempt> <token> <completed_unix_ns>
//
// An empty key means unkeyed. The last field of a P line is optional: a
// v0.1.0 worker writes six fields, later workers add the start of the
// publish call (its transaction's begin), so the harness can check
// sequences against commit order and measure publish latency from the
// records. A line without it reads as CallStartNs 0 ("not recorded"),
// and the writer omits it when it is 0, so every accepted line
// re-encodes to the same bytes.
//
// The last three fields of an H line are optional too, and come
// together (all or none): when the handler returned, the dispatcher
// instance that held the lease (the worker's process name: one process is
// one store instance in the harness) and the delivery's lease token
// (relaybus.Delivery.LeaseToken, opaque). They let the validator tell
// which claim a handle ran under. A worker of v0.2.1 or earlier writes eight
// fields; a line without them reads as EndNs 0, Holder and Token empty
// ("not recorded"). The writer writes all three or none, so each of them
// must be set when one is: a positive end time, a non-empty holder and
// token.
//
// A C line says the store confirmed the completion of a delivery's
// attempt under a lease token; it is written after the completion
// returned (relaybus.Config.AfterFinish), with that time on its last
// field. The holder is the process whose file holds the line. Workers of
// v0.2.2 and earlier write none; a worker that does lists the capability
// completion-records in its hello (bench/protocol). No field may contain a tab, a newline or a
// carriage return; the writer rejects such values instead of escaping
// them, so the file stays trivially parseable by cut and awk too.
//
// # Cost
//
// Recording must never become the bottleneck of the process it measures,
// and a record must reach the kernel before the work it records is
// acknowledged (so a SIGKILL cannot lose the record of a completed
// delivery). The writer therefore appends records to an in-memory batch
// with strconv.Append* (no fmt, no allocation per record once the batch
// buffer has grown) and Flush hands the whole batch to the kernel with a
// single write(2). There is no user-space buffering beyond Flush: after
// Flush returns, the records survive a SIGKILL of the process (not a
// machine crash; no fsync, which the harness does not need).
package record

// Line kinds.
const (
	KindPublished = 'P'
	KindHandled   = 'H'
	KindCompleted = 'C'
)

// MaxBatchBytes bounds the batch a Writer holds between two Flushes. A
// caller that never flushes would otherwise grow memory without limit;
// the workers flush after every commit and every dispatched batch, which
// stays far below this.
const MaxBatchBytes = 64 << 20

// MaxLineBytes bounds one line when reading, so a corrupt file cannot
// make the reader hold an absurd line as a record.
const MaxLineBytes = 64 << 10

// Published is one event whose publish commit returned.
type Published struct {
	EventID   string
	EventType string
	Key       string // empty: unkeyed
	// CommitNs is the wall clock (UnixNano) right after the commit returned.
	CommitNs int64
	// CallStartNs is the wall clock (UnixNano) when the publish call that
	// committed the event started (before its transaction began); 0 when
	// the worker did not record it (a v0.1.0 worker).
	CallStartNs int64
	// Uncertain: the commit's outcome is unknown (e.g. the connection was
	// lost during commit); the validator accepts either outcome.
	Uncertain bool
}

// Handled is one handler call of a dispatcher.
type Handled struct {
	EventID  string
	Handler  string
	Key      string // empty: unkeyed
	Sequence int64  // per-key sequence of the event (0 when unkeyed)
	Attempt  int
	// HandleNs is the wall clock (UnixNano) when the handler started.
	HandleNs int64
	// OK: the handler returned success.
	OK bool
	// EndNs is the wall clock (UnixNano) when the handler returned; 0
	// when the worker did not record it (a worker of v0.2.1 or earlier).
	EndNs int64
	// Holder is the dispatcher instance that held the lease (in the
	// harness, the worker's process name); empty when not recorded.
	Holder string
	// Token is the delivery's lease token (relaybus.Delivery.LeaseToken),
	// opaque; empty when not recorded.
	Token string
}

// Completed is one completion the store confirmed.
type Completed struct {
	EventID string
	Handler string
	Attempt int
	// Token is the lease token the completion was made under (the
	// delivery's LeaseToken when it was claimed).
	Token string
	// CompletedNs is the wall clock (UnixNano) after the completion
	// returned.
	CompletedNs int64
}

// HasLease reports whether h carries the optional end, holder and token
// fields (they come together).
func (h *Handled) HasLease() bool { return h.EndNs != 0 || h.Holder != "" || h.Token != "" }
