package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/berkcansavur/relaybus/bench/protocol"
	"github.com/berkcansavur/relaybus/bench/record"
)

// The end-to-end tests run the built binary as the harness does: one
// process per role, a protocol 1 config on stdin, JSON lines on stdout,
// SIGTERM to stop, records read back and checked.

var (
	// peerBin is the binary built by TestMain.
	peerBin string
	// server is the PostgreSQL the end-to-end tests use; nil with
	// noServer saying why.
	server   *testServer
	noServer string
)

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "river-peer-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	peerBin = filepath.Join(dir, "river")
	build := exec.Command("go", "build", "-o", peerBin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building the peer: %v\n%s", err, out)
		return 1
	}
	if s, err := startTestServer(); err != nil {
		noServer = err.Error()
	} else {
		server = s
		if s.local != nil {
			defer func() {
				if err := s.local.stop(); err != nil {
					fmt.Fprintln(os.Stderr, "stopping the test server:", err)
				}
			}()
		}
	}
	return m.Run()
}

// needDB returns a fresh database's DSN, or skips the test saying why
// there is none.
func needDB(t testing.TB) string {
	t.Helper()
	if server == nil {
		t.Skipf("no PostgreSQL for the end-to-end tests: %s", noServer)
	}
	return server.newDatabase(t)
}

// Timeouts of the end-to-end tests: generous, since the machine is
// shared; they bound a hung test, they measure nothing.
const (
	roleTimeout  = 2 * time.Minute
	drainTimeout = 3 * time.Minute
)

// proc is one worker process.
type proc struct {
	t      testing.TB
	name   string
	cmd    *exec.Cmd
	stderr bytes.Buffer

	mu     sync.Mutex
	msgs   []protocol.Message
	ready  chan struct{}
	exited chan struct{}
	err    error // from Wait
}

// startProc starts `peer worker` with cfg on stdin.
func startProc(t testing.TB, cfg *protocol.Config) *proc {
	t.Helper()
	in, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{t: t, name: cfg.Name, ready: make(chan struct{}), exited: make(chan struct{})}
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
				t.Errorf("%s: stdout line %q is not JSON: %v", p.name, sc.Text(), err)
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
			t.Logf("%s stderr:\n%s", p.name, tail(p.stderr.Bytes()))
		}
	})
	return p
}

// waitReady waits for the ready line.
func (p *proc) waitReady() protocol.Message {
	p.t.Helper()
	select {
	case <-p.ready:
	case <-p.exited:
		p.t.Fatalf("%s exited before ready: %v\nstdout: %+v\nstderr:\n%s", p.name, p.err, p.messages(), tail(p.stderr.Bytes()))
	case <-time.After(roleTimeout):
		p.t.Fatalf("%s: no ready line within %v", p.name, roleTimeout)
	}
	return p.last(protocol.TypeReady)
}

// wait waits for the process to exit with status 0 and returns its done
// line.
func (p *proc) wait() protocol.Message {
	p.t.Helper()
	select {
	case <-p.exited:
	case <-time.After(roleTimeout):
		p.t.Fatalf("%s did not exit within %v", p.name, roleTimeout)
	}
	if p.err != nil {
		p.t.Fatalf("%s: %v\nstdout: %+v\nstderr:\n%s", p.name, p.err, p.messages(), tail(p.stderr.Bytes()))
	}
	done := p.last(protocol.TypeDone)
	if done.Error != "" {
		p.t.Fatalf("%s: done with error %q", p.name, done.Error)
	}
	return done
}

// stop sends SIGTERM and waits for a clean exit.
func (p *proc) stop() protocol.Message {
	p.t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		p.t.Fatal(err)
	}
	return p.wait()
}

func (p *proc) messages() []protocol.Message {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.msgs)
}

func (p *proc) last(typ string) protocol.Message {
	p.t.Helper()
	msgs := p.messages()
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Type == typ {
			return msgs[i]
		}
	}
	p.t.Fatalf("%s wrote no %s line: %+v", p.name, typ, msgs)
	return protocol.Message{}
}

// lastCounters returns the newest counters the process reported.
func (p *proc) lastCounters() protocol.Counters {
	msgs := p.messages()
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Counters != nil {
			return *msgs[i].Counters
		}
	}
	return protocol.Counters{}
}

// runRole runs one process to completion and returns its done line.
func runRole(t testing.TB, cfg *protocol.Config) protocol.Message {
	t.Helper()
	return startProc(t, cfg).wait()
}

