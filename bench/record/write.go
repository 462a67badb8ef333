package record

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

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
