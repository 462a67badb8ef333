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

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

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

// ErrBatchFull is returned by Add* when the batch would exceed
// MaxBatchBytes; Flush and retry.
var ErrBatchFull = errors.New("record: batch exceeds MaxBatchBytes, flush first")

// Writer appends records to one file.
//
// A Writer is safe for concurrent use: Add* and Flush take one mutex, so
// a dispatcher's handler goroutines may record directly. Flush writes
// every record added before it, from any goroutine.
type Writer struct {
	mu     sync.Mutex
	f      *os.File
	buf    []byte
	bytes  int64
	writes int64
	spent  time.Duration
	closed bool
}

// Create creates (or truncates) the record file at path, mode 0644. A
// file left from an earlier run at the same path is truncated rather
// than appended to, so stale records can never join a new run.
func Create(path string) (*Writer, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("record: create: %w", err)
	}
	return &Writer{f: f, buf: make([]byte, 0, 64<<10)}, nil
}

// AddPublished appends p to the batch.
func (w *Writer) AddPublished(p Published) error {
	if err := checkField("event id", p.EventID, true); err != nil {
		return err
	}
	if err := checkField("event type", p.EventType, false); err != nil {
		return err
	}
	if err := checkField("key", p.Key, false); err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return errClosed
	}
	if p.CallStartNs < 0 {
		return fmt.Errorf("record: call start %d is negative", p.CallStartNs)
	}
	n := 5 + len(p.EventID) + len(p.EventType) + len(p.Key) + 2*20 + 3
	if len(w.buf)+n > MaxBatchBytes {
		return ErrBatchFull
	}
	return w.appendLine(func(b []byte) []byte { return appendPublished(b, p) })
}

// AddHandled appends h to the batch.
func (w *Writer) AddHandled(h Handled) error {
	if err := checkField("event id", h.EventID, true); err != nil {
		return err
	}
	if err := checkField("handler", h.Handler, true); err != nil {
		return err
	}
	if err := checkField("key", h.Key, false); err != nil {
		return err
	}
	if h.HasLease() {
		// All or none: a line cannot say that one of them is missing.
		if h.EndNs <= 0 {
			return fmt.Errorf("record: end %d is not positive (holder %q, token %q set)", h.EndNs, h.Holder, h.Token)
		}
		if err := checkField("holder", h.Holder, true); err != nil {
			return err
		}
		if err := checkField("token", h.Token, true); err != nil {
			return err
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return errClosed
	}
	n := 4 + len(h.EventID) + len(h.Handler) + len(h.Key) + 3*20 + 6 + 20 + len(h.Holder) + len(h.Token) + 3
	if len(w.buf)+n > MaxBatchBytes {
		return ErrBatchFull
	}
	return w.appendLine(func(b []byte) []byte { return appendHandled(b, h) })
}

// AddCompleted appends c to the batch.
func (w *Writer) AddCompleted(c Completed) error {
	if err := checkField("event id", c.EventID, true); err != nil {
		return err
	}
	if err := checkField("handler", c.Handler, true); err != nil {
		return err
	}
	if err := checkField("token", c.Token, true); err != nil {
		return err
	}
	if c.CompletedNs <= 0 {
		return fmt.Errorf("record: completion time %d is not positive", c.CompletedNs)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return errClosed
	}
	n := 6 + len(c.EventID) + len(c.Handler) + len(c.Token) + 2*20
	if len(w.buf)+n > MaxBatchBytes {
		return ErrBatchFull
	}
	return w.appendLine(func(b []byte) []byte { return appendCompleted(b, c) })
}

// appendLine appends one encoded line to the batch, or refuses it, leaving
// the batch as it was, when it is longer than MaxLineBytes: the reader
// would reject the file at that line. w.mu is held.
func (w *Writer) appendLine(add func([]byte) []byte) error {
	start := len(w.buf)
	w.buf = add(w.buf)
	if n := len(w.buf) - start - 1; n > MaxLineBytes { // less the newline, as the reader counts
		w.buf = w.buf[:start]
		return fmt.Errorf("record: a line of %d bytes is longer than MaxLineBytes (%d), which the reader refuses", n, MaxLineBytes)
	}
	return nil
}

var errClosed = errors.New("record: writer is closed")

// Flush writes the batch with one write(2) (os.File.Write loops only on a
// short write, which a regular file does not do in practice). It is a
// no-op when the batch is empty. On error the batch is kept, so the
// caller may retry; the kernel may hold a prefix of it (the reader then
// sees a truncated tail or a complete prefix).
func (w *Writer) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.flushLocked()
}

func (w *Writer) flushLocked() error {
	if w.closed {
		return errClosed
	}
	if len(w.buf) == 0 {
		return nil
	}
	start := time.Now()
	n, err := w.f.Write(w.buf)
	w.spent += time.Since(start)
	w.writes++
	w.bytes += int64(n)
	if err != nil {
		// Keep what the kernel did not take, so a retry does not
		// duplicate the prefix it did.
		w.buf = append(w.buf[:0], w.buf[n:]...)
		return fmt.Errorf("record: write: %w", err)
	}
	w.buf = w.buf[:0]
	return nil
}

