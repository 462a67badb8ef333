package validate

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/berkcansavur/relaybus/bench/protocol"
	"github.com/berkcansavur/relaybus/bench/record"
)

// A window folder holds one record file per process, named
// <process>.rec, and the window's manifest.
const (
	ManifestFile  = "window.json"
	RecordFileExt = ".rec"
	// maxManifestBytes bounds what ReadDir reads as a manifest (a full
	// dead-letter list is the largest part).
	maxManifestBytes = 64 << 20
	// maxRecordFiles bounds the record files of one folder.
	maxRecordFiles = 10_000
)

// Manifest is what a window folder says besides its records: the
// workload's handlers and planted poison, what the scenario allows, the
// faults with their times, the measured window, and the store's state
// after the drain. The harness writes it beside the records; a hand-made
// record set may leave it out (see ReadDir).
type Manifest struct {
	Handlers []string `json:"handlers"`
	// PoisonEvery and PoisonPrefixes plant poison: an event whose id is
	// a prefix followed by an index that protocol.IsPoison names.
	PoisonEvery    int      `json:"poison_every,omitempty"`
	PoisonPrefixes []string `json:"poison_prefixes,omitempty"`
	// MaxAttempts is every handler's attempt budget (0: not checked).
	MaxAttempts int `json:"max_attempts,omitempty"`
	// FailFirst: every delivery's first FailFirst attempts fail by plan.
	FailFirst          int     `json:"fail_first,omitempty"`
	AllowRedelivery    bool    `json:"allow_redelivery,omitempty"`
	AllowPublishErrors bool    `json:"allow_publish_errors,omitempty"`
	LeaseMs            int64   `json:"lease_ms,omitempty"`
	Faults             []Fault `json:"faults,omitempty"`
	Window             *Span   `json:"window,omitempty"`
	PublishErrors      int64   `json:"publish_errors,omitempty"`
	Final              Final   `json:"final"`
	// NoKeyOrder: the side keeps no per-key order (Expect.NoKeyOrder).
	NoKeyOrder bool `json:"no_key_order,omitempty"`
	// Processes: every worker process the harness started for the window
	// that writes records, with how it ended and its last counters (see
	// Process; the harness writes them since issue 24, an older manifest
	// has none and its records are not checked against them).
	Processes []Process `json:"processes,omitempty"`
}

// Input is the validator's input for the record files of the window the
// manifest describes.
func (m *Manifest) Input(files []File) *Input {
	in := &Input{Files: files, Handlers: m.Handlers, Final: m.Final, PublishErrors: m.PublishErrors, Processes: m.Processes,
		Expect: Expect{MaxAttempts: m.MaxAttempts, FailFirst: m.FailFirst, AllowRedelivery: m.AllowRedelivery, AllowPublishErrors: m.AllowPublishErrors,
			Faults: m.Faults, Lease: time.Duration(m.LeaseMs) * time.Millisecond, Window: m.Window, NoKeyOrder: m.NoKeyOrder}}
	if m.PoisonEvery > 0 {
		in.Expect.PoisonEventIDs = map[string]bool{}
		for _, f := range files {
			for _, p := range f.Published {
				if isPoison(p.EventID, m.PoisonPrefixes, m.PoisonEvery) {
					in.Expect.PoisonEventIDs[p.EventID] = true
				}
			}
		}
	}
	return in
}

// isPoison: id is prefix+index for one of prefixes, and protocol 1's
// workload plants that index as poison.
func isPoison(id string, prefixes []string, every int) bool {
	for _, prefix := range prefixes {
		rest, ok := strings.CutPrefix(id, prefix)
		if !ok {
			continue
		}
		if idx, err := strconv.ParseInt(rest, 10, 64); err == nil && protocol.IsPoison(idx, every) {
			return true
		}
	}
	return false
}

// WriteManifest writes m as dir/window.json.
func WriteManifest(dir string, m *Manifest) error {
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Errorf("validate: encoding the manifest: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, ManifestFile), append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("validate: %w", err)
	}
	return nil
}

// ReadDir reads a window folder: every <process>.rec file (a v0.1.0
// worker's records included) and window.json. Without a manifest it
// returns one that assumes a clean cell: nothing planted, no fault,
// nothing left in the store, and no handlers (never the ones the records
// name: a handler missing from every record would pass); found is then
// false, and a caller adds what it knows, the handlers first.
func ReadDir(dir string) (m *Manifest, files []File, found bool, err error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, false, fmt.Errorf("validate: %w", err)
	}
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), RecordFileExt) {
			continue
		}
		if len(files) == maxRecordFiles {
			return nil, nil, false, fmt.Errorf("validate: %s holds more than %d record files", dir, maxRecordFiles)
		}
		f, err := record.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, nil, false, fmt.Errorf("validate: %w", err)
		}
		files = append(files, File{Name: strings.TrimSuffix(e.Name(), RecordFileExt),
			Published: f.Published, Handled: f.Handled, Completed: f.Completed, TruncatedTail: f.TruncatedTail})
	}
	if len(files) == 0 {
		return nil, nil, false, fmt.Errorf("validate: %s holds no %s record files", dir, RecordFileExt)
	}
	m = &Manifest{}
	data, err := readLimited(filepath.Join(dir, ManifestFile), maxManifestBytes)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		// No handlers are inferred from the records: a handler that ran
		// nothing would pass unseen. The caller names them (Validate
		// flags a window without them).
		return m, files, false, nil
	case err != nil:
		return nil, nil, false, err
	}
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(m); err != nil {
		return nil, nil, false, fmt.Errorf("validate: %s: %w", filepath.Join(dir, ManifestFile), err)
	}
	if err := m.check(); err != nil {
		return nil, nil, false, fmt.Errorf("validate: %s: %w", filepath.Join(dir, ManifestFile), err)
	}
	return m, files, true, nil
}

// check rejects a manifest the validator cannot use.
func (m *Manifest) check() error {
	switch {
	case len(m.Handlers) == 0:
		return errors.New("no handlers")
	case m.PoisonEvery < 0 || m.MaxAttempts < 0 || m.FailFirst < 0 || m.LeaseMs < 0 || m.PublishErrors < 0:
		return errors.New("poison_every, max_attempts, fail_first, lease_ms and publish_errors must be >= 0")
	case m.Window != nil && m.Window.EndNs <= m.Window.StartNs:
		return fmt.Errorf("window [%d, %d) is empty", m.Window.StartNs, m.Window.EndNs)
	}
	for _, f := range m.Faults {
		switch {
		case f.Kind != FaultKill && f.Kind != FaultRestart && f.Kind != FaultCrash:
			return fmt.Errorf("fault kind %q: want %s, %s or %s", f.Kind, FaultKill, FaultRestart, FaultCrash)
		case f.Kind == FaultKill && f.Process == "":
			return errors.New("a kill fault names no process")
		case f.EndNs < f.StartNs:
			return fmt.Errorf("fault %s ends before it starts", f.Kind)
		}
	}
	for i := range m.Processes {
		if err := checkProcess(&m.Processes[i]); err != nil {
			return err
		}
	}
	return nil
}

func readLimited(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("validate: %w", err)
	}
	if st.Size() > limit {
		return nil, fmt.Errorf("validate: %s is %d bytes, more than the %d allowed", path, st.Size(), limit)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("validate: %w", err)
	}
	return data, nil
}
