package peertest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/berkcansavur/relaybus/bench/protocol"
	"github.com/berkcansavur/relaybus/bench/record"
)

// Proc is one worker process of the peer.
type Proc struct {
	Name string // the config's name
	t    testing.TB
	cmd  *exec.Cmd
	// stderr is the process's log, shown when the test fails.
	stderr bytes.Buffer

	mu     sync.Mutex
	msgs   []protocol.Message
	ready  chan struct{}
	exited chan struct{}
	err    error // from Wait, once exited is closed
}

// Start starts `<peer> worker` with cfg on stdin. The process is killed,
// if it is still running, when the test ends.
func Start(t testing.TB, cfg *protocol.Config) *Proc {
	t.Helper()
	in, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p := &Proc{t: t, Name: cfg.Name, ready: make(chan struct{}), exited: make(chan struct{})}
	p.cmd = exec.Command(peerBin, "worker")
	p.cmd.Stdin = bytes.NewReader(in)
	p.cmd.Stderr = &p.stderr
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var readers sync.WaitGroup
	readers.Add(1)
	go func() {
		defer readers.Done()
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
		readyOnce := sync.OnceFunc(func() { close(p.ready) })
		for sc.Scan() {
			var m protocol.Message
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				t.Errorf("%s: stdout line %q is not JSON: %v", p.Name, sc.Text(), err)
				continue
			}
			p.mu.Lock()
			p.msgs = append(p.msgs, m)
			p.mu.Unlock()
			if m.Type == protocol.TypeReady {
				readyOnce()
			}
		}
	}()
	go func() {
		readers.Wait() // all of stdout read before Wait closes the pipe
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
		if t.Failed() {
			t.Logf("%s stderr:\n%s", p.Name, tail(p.stderr.Bytes()))
		}
	})
	return p
}

// WaitReady waits for the ready line and returns it.
func (p *Proc) WaitReady() protocol.Message {
	p.t.Helper()
	select {
	case <-p.ready:
	case <-p.exited:
		p.t.Fatalf("%s exited before ready: %v\nstdout: %+v\nstderr:\n%s", p.Name, p.err, p.Messages(), tail(p.stderr.Bytes()))
	case <-time.After(RoleTimeout):
		p.t.Fatalf("%s: no ready line within %v", p.Name, RoleTimeout)
	}
	return p.Last(protocol.TypeReady)
}

// Wait waits for the process to exit with status 0 and returns its done
// line, which must carry no error.
func (p *Proc) Wait() protocol.Message {
	p.t.Helper()
	select {
	case <-p.exited:
	case <-time.After(RoleTimeout):
		p.t.Fatalf("%s did not exit within %v", p.Name, RoleTimeout)
	}
	if p.err != nil {
		p.t.Fatalf("%s: %v\nstdout: %+v\nstderr:\n%s", p.Name, p.err, p.Messages(), tail(p.stderr.Bytes()))
	}
	done := p.Last(protocol.TypeDone)
	if done.Error != "" {
		p.t.Fatalf("%s: done with error %q", p.Name, done.Error)
	}
	return done
}

// Stop sends SIGTERM and waits for a clean exit (Wait).
func (p *Proc) Stop() protocol.Message {
	p.t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		p.t.Fatal(err)
	}
	return p.Wait()
}

// Kill sends SIGKILL and waits until the process is gone.
func (p *Proc) Kill() {
	p.t.Helper()
	if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		p.t.Fatal(err)
	}
	<-p.exited
}

// Exited is closed once the process has exited.
func (p *Proc) Exited() <-chan struct{} { return p.exited }

// Err is how the process exited (exec.Cmd.Wait's error), once Exited is
// closed.
func (p *Proc) Err() error {
	<-p.exited
	return p.err
}

// Messages are the lines the process wrote so far.
func (p *Proc) Messages() []protocol.Message {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.msgs)
}

// Last returns the newest line of type typ; the test fails without one.
func (p *Proc) Last(typ string) protocol.Message {
	p.t.Helper()
	msgs := p.Messages()
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Type == typ {
			return msgs[i]
		}
	}
	p.t.Fatalf("%s wrote no %s line: %+v", p.Name, typ, msgs)
	return protocol.Message{}
}

// LastCounters returns the newest counters the process reported.
func (p *Proc) LastCounters() protocol.Counters {
	msgs := p.Messages()
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Counters != nil {
			return *msgs[i].Counters
		}
	}
	return protocol.Counters{}
}

// WaitHandled waits until the process has reported at least n handled
// deliveries in its counters.
func (p *Proc) WaitHandled(n int64) {
	p.t.Helper()
	deadline := time.Now().Add(RoleTimeout)
	for p.LastCounters().Handled < n {
		if time.Now().After(deadline) {
			p.t.Fatalf("%s handled %d of %d in %v", p.Name, p.LastCounters().Handled, n, RoleTimeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Run runs one process to completion (Wait) and returns its done line.
func Run(t testing.TB, cfg *protocol.Config) protocol.Message {
	t.Helper()
	return Start(t, cfg).Wait()
}

// Inspect runs role inspect on the store of dsn.
func Inspect(t testing.TB, dsn string) *protocol.Inspect {
	t.Helper()
	done := Run(t, &protocol.Config{Protocol: protocol.Version, Role: protocol.RoleInspect, Name: "inspect",
		Store: protocol.Store{Kind: "postgres", DSN: dsn, PoolSize: 2}})
	if done.Inspect == nil {
		t.Fatal("inspect: done without inspect")
	}
	return done.Inspect
}

// Drain waits until nothing is pending or processing in the store of dsn
// and returns the last inspect.
func Drain(t testing.TB, dsn string) *protocol.Inspect {
	t.Helper()
	deadline := time.Now().Add(DrainTimeout)
	for {
		in := Inspect(t, dsn)
		if in.Pending == 0 && in.Processing == 0 {
			return in
		}
		if time.Now().After(deadline) {
			t.Fatalf("not drained after %v: %+v", DrainTimeout, in)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// StopAll stops every process (Stop) and returns the sum of the
// dispatcher counters of their done lines.
func StopAll(t testing.TB, procs []*Proc) protocol.Counters {
	t.Helper()
	var sum protocol.Counters
	for _, p := range procs {
		c := p.Stop().Counters
		sum.Handled += c.Handled
		sum.HandlerFailed += c.HandlerFailed
		sum.Completed += c.Completed
		sum.Rescheduled += c.Rescheduled
		sum.Buried += c.Buried
		sum.Claims += c.Claims
	}
	return sum
}

// ReadRecords reads record files and merges them; a file that ends with a
// truncated line fails the test.
func ReadRecords(t testing.TB, paths ...string) *record.File {
	t.Helper()
	all := &record.File{}
	for _, p := range paths {
		f, err := record.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if f.TruncatedTail {
			t.Errorf("%s ends with a truncated line", p)
		}
		all.Published = append(all.Published, f.Published...)
		all.Handled = append(all.Handled, f.Handled...)
		all.Completed = append(all.Completed, f.Completed...)
	}
	return all
}