// Stats reports the bytes written, the write(2) calls made and the time
// spent in them since Create.
func (w *Writer) Stats() (bytes, writes int64, spent time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.bytes, w.writes, w.spent
}

// Close flushes and closes the file. Closing twice is an error.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return errClosed
	}
	ferr := w.flushLocked()
	w.closed = true
	cerr := w.f.Close()
	if ferr != nil {
		return ferr
	}
	if cerr != nil {
		return fmt.Errorf("record: close: %w", cerr)
	}
	return nil
}

// checkField rejects what the format cannot carry.
func checkField(name, v string, required bool) error {
	if required && v == "" {
		return fmt.Errorf("record: empty %s", name)
	}
	if strings.ContainsAny(v, "\t\n\r") {
		return fmt.Errorf("record: %s %q contains a tab or newline", name, v)
	}
	return nil
}

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, '1')
	}
	return append(b, '0')
}

// AppendPublished appends p's line (with its newline) to b. It does not
// check the fields; Writer.AddPublished does.
func appendPublished(b []byte, p Published) []byte {
	b = append(b, KindPublished, '\t')
	b = append(b, p.EventID...)
	b = append(b, '\t')
	b = append(b, p.EventType...)
	b = append(b, '\t')
	b = append(b, p.Key...)
	b = append(b, '\t')
	b = strconv.AppendInt(b, p.CommitNs, 10)
	b = append(b, '\t')
	b = appendBool(b, p.Uncertain)
	if p.CallStartNs != 0 {
		b = append(b, '\t')
		b = strconv.AppendInt(b, p.CallStartNs, 10)
	}
	return append(b, '\n')
}

func appendHandled(b []byte, h Handled) []byte {
	b = append(b, KindHandled, '\t')
	b = append(b, h.EventID...)
	b = append(b, '\t')
	b = append(b, h.Handler...)
	b = append(b, '\t')
	b = append(b, h.Key...)
	b = append(b, '\t')
	b = strconv.AppendInt(b, h.Sequence, 10)
	b = append(b, '\t')
	b = strconv.AppendInt(b, int64(h.Attempt), 10)
	b = append(b, '\t')
	b = strconv.AppendInt(b, h.HandleNs, 10)
	b = append(b, '\t')
	b = appendBool(b, h.OK)
	if h.HasLease() {
		b = append(b, '\t')
		b = strconv.AppendInt(b, h.EndNs, 10)
		b = append(b, '\t')
		b = append(b, h.Holder...)
		b = append(b, '\t')
		b = append(b, h.Token...)
	}
	return append(b, '\n')
}

func appendCompleted(b []byte, c Completed) []byte {
	b = append(b, KindCompleted, '\t')
	b = append(b, c.EventID...)
	b = append(b, '\t')
	b = append(b, c.Handler...)
	b = append(b, '\t')
	b = strconv.AppendInt(b, int64(c.Attempt), 10)
	b = append(b, '\t')
	b = append(b, c.Token...)
	b = append(b, '\t')
	b = strconv.AppendInt(b, c.CompletedNs, 10)
	return append(b, '\n')
}

// File is the content of one record file.
type File struct {
	Published []Published
	Handled   []Handled
	Completed []Completed
	// TruncatedTail: the file ended with a line without its newline (the
	// process was killed mid-write); that line was dropped.
	TruncatedTail bool
}

// ReadFile reads a record file. A final line without '\n' is dropped and
// reported in File.TruncatedTail; any other malformed line is an error
// naming its line number.
func ReadFile(path string) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("record: read: %w", err)
	}
	f, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%w (file %s)", err, path)
	}
	return f, nil
}

// Parse parses the content of a record file (see ReadFile).
func Parse(data []byte) (*File, error) {
	// One string for the whole file: every field is a substring of it,
	// so a million records cost a few allocations, not several million.
	s := string(data)
	f := &File{}
	nP, nH := countKinds(data)
	f.Published = make([]Published, 0, nP)
	f.Handled = make([]Handled, 0, nH)
	lineNo := 0
	for len(s) > 0 {
		lineNo++
		i := strings.IndexByte(s, '\n')
		if i < 0 {
			f.TruncatedTail = true
			break
		}
		line := s[:i]
		s = s[i+1:]
		if err := parseLine(f, line); err != nil {
			return nil, fmt.Errorf("record: line %d: %w", lineNo, err)
		}
	}
	return f, nil
}

// countKinds estimates the capacity of each slice so that appends do
// not copy a million-element slice several times.
func countKinds(data []byte) (p, h int) {
	p = bytes.Count(data, []byte("\nP\t"))
	h = bytes.Count(data, []byte("\nH\t"))
	if bytes.HasPrefix(data, []byte("P\t")) {
		p++
	}
	if bytes.HasPrefix(data, []byte("H\t")) {
		h++
	}
	return p, h
}

