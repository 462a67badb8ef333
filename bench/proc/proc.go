// Package proc runs worker processes (`<binary> worker`, protocol 1):
// it starts them with their config on stdin, reads their JSON lines
// (hello, ready, counters, error, done), and stops or kills them. Every
// worker runs in its own process group; KillAll stops whatever is left
// when the harness exits early.
package proc

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/berkcansavur/relaybus/bench/protocol"
)

// Process limits.
const (
	// maxMessageBytes bounds one JSON line from a worker: Done of the
	// inspect role may list up to protocol.MaxDeadLetters dead letters.
	maxMessageBytes = 64 << 20
	// DefaultStopTimeout is how long a worker may take to exit after
	// SIGTERM before it gets SIGKILL.
	DefaultStopTimeout = 30 * time.Second
)

// Proc is one running worker process.
type Proc struct {
	name string

	cmd     *exec.Cmd
	logFile *os.File

	mu       sync.Mutex
	hello    *protocol.Message
	ready    *protocol.Message
	done     *protocol.Message
	counters *protocol.Counters
	// countersAt is the TimeNs of the latest counters line.
	countersAt int64
	errs       []string
	readErr    error

	helloCh chan struct{} // closed when hello arrives
	readyCh chan struct{} // closed when ready arrives
	exited  chan struct{} // closed when stdout is drained and the process is reaped
	waitErr error
	// killed: Kill was called (a planned kill: a fault); stopKilled: the
	// worker ignored SIGTERM past Stop's timeout and was killed.
	killed, stopKilled bool
	stopTimeout        time.Duration
}

// live holds every started process so KillAll can stop them when the
// harness exits early (workers run in their own process group, so a
// terminal's SIGINT does not reach them).
var live = struct {
	sync.Mutex
	procs map[*Proc]struct{}
}{procs: map[*Proc]struct{}{}}

// KillAll sends SIGKILL to every worker still running.
func KillAll() {
	live.Lock()
	procs := make([]*Proc, 0, len(live.procs))
	for p := range live.procs {
		procs = append(procs, p)
	}
	live.Unlock()
	for _, p := range procs {
		p.Kill()
	}
}

// Start starts `bin worker`, writes cfg on its stdin and closes it.
// Its stderr goes to logPath (created; "" discards it). The process runs
// in its own process group and is killed if the harness dies (Linux).
func Start(bin string, cfg protocol.Config, logPath string) (*Proc, error) {
	data, err := json.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("proc: encoding the config of %s: %w", cfg.Name, err)
	}
	return startWorker(bin, cfg.Name, data, logPath)
}

func startWorker(bin, name string, stdin []byte, logPath string) (*Proc, error) {
	p := &Proc{
		name:    name,
		helloCh: make(chan struct{}),
		readyCh: make(chan struct{}),
		exited:  make(chan struct{}),
	}
	cmd := exec.Command(bin, "worker")
	cmd.SysProcAttr = workerSysProcAttr()
	cmd.Stdin = bytes.NewReader(stdin)
	if logPath != "" {
		f, err := os.Create(logPath)
		if err != nil {
			return nil, fmt.Errorf("proc: worker %s log: %w", name, err)
		}
		p.logFile = f
		cmd.Stderr = f
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		p.closeLog()
		return nil, fmt.Errorf("proc: worker %s: %w", name, err)
	}
	if err := cmd.Start(); err != nil {
		p.closeLog()
		return nil, fmt.Errorf("proc: starting worker %s (%s worker): %w", name, bin, err)
	}
	p.cmd = cmd
	live.Lock()
	live.procs[p] = struct{}{}
	live.Unlock()
	go p.read(stdout)
	return p, nil
}

func (p *Proc) closeLog() {
	if p.logFile != nil {
		p.logFile.Close()
	}
}

// read consumes stdout until EOF, then reaps the process.
func (p *Proc) read(stdout io.Reader) {
	r := bufio.NewReaderSize(stdout, 64<<10)
	var readErr error
	for {
		line, err := readLine(r)
		if len(line) > 0 {
			p.handle(line)
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				readErr = err
				// Keep the pipe drained so the worker never blocks on it.
				_, _ = io.Copy(io.Discard, r)
			}
			break
		}
	}
	waitErr := p.cmd.Wait()
	p.closeLog()
	live.Lock()
	delete(live.procs, p)
	live.Unlock()
	p.mu.Lock()
	p.readErr = readErr
	p.waitErr = waitErr
	p.mu.Unlock()
	close(p.exited)
}

// readLine reads one line of at most maxMessageBytes.
func readLine(r *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		chunk, err := r.ReadSlice('\n')
		if len(line)+len(chunk) > maxMessageBytes {
			return nil, fmt.Errorf("proc: worker line longer than %d bytes", maxMessageBytes)
		}
		line = append(line, chunk...)
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return bytes.TrimSpace(line), err
	}
}

