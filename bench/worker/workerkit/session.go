package workerkit

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/berkcansavur/relaybus/bench/protocol"
)

// Limits and defaults of a worker's plumbing.
const (
	// MaxConfigBytes bounds the config a worker reads on stdin.
	MaxConfigBytes = 1 << 20
	// DefaultCountersEvery is the counters interval when the config sets
	// none.
	DefaultCountersEvery = time.Second
)

// Out writes protocol messages as JSON lines; safe for concurrent use.
type Out struct {
	mu  sync.Mutex
	w   *bufio.Writer
	pkg string
}

// NewOut returns an Out writing to w; pkg prefixes its one error text.
func NewOut(w io.Writer, pkg string) *Out {
	return &Out{w: bufio.NewWriter(w), pkg: pkg}
}

// Emit stamps m with the time and writes it as one line.
func (o *Out) Emit(m *protocol.Message) {
	m.TimeNs = time.Now().UnixNano()
	b, err := json.Marshal(m)
	if err != nil {
		b = []byte(`{"type":"error","error":"` + o.pkg + `: cannot encode message"}`)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.w.Write(b)
	o.w.WriteByte('\n')
	o.w.Flush()
}

// Fail writes an error line and a done line carrying the error, and
// returns code, the process exit code.
func (o *Out) Fail(code int, err error) int {
	o.Emit(&protocol.Message{Type: protocol.TypeError, Error: err.Error()})
	o.Emit(&protocol.Message{Type: protocol.TypeDone, Error: err.Error()})
	return code
}

// Session is one worker process after its config was read and checked.
type Session struct {
	Pkg              string // the error prefix, "worker" or a peer's name
	Cfg              *protocol.Config
	Out              *Out
	Log              *slog.Logger
	Applied, Ignored []string // what ready reports
}

// Hello is what a worker says about itself before it reads its config.
type Hello struct {
	Pkg          string // error prefix
	Version      string
	Capabilities []string
}

// Start writes hello, then reads the config on stdin (at most
// MaxConfigBytes), checks it with validate and sorts its options with
// rules, logging each ignored field the rules give a reason for. Hello
// comes first so that the harness's handshake works with an empty stdin.
// On a bad config it writes the error and done lines and returns a nil
// Session and exit code 2.
func Start(stdin io.Reader, stdout, stderr io.Writer, h Hello, validate func(*protocol.Config) error, rules *OptionRules) (*Session, int) {
	out := NewOut(stdout, h.Pkg)
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))

	out.Emit(&protocol.Message{
		Type:         protocol.TypeHello,
		Protocol:     protocol.Version,
		Version:      h.Version,
		Capabilities: h.Capabilities,
	})

	raw, err := io.ReadAll(io.LimitReader(stdin, MaxConfigBytes+1))
	if err != nil {
		return nil, out.Fail(2, fmt.Errorf("%s: reading config: %w", h.Pkg, err))
	}
	if len(raw) > MaxConfigBytes {
		return nil, out.Fail(2, fmt.Errorf("%s: config is over %d bytes", h.Pkg, MaxConfigBytes))
	}
	var cfg protocol.Config
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return nil, out.Fail(2, fmt.Errorf("%s: config is not valid JSON: %w", h.Pkg, err))
	}
	if err := validate(&cfg); err != nil {
		return nil, out.Fail(2, err)
	}
	applied, ignored, err := rules.Classify(raw)
	if err != nil {
		return nil, out.Fail(2, fmt.Errorf("%s: config: %w", h.Pkg, err))
	}
	s := &Session{
		Pkg: h.Pkg, Cfg: &cfg, Out: out,
		Log:     log.With("worker", cfg.Name, "role", cfg.Role),
		Applied: applied, Ignored: ignored,
	}
	for _, path := range ignored {
		if why := rules.Ignored[path]; why != "" {
			s.Log.Info("option ignored", "option", path, "why", why)
		}
	}
	return s, 0
}

// Run plays the worker's role with run and returns the process exit
// code: 0 when run returned nil (the role finished, or ctx stopped it), 1
// when it failed, after an error line and a done line carrying the
// error. When the config's cpu_profile_path is among the applied options
// (OptionCPUProfilePath), the role runs under a CPU profile written
// there, stopped after the last line.
func (s *Session) Run(ctx context.Context, run func(context.Context) error) int {
	if slices.Contains(s.Applied, OptionCPUProfilePath) {
		stop, err := StartCPUProfile(s.Pkg, s.Cfg.CPUProfilePath)
		if err != nil {
			return s.Out.Fail(1, err)
		}
		defer func() {
			if err := stop(); err != nil {
				s.Log.Error("cpu profile", "error", err)
			}
		}()
	}
	if err := run(ctx); err != nil {
		s.Log.Error("role failed", "error", err)
		return s.Out.Fail(1, err)
	}
	return 0
}

// Ready writes the ready line with the applied and ignored options.
func (s *Session) Ready() {
	s.Out.Emit(&protocol.Message{Type: protocol.TypeReady, Applied: s.Applied, Ignored: s.Ignored})
}

// CountersEvery is the interval of the counters lines.
func (s *Session) CountersEvery() time.Duration {
	if s.Cfg.CountersIntervalMs > 0 {
		return time.Duration(s.Cfg.CountersIntervalMs) * time.Millisecond
	}
	return DefaultCountersEvery
}

// Tick calls f every CountersEvery until stop is closed.
func (s *Session) Tick(stop <-chan struct{}, f func()) {
	t := time.NewTicker(s.CountersEvery())
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			f()
		}
	}
}

// Roles are what a worker does in each role of protocol 1.
type Roles struct {
	Setup    func(context.Context) error
	Inspect  func(context.Context) (*protocol.Inspect, error)
	Publish  func(context.Context) error // preload and publisher
	Dispatch func(context.Context) error
}

// RunRole plays the configured role. Setup and inspect write ready
// before they start and a done line with zero counters when they end;
// the other roles write their own lines.
func (s *Session) RunRole(ctx context.Context, r Roles) error {
	switch s.Cfg.Role {
	case protocol.RoleSetup:
		s.Ready()
		if err := r.Setup(ctx); err != nil {
			return err
		}
		s.Out.Emit(&protocol.Message{Type: protocol.TypeDone, Counters: &protocol.Counters{}})
		return nil
	case protocol.RoleInspect:
		s.Ready()
		in, err := r.Inspect(ctx)
		if err != nil {
			return err
		}
		s.Out.Emit(&protocol.Message{Type: protocol.TypeDone, Counters: &protocol.Counters{}, Inspect: in})
		return nil
	case protocol.RolePreload, protocol.RolePublisher:
		return r.Publish(ctx)
	case protocol.RoleDispatcher:
		return r.Dispatch(ctx)
	}
	return fmt.Errorf("%s: unknown role %q", s.Pkg, s.Cfg.Role)
}