// inspectStore runs role inspect.
func inspectStore(t testing.TB, dsn string) *protocol.Inspect {
	t.Helper()
	done := runRole(t, &protocol.Config{Protocol: 1, Role: protocol.RoleInspect, Name: "inspect",
		Store: protocol.Store{Kind: "postgres", DSN: dsn, PoolSize: 2}})
	if done.Inspect == nil {
		t.Fatal("inspect: done without inspect")
	}
	return done.Inspect
}

// drain waits until nothing is pending or processing.
func drain(t testing.TB, dsn string) *protocol.Inspect {
	t.Helper()
	deadline := time.Now().Add(drainTimeout)
	for {
		in := inspectStore(t, dsn)
		if in.Pending == 0 && in.Processing == 0 {
			return in
		}
		if time.Now().After(deadline) {
			t.Fatalf("not drained after %v: %+v", drainTimeout, in)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// readRecords reads and merges record files.
func readRecords(t testing.TB, paths ...string) *record.File {
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
	}
	return all
}

type pair struct{ event, handler string }

// attemptsOf groups the handled records by (event, handler).
func attemptsOf(handled []record.Handled) map[pair][]record.Handled {
	m := map[pair][]record.Handled{}
	for _, h := range handled {
		k := pair{h.EventID, h.Handler}
		m[k] = append(m[k], h)
	}
	for _, hs := range m {
		slices.SortFunc(hs, func(a, b record.Handled) int { return a.Attempt - b.Attempt })
	}
	return m
}

func TestEndToEnd(t *testing.T) {
	t.Parallel()
	dsn := needDB(t)
	dir := t.TempDir()
	store := protocol.Store{Kind: "postgres", DSN: dsn, PoolSize: 10}
	wl := protocol.Workload{
		EventType: "bench.event", Handlers: []string{"a", "b"}, Keys: "many", KeyCount: 7,
		PayloadBytes: 64, IDPrefix: "e2e-", PoisonEvery: 50, FailFirst: 1, MaxAttempts: 3,
		RetryBaseDelayMs: 20, RetryMaxDelayMs: 100,
	}
	const preloaded, published = 300, 200
	const events = preloaded + published

	for i := range 2 { // setup is idempotent
		done := runRole(t, &protocol.Config{Protocol: 1, Role: protocol.RoleSetup, Name: fmt.Sprint("setup-", i), Store: store})
		if done.Counters == nil {
			t.Errorf("setup %d: done without counters", i)
		}
	}
	preload := runRole(t, &protocol.Config{Protocol: 1, Role: protocol.RolePreload, Name: "preload",
		RecordPath: filepath.Join(dir, "preload.rec"), Store: store, Workload: wl,
		Publisher: protocol.Publisher{Publishers: 3, Batch: 20, Events: preloaded}})
	if preload.Counters.Published != preloaded || preload.Publish == nil || preload.Publish.Calls != preloaded/20 {
		t.Errorf("preload done: counters %+v summary %+v, want %d events in %d calls", preload.Counters, preload.Publish, preloaded, preloaded/20)
	}
	if in := inspectStore(t, dsn); in.Pending != preloaded*2 || in.Processing+in.Completed+in.Dead != 0 {
		t.Errorf("after preload: %+v, want %d pending jobs", in, preloaded*2)
	}

	disp := protocol.Dispatcher{Concurrency: 8, Batch: 10, PollMs: 50, CompletionWindowUs: 500}
	var disps []*proc
	for i := range 2 {
		p := startProc(t, &protocol.Config{Protocol: 1, Role: protocol.RoleDispatcher, Name: fmt.Sprint("disp-", i),
			RecordPath: filepath.Join(dir, fmt.Sprintf("disp-%d.rec", i)), CountersIntervalMs: 200,
			Store: store, Workload: wl, Dispatcher: disp})
		ready := p.waitReady()
		for _, o := range []string{"dispatcher.concurrency", "dispatcher.poll_ms", "workload.poison_every", "workload.retry_base_delay_ms"} {
			if !slices.Contains(ready.Applied, o) {
				t.Errorf("%s ready: applied %v lacks %s", p.name, ready.Applied, o)
			}
		}
		for _, o := range []string{"dispatcher.batch", "dispatcher.completion_window_us", "workload.keys", "workload.key_count"} {
			if !slices.Contains(ready.Ignored, o) {
				t.Errorf("%s ready: ignored %v lacks %s", p.name, ready.Ignored, o)
			}
		}
		if hello := p.messages()[0]; hello.Type != protocol.TypeHello || hello.Version != "river v0.51.2" ||
			!slices.Contains(hello.Capabilities, "peer") || !slices.Contains(hello.Capabilities, "no-key-order") {
			t.Errorf("%s hello = %+v", p.name, hello)
		}
		disps = append(disps, p)
	}
	// A rate-limited publisher while the dispatchers run, on the indexes
	// after the preload's, in two goroutines with a stride of 1.
	pub := runRole(t, &protocol.Config{Protocol: 1, Role: protocol.RolePublisher, Name: "pub",
		RecordPath: filepath.Join(dir, "pub.rec"), Store: store, Workload: wl,
		Publisher: protocol.Publisher{Publishers: 2, Batch: 7, Events: published, RatePerSec: 1000, StartIndex: preloaded}})
	if pub.Counters.Published != published {
		t.Errorf("publisher done: %+v, want %d events", pub.Counters, published)
	}

	final := drain(t, dsn)
	var counters protocol.Counters
	for _, p := range disps {
		c := p.stop().Counters
		counters.Handled += c.Handled
		counters.HandlerFailed += c.HandlerFailed
		counters.Completed += c.Completed
		counters.Buried += c.Buried
		counters.Rescheduled += c.Rescheduled
	}

	// The workload: 10 poison events (index % 50 == 49), each of their
	// jobs fails 3 times and is discarded; every other job fails its
	// first attempt (fail_first 1) and succeeds on its second.
	poison := map[string]bool{}
	for i := range int64(events) {
		if protocol.IsPoison(i, wl.PoisonEvery) {
			poison[protocol.EventID(wl.IDPrefix, i)] = true
		}
	}
	const jobs = events * 2
	okJobs := int64(jobs - 2*10)
	if len(poison) != 10 {
		t.Fatalf("%d poison events, want 10", len(poison))
	}
	if final.Completed != okJobs || final.Dead != 20 || final.Pending != 0 || final.Processing != 0 {
		t.Errorf("final inspect %+v, want %d completed, 20 dead, nothing left", final, okJobs)
	}
	if len(final.DeadLetters) != 20 || final.DeadLettersTruncated {
		t.Errorf("%d dead letters (truncated %v), want 20", len(final.DeadLetters), final.DeadLettersTruncated)
	}
	for _, dl := range final.DeadLetters {
		if !poison[dl.EventID] || dl.Attempts != 3 || !strings.Contains(dl.Error, "planted failure (poison=true, attempt 3)") ||
			(dl.Handler != "a" && dl.Handler != "b") {
			t.Errorf("dead letter %+v is not a poison event's third failure", dl)
		}
	}
	if counters.Handled != okJobs || counters.Completed != okJobs || counters.Buried != 20 ||
		counters.HandlerFailed != okJobs+20*3 || counters.Rescheduled != okJobs+20*2 {
		t.Errorf("dispatcher counters %+v, want handled = completed = %d, buried 20, failed %d, rescheduled %d",
			counters, okJobs, okJobs+60, okJobs+40)
	}

	recs := readRecords(t, filepath.Join(dir, "preload.rec"), filepath.Join(dir, "pub.rec"),
		filepath.Join(dir, "disp-0.rec"), filepath.Join(dir, "disp-1.rec"))
	keys := map[string]string{}
	for _, p := range recs.Published {
		// The call's start, before its transaction began, is what the
		// harness measures publish latency from.
		if p.Uncertain || p.EventType != wl.EventType || p.CommitNs == 0 || p.CallStartNs <= 0 || p.CallStartNs > p.CommitNs {
			t.Errorf("published record %+v", p)
		}
		if _, dup := keys[p.EventID]; dup {
			t.Errorf("event %s recorded as published twice", p.EventID)
		}
		keys[p.EventID] = p.Key
	}
	for i := range int64(events) {
		id := protocol.EventID(wl.IDPrefix, i)
		if k, ok := keys[id]; !ok || k != protocol.Key(wl.Keys, wl.KeyCount, i) {
			t.Errorf("event %s: published %v with key %q, want key %q", id, ok, k, protocol.Key(wl.Keys, wl.KeyCount, i))
		}
	}
	byJob := attemptsOf(recs.Handled)
	if len(byJob) != jobs {
		t.Errorf("%d (event, handler) pairs handled, want %d", len(byJob), jobs)
	}
	for id, key := range keys {
		for _, h := range wl.Handlers {
			hs := byJob[pair{id, h}]
			want := []bool{false, true} // attempt 1 fails (fail_first), attempt 2 succeeds
			if poison[id] {
				want = []bool{false, false, false}
			}
			var got []bool
			for i, r := range hs {
				got = append(got, r.OK)
				if r.Attempt != i+1 || r.Key != key || r.Sequence != 0 || r.HandleNs < 1 {
					t.Errorf("(%s, %s) record %d: %+v, want attempt %d, key %q, sequence 0", id, h, i, r, i+1, key)
				}
			}
			if !slices.Equal(got, want) {
				t.Errorf("(%s, %s): handled ok %v, want %v (exactly once after the planted failures)", id, h, got, want)
			}
		}
	}
	for k := range byJob {
		if _, ok := keys[k.event]; !ok {
			t.Errorf("handled %v was never published", k)
		}
	}
}

func TestKilledDispatcherIsRescued(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("waits for River's leader election and its rescuer, which runs every 30s (not configurable): a minute, not -short")
	}
	dsn := needDB(t)
	dir := t.TempDir()
	store := protocol.Store{Kind: "postgres", DSN: dsn, PoolSize: 6}
	// 50ms handlers, four at a time: the dispatcher is mid-batch when it
	// is killed.
	wl := protocol.Workload{EventType: "bench.event", Handlers: []string{"h"}, PayloadBytes: 32, IDPrefix: "kill-",
		HandlerCostUs: 50_000, MaxAttempts: 5, RetryBaseDelayMs: 20, RetryMaxDelayMs: 100}
	const events = 100
	runRole(t, &protocol.Config{Protocol: 1, Role: protocol.RoleSetup, Name: "setup", Store: store})
	runRole(t, &protocol.Config{Protocol: 1, Role: protocol.RolePreload, Name: "preload",
		RecordPath: filepath.Join(dir, "preload.rec"), Store: store, Workload: wl,
		Publisher: protocol.Publisher{Publishers: 1, Batch: 50, Events: events}})

	disp := protocol.Dispatcher{Concurrency: 4, PollMs: 50, LeaseMs: 1000}
	dispatcher := func(name string) *proc {
		p := startProc(t, &protocol.Config{Protocol: 1, Role: protocol.RoleDispatcher, Name: name,
			RecordPath: filepath.Join(dir, name+".rec"), CountersIntervalMs: 50, Store: store, Workload: wl, Dispatcher: disp})
		if ready := p.waitReady(); !slices.Contains(ready.Applied, "dispatcher.lease_ms") {
			t.Errorf("%s ready: applied %v lacks dispatcher.lease_ms", name, ready.Applied)
		}
		return p
	}
	a := dispatcher("disp-a")
	deadline := time.Now().Add(roleTimeout)
	for a.lastCounters().Handled < 8 {
		if time.Now().After(deadline) {
			t.Fatalf("disp-a handled %d jobs in %v", a.lastCounters().Handled, roleTimeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := a.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-a.exited
	atKill := inspectStore(t, dsn)
	if atKill.Processing == 0 || atKill.Completed == events {
		t.Fatalf("after the kill: %+v; want jobs left running", atKill)
	}
	t.Logf("after SIGKILL: %+v", atKill)

	start := time.Now()
	b := dispatcher("disp-b")
	final := drain(t, dsn)
	t.Logf("disp-b drained the store %v after it started", time.Since(start).Round(time.Second))
	b.stop()
	if final.Completed != events || final.Dead != 0 {
		t.Errorf("final inspect %+v, want %d completed", final, events)
	}

	ra := readRecords(t, filepath.Join(dir, "disp-a.rec"))
	rb := readRecords(t, filepath.Join(dir, "disp-b.rec"))
	okA, okB := map[string]int{}, map[string]int{}
	for _, h := range ra.Handled {
		if h.OK {
			okA[h.EventID]++
		}
	}
	rescued := 0
	for _, h := range rb.Handled {
		if h.OK {
			okB[h.EventID]++
		}
		if h.Attempt == 2 {
			rescued++
		} else if h.Attempt != 1 {
			t.Errorf("disp-b record %+v: want attempt 1, or 2 for a rescued job", h)
		}
	}
	// Exactly the jobs left running by the kill were rescued and run a
	// second time; a job disp-a had handled but not completed is handled
	// twice (at least once), every other job exactly once.
	if int64(rescued) != atKill.Processing {
		t.Errorf("%d jobs rerun at attempt 2, want the %d left running", rescued, atKill.Processing)
	}
	for i := range int64(events) {
		id := protocol.EventID(wl.IDPrefix, i)
		if n := okA[id] + okB[id]; n < 1 || n > 2 || okA[id] > 1 || okB[id] > 1 {
			t.Errorf("event %s handled ok %d times by disp-a and %d by disp-b", id, okA[id], okB[id])
		}
	}
}

func TestDatabaseRestart(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("restarts a PostgreSQL server of its own and may wait for River's rescuer (every 30s): not -short")
	}
	// A server of its own: restarting the shared one would break the
	// tests running beside this one.
	srv, err := startLocalServer()
	if err != nil {
		t.Skipf("cannot start a local PostgreSQL to restart: %v", err)
	}
	t.Cleanup(func() {
		if err := srv.local.stop(); err != nil {
			t.Error(err)
		}
	})
	dsn := srv.newDatabase(t)
	dir := t.TempDir()
	store := protocol.Store{Kind: "postgres", DSN: dsn, PoolSize: 8}
	wl := protocol.Workload{EventType: "bench.event", Handlers: []string{"h"}, PayloadBytes: 64, IDPrefix: "restart-",
		HandlerCostUs: 2000, MaxAttempts: 10, RetryBaseDelayMs: 20, RetryMaxDelayMs: 200}
	const preloaded, published = 1000, 1000
	runRole(t, &protocol.Config{Protocol: 1, Role: protocol.RoleSetup, Name: "setup", Store: store})
	runRole(t, &protocol.Config{Protocol: 1, Role: protocol.RolePreload, Name: "preload",
		RecordPath: filepath.Join(dir, "preload.rec"), Store: store, Workload: wl,
		Publisher: protocol.Publisher{Publishers: 2, Batch: 100, Events: preloaded}})

	d := startProc(t, &protocol.Config{Protocol: 1, Role: protocol.RoleDispatcher, Name: "disp",
		RecordPath: filepath.Join(dir, "disp.rec"), CountersIntervalMs: 50, Store: store, Workload: wl,
		Dispatcher: protocol.Dispatcher{Concurrency: 10, PollMs: 50, LeaseMs: 2000}})
	d.waitReady()
	pub := startProc(t, &protocol.Config{Protocol: 1, Role: protocol.RolePublisher, Name: "pub",
		RecordPath: filepath.Join(dir, "pub.rec"), Store: store, Workload: wl,
		Publisher: protocol.Publisher{Publishers: 2, Batch: 5, Events: published, RatePerSec: 400, StartIndex: preloaded}})
	pub.waitReady()
	deadline := time.Now().Add(roleTimeout)
	for d.lastCounters().Handled < 200 {
		if time.Now().After(deadline) {
			t.Fatalf("disp handled %d jobs in %v", d.lastCounters().Handled, roleTimeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := srv.local.restart(); err != nil {
		t.Fatal(err)
	}
	t.Logf("restarted the server after %d jobs", d.lastCounters().Handled)
	pubDone := pub.wait()
	final := drain(t, dsn)
	select {
	case <-d.exited:
		t.Fatalf("the dispatcher exited during the run: %v", d.err)
	default:
	}
	dispDone := d.stop()
	t.Logf("publisher %+v; dispatcher %+v; final %+v", pubDone.Counters, dispDone.Counters, final)

	recs := readRecords(t, filepath.Join(dir, "preload.rec"), filepath.Join(dir, "pub.rec"), filepath.Join(dir, "disp.rec"))
	uncertain := map[string]bool{}
	certain := map[string]bool{}
	for _, p := range recs.Published {
		if p.Uncertain {
			uncertain[p.EventID] = true
		} else {
			certain[p.EventID] = true
		}
	}
	ok := map[string]int{}
	for _, h := range recs.Handled {
		if h.OK {
			ok[h.EventID]++
		}
		if !certain[h.EventID] && !uncertain[h.EventID] {
			t.Errorf("handled %+v was never published", h)
		}
	}
	redelivered := 0
	for id := range certain {
		switch n := ok[id]; {
		case n == 0:
			t.Errorf("event %s published and never handled", id)
		case n > 1:
			redelivered += n - 1
		}
	}
	// One job per event, completed once however often it was handled.
	if final.Completed != int64(len(ok)) || final.Dead != 0 {
		t.Errorf("final inspect %+v, want %d completed (events handled), none dead", final, len(ok))
	}
	t.Logf("%d events certain, %d uncertain, %d redeliveries (at least once)", len(certain), len(uncertain), redelivered)
}