// handle applies one stdout line. Unknown types and fields are skipped
// (protocol rule); a line that is not JSON is kept as an error so it shows
// in the report rather than vanishing.
func (p *Proc) handle(line []byte) {
	var m protocol.Message
	if err := json.Unmarshal(line, &m); err != nil {
		p.mu.Lock()
		p.errs = append(p.errs, fmt.Sprintf("unparsable line %.200q", line))
		p.mu.Unlock()
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	switch m.Type {
	case protocol.TypeHello:
		if p.hello == nil {
			p.hello = &m
			close(p.helloCh)
		}
	case protocol.TypeReady:
		if p.ready == nil {
			p.ready = &m
			close(p.readyCh)
		}
	case protocol.TypeCounters:
		if m.Counters != nil {
			p.counters = m.Counters
			p.countersAt = m.TimeNs
		}
	case protocol.TypeError:
		p.errs = append(p.errs, m.Error)
	case protocol.TypeDone:
		p.done = &m
		if m.Counters != nil {
			p.counters = m.Counters
			p.countersAt = m.TimeNs
		}
	}
}

// Hello waits for the hello line.
func (p *Proc) Hello(ctx context.Context) (*protocol.Message, error) {
	select {
	case <-p.helloCh:
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.hello, nil
	case <-p.exited:
		return nil, fmt.Errorf("proc: worker %s exited without a hello line (%s)", p.name, p.exitReason())
	case <-ctx.Done():
		return nil, fmt.Errorf("proc: worker %s: no hello line: %w", p.name, ctx.Err())
	}
}

// WaitReady waits for the ready line.
func (p *Proc) WaitReady(ctx context.Context) (*protocol.Message, error) {
	select {
	case <-p.readyCh:
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.ready, nil
	case <-p.exited:
		return nil, fmt.Errorf("proc: worker %s exited before it was ready (%s)", p.name, p.exitReason())
	case <-ctx.Done():
		return nil, fmt.Errorf("proc: worker %s not ready: %w", p.name, ctx.Err())
	}
}

// Counters returns the latest cumulative counters (nil before the first).
func (p *Proc) Counters() *protocol.Counters {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.counters
}

// Errors returns the error lines the worker wrote so far.
func (p *Proc) Errors() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.errs...)
}

// Name is the worker's name (its config's).
func (p *Proc) Name() string { return p.name }

// Exited is closed once the process has exited and its output is read.
func (p *Proc) Exited() <-chan struct{} { return p.exited }

// Stop asks the worker to finish (SIGTERM) and kills it after timeout.
// A worker killed that way did not stop as protocol 1 requires: Wait
// then returns an error.
func (p *Proc) Stop(timeout time.Duration) {
	select {
	case <-p.exited:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-p.exited:
	case <-t.C:
		p.mu.Lock()
		p.stopKilled, p.stopTimeout = true, timeout
		p.mu.Unlock()
		p.kill()
	}
}

// Kill sends SIGKILL to the worker's process group (a worker has no
// children of its own today, but the group makes sure): a planned kill,
// after which Wait reports no error.
func (p *Proc) Kill() {
	select {
	case <-p.exited:
		return
	default:
	}
	p.mu.Lock()
	p.killed = true
	p.mu.Unlock()
	p.kill()
}

func (p *Proc) kill() {
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	_ = p.cmd.Process.Kill()
}

// Killed reports whether Kill was called before the worker exited.
func (p *Proc) Killed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.killed
}

// Wait waits for the process to exit and returns its done line. A worker
// that exits without done, or with a done that carries an error, or with
// a non-zero status, or that Stop had to kill, is an error; a worker
// killed by Kill returns its done (nil if none) and no error.
func (p *Proc) Wait(ctx context.Context) (*protocol.Message, error) {
	select {
	case <-p.exited:
	case <-ctx.Done():
		return nil, fmt.Errorf("proc: waiting for worker %s: %w", p.name, ctx.Err())
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopKilled && !p.killed {
		return p.done, fmt.Errorf("proc: worker %s ignored SIGTERM for %s and was killed (%s)", p.name, p.stopTimeout, p.exitReasonLocked())
	}
	if p.killed {
		return p.done, nil
	}
	if p.done == nil {
		return nil, fmt.Errorf("proc: worker %s exited without a done line (%s)", p.name, p.exitReasonLocked())
	}
	if p.done.Error != "" {
		return p.done, fmt.Errorf("proc: worker %s failed: %s", p.name, p.done.Error)
	}
	if p.waitErr != nil {
		return p.done, fmt.Errorf("proc: worker %s: %w", p.name, p.waitErr)
	}
	return p.done, nil
}

func (p *Proc) exitReason() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exitReasonLocked()
}

func (p *Proc) exitReasonLocked() string {
	reason := "exit: "
	if p.waitErr != nil {
		reason += p.waitErr.Error()
	} else {
		reason += "status 0"
	}
	if p.readErr != nil {
		reason += "; " + p.readErr.Error()
	}
	if len(p.errs) > 0 {
		reason += "; last error: " + p.errs[len(p.errs)-1]
	}
	if p.logFile != nil {
		reason += "; log " + p.logFile.Name()
	}
	return reason
}