func parseLine(f *File, line string) error {
	if len(line) > MaxLineBytes {
		return fmt.Errorf("line longer than %d bytes", MaxLineBytes)
	}
	if strings.IndexByte(line, '\r') >= 0 {
		return errors.New("carriage return in line")
	}
	var fields [11]string
	n := 0
	for {
		i := strings.IndexByte(line, '\t')
		if n == len(fields) {
			return errors.New("too many fields")
		}
		if i < 0 {
			fields[n] = line
			n++
			break
		}
		fields[n] = line[:i]
		n++
		line = line[i+1:]
	}
	switch fields[0] {
	case "P":
		if n != 6 && n != 7 {
			return fmt.Errorf("kind P line has %d fields, want 6 or 7", n)
		}
		if fields[1] == "" {
			return errors.New("empty event id")
		}
		commit, err := parseInt("commit_ns", fields[4])
		if err != nil {
			return err
		}
		unc, err := parseBool("uncertain", fields[5])
		if err != nil {
			return err
		}
		var callStart int64
		if n == 7 {
			if callStart, err = parseInt("call_start_ns", fields[6]); err != nil {
				return err
			}
			if callStart <= 0 {
				// 0 is written as an absent field; a negative time is
				// not one the writer produces.
				return fmt.Errorf("non-canonical call_start_ns %q", fields[6])
			}
		}
		f.Published = append(f.Published, Published{
			EventID: fields[1], EventType: fields[2], Key: fields[3], CommitNs: commit, Uncertain: unc, CallStartNs: callStart,
		})
	case "H":
		if n != 8 && n != 11 {
			return fmt.Errorf("kind H line has %d fields, want 8 or 11", n)
		}
		if fields[1] == "" {
			return errors.New("empty event id")
		}
		if fields[2] == "" {
			return errors.New("empty handler")
		}
		seq, err := parseInt("sequence", fields[4])
		if err != nil {
			return err
		}
		attempt, err := parseInt("attempt", fields[5])
		if err != nil {
			return err
		}
		if int64(int(attempt)) != attempt {
			return fmt.Errorf("attempt %d out of range", attempt)
		}
		handle, err := parseInt("handle_ns", fields[6])
		if err != nil {
			return err
		}
		ok, err := parseBool("ok", fields[7])
		if err != nil {
			return err
		}
		h := Handled{
			EventID: fields[1], Handler: fields[2], Key: fields[3], Sequence: seq,
			Attempt: int(attempt), HandleNs: handle, OK: ok,
		}
		if n == 11 {
			if h.EndNs, err = parseInt("end_ns", fields[8]); err != nil {
				return err
			}
			if h.EndNs <= 0 {
				// Unset is written as three absent fields; a
				// negative time is not one the writer produces.
				return fmt.Errorf("non-canonical end_ns %q", fields[8])
			}
			if h.Holder = fields[9]; h.Holder == "" {
				return errors.New("empty holder")
			}
			if h.Token = fields[10]; h.Token == "" {
				return errors.New("empty token")
			}
		}
		f.Handled = append(f.Handled, h)
	case "C":
		if n != 6 {
			return fmt.Errorf("kind C line has %d fields, want 6", n)
		}
		c := Completed{EventID: fields[1], Handler: fields[2], Token: fields[4]}
		switch {
		case c.EventID == "":
			return errors.New("empty event id")
		case c.Handler == "":
			return errors.New("empty handler")
		case c.Token == "":
			return errors.New("empty token")
		}
		attempt, err := parseInt("attempt", fields[3])
		if err != nil {
			return err
		}
		if int64(int(attempt)) != attempt {
			return fmt.Errorf("attempt %d out of range", attempt)
		}
		c.Attempt = int(attempt)
		if c.CompletedNs, err = parseInt("completed_ns", fields[5]); err != nil {
			return err
		}
		if c.CompletedNs <= 0 {
			return fmt.Errorf("non-canonical completed_ns %q", fields[5])
		}
		f.Completed = append(f.Completed, c)
	default:
		return fmt.Errorf("unknown kind %q", fields[0])
	}
	return nil
}

// parseInt accepts exactly what strconv.AppendInt writes: an optional
// '-' and decimal digits, no '+', no leading zeros, no "-0". Being
// strict keeps the format canonical (every parsed line re-encodes to the
// same bytes), which the fuzz test checks.
func parseInt(name, s string) (int64, error) {
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("bad %s %q", name, s)
	}
	digits := s
	if digits[0] == '-' {
		digits = digits[1:]
	}
	if digits[0] == '+' || s[0] == '+' || (len(digits) > 1 && digits[0] == '0') || s == "-0" {
		return 0, fmt.Errorf("non-canonical %s %q", name, s)
	}
	return v, nil
}

func parseBool(name, s string) (bool, error) {
	switch s {
	case "1":
		return true, nil
	case "0":
		return false, nil
	}
	return false, fmt.Errorf("bad %s %q (want 0 or 1)", name, s)
}
