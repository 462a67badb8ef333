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
	dir, err := os.MkdirTemp("", "ceiling-peer-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	peerBin = filepath.Join(dir, "ceiling")
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
		all.Completed = append(all.Completed, f.Completed...)
	}
	return all
}

type pair struct{ event, handler string }

// checkHandles checks the handle records of a run without faults against
// its published events: every (event, handler) handled ok exactly once
// after want(event) failed attempts (numbered 1, 2, ...), or failed
// maxAttempts times when dead(event); every handle carries its end, its
// holder and a token, no token is run twice; and per (handler, key) the
// ok handles run in sequence order, the sequences are 1..n, and no two
// handles overlap in time.
func checkHandles(t *testing.T, recs *record.File, handlers []string, failFirst, maxAttempts int, dead func(id string) bool) {
	t.Helper()
	keys := map[string]string{}
	for _, p := range recs.Published {
		if p.Uncertain || p.CommitNs == 0 || p.CallStartNs <= 0 || p.CallStartNs > p.CommitNs {
			t.Errorf("published record %+v", p)
		}
		if _, dup := keys[p.EventID]; dup {
			t.Errorf("event %s recorded as published twice", p.EventID)
		}
		keys[p.EventID] = p.Key
	}
	byJob := map[pair][]record.Handled{}
	tokens := map[string]bool{}
	type hk struct{ handler, key string }
	perKey := map[hk][]record.Handled{}
	for _, h := range recs.Handled {
		byJob[pair{h.EventID, h.Handler}] = append(byJob[pair{h.EventID, h.Handler}], h)
		if h.EndNs < h.HandleNs || h.Holder == "" || h.Token == "" {
			t.Errorf("handle %+v lacks its end, holder or token", h)
		}
		tk := h.EventID + "\x00" + h.Handler + "\x00" + h.Token
		if tokens[tk] {
			t.Errorf("token %q of %s/%s run twice", h.Token, h.EventID, h.Handler)
		}
		tokens[tk] = true
		key, ok := keys[h.EventID]
		if !ok {
			t.Errorf("handled %s/%s was never published", h.EventID, h.Handler)
			continue
		}
		if h.Key != key || (key == "") != (h.Sequence == 0) {
			t.Errorf("handle %+v: want key %q and a sequence exactly when keyed", h, key)
		}
		if key != "" {
			perKey[hk{h.Handler, key}] = append(perKey[hk{h.Handler, key}], h)
		}
	}
	if want := len(keys) * len(handlers); len(byJob) != want {
		t.Errorf("%d (event, handler) pairs handled, want %d", len(byJob), want)
	}
	for id := range keys {
		for _, h := range handlers {
			hs := byJob[pair{id, h}]
			slices.SortFunc(hs, func(a, b record.Handled) int { return a.Attempt - b.Attempt })
			var want []bool
			if dead(id) {
				for range maxAttempts {
					want = append(want, false)
				}
			} else {
				for range failFirst {
					want = append(want, false)
				}
				want = append(want, true)
			}
			var got []bool
			for i, r := range hs {
				got = append(got, r.OK)
				if r.Attempt != i+1 {
					t.Errorf("(%s, %s) handle %d has attempt %d", id, h, i, r.Attempt)
				}
			}
			if !slices.Equal(got, want) {
				t.Errorf("(%s, %s): handled ok %v, want %v", id, h, got, want)
			}
		}
	}
	// Every ok handle's completion committed and was recorded once,
	// after the handle, with its attempt and token.
	type claim struct {
		event, handler, token string
		attempt               int
	}
	okEnd := map[claim]int64{}
	for _, h := range recs.Handled {
		if h.OK {
			okEnd[claim{h.EventID, h.Handler, h.Token, h.Attempt}] = h.EndNs
		}
	}
	completed := map[claim]bool{}
	for _, c := range recs.Completed {
		k := claim{c.EventID, c.Handler, c.Token, c.Attempt}
		end, ok := okEnd[k]
		if !ok || completed[k] || c.CompletedNs < end {
			t.Errorf("completion %+v: no ok handle of that claim, completed twice, or before the handle ended", c)
		}
		completed[k] = true
	}
	if len(completed) != len(okEnd) {
		t.Errorf("%d completions recorded, want one per ok handle (%d)", len(completed), len(okEnd))
	}
	for k, hs := range perKey {
		slices.SortFunc(hs, func(a, b record.Handled) int { return cmpInt64(a.HandleNs, b.HandleNs) })
		var seqs []int64
		for i, h := range hs {
			if i > 0 && hs[i-1].EndNs > h.HandleNs {
				t.Errorf("%v: %s (sequence %d) started before %s (sequence %d) ended", k, h.EventID, h.Sequence, hs[i-1].EventID, hs[i-1].Sequence)
			}
			if !h.OK {
				continue
			}
			if n := len(seqs); n > 0 && seqs[n-1] >= h.Sequence {
				t.Errorf("%v: sequence %d handled after %d", k, h.Sequence, seqs[n-1])
			}
			seqs = append(seqs, h.Sequence)
		}
		// The dead events' deliveries have no ok handle; the others'
		// sequences are 1..n with the dead ones' left out.
		all := map[int64]bool{}
		for _, h := range hs {
			all[h.Sequence] = true
		}
		for s := int64(1); s <= int64(len(all)); s++ {
			if !all[s] {
				t.Errorf("%v: sequences %v have a gap at %d", k, seqs, s)
				break
			}
		}
	}
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// TestEndToEnd: keyed events with two handlers, planted failures (every
// delivery's first attempt) and poison (dead after 3 attempts), a
// preload and a rate-limited publisher, two dispatcher processes of two
// streams each: exactly once after the planted failures, in key order.
func TestEndToEnd(t *testing.T) {
	t.Parallel()
	dsn := needDB(t)
	dir := t.TempDir()
	store := protocol.Store{Kind: "postgres", DSN: dsn, PoolSize: 4}
	wl := protocol.Workload{
		EventType: "bench.event", Handlers: []string{"a", "b"}, Keys: "many", KeyCount: 7,
		PayloadBytes: 64, IDPrefix: "e2e-", PoisonEvery: 50, FailFirst: 1, MaxAttempts: 3,
		RetryBaseDelayMs: 20, RetryMaxDelayMs: 100,
	}
	const preloaded, published = 300, 200
	const events = preloaded + published
	for i := range 2 { // setup is idempotent
		runRole(t, &protocol.Config{Protocol: 1, Role: protocol.RoleSetup, Name: fmt.Sprint("setup-", i), Store: store})
	}
	preload := runRole(t, &protocol.Config{Protocol: 1, Role: protocol.RolePreload, Name: "preload",
		RecordPath: filepath.Join(dir, "preload.rec"), Store: store, Workload: wl,
		Publisher: protocol.Publisher{Publishers: 3, Batch: 20, Events: preloaded}})
	if preload.Counters.Published != preloaded || preload.Publish == nil || preload.Publish.Calls != preloaded/20 {
		t.Errorf("preload done: counters %+v summary %+v", preload.Counters, preload.Publish)
	}
	if in := inspectStore(t, dsn); in.Pending != preloaded*2 || in.Completed+in.Dead != 0 {
		t.Errorf("after preload: %+v, want %d pending deliveries", in, preloaded*2)
	}

	disp := protocol.Dispatcher{Concurrency: 8, Batch: 25, PollMs: 20, LeaseMs: 1000,
		Options: map[string]any{optStreams: 2, "lanes": 3}}
	var disps []*proc
	for i := range 2 {
		p := startProc(t, &protocol.Config{Protocol: 1, Role: protocol.RoleDispatcher, Name: fmt.Sprint("disp-", i),
			RecordPath: filepath.Join(dir, fmt.Sprintf("disp-%d.rec", i)), CountersIntervalMs: 200,
			Store: store, Workload: wl, Dispatcher: disp})
		ready := p.waitReady()
		for _, o := range []string{"dispatcher.concurrency", "dispatcher.batch", "dispatcher.poll_ms", "dispatcher.options.streams",
			"workload.keys", "workload.poison_every", "workload.retry_base_delay_ms"} {
			if !slices.Contains(ready.Applied, o) {
				t.Errorf("%s ready: applied %v lacks %s", p.name, ready.Applied, o)
			}
		}
		for _, o := range []string{"dispatcher.lease_ms", "dispatcher.options.lanes"} {
			if !slices.Contains(ready.Ignored, o) {
				t.Errorf("%s ready: ignored %v lacks %s", p.name, ready.Ignored, o)
			}
		}
		if hello := p.messages()[0]; hello.Type != protocol.TypeHello || hello.Version != peerVersion ||
			protocol.PeerName(hello.Capabilities) != "ceiling" || !slices.Contains(hello.Capabilities, CapabilityNoFaults) ||
			slices.Contains(hello.Capabilities, protocol.CapabilityNoKeyOrder) {
			t.Errorf("%s hello = %+v", p.name, hello)
		}
		disps = append(disps, p)
	}
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
		counters.Claims += c.Claims
	}
	poison := map[string]bool{}
	for i := range int64(events) {
		if protocol.IsPoison(i, wl.PoisonEvery) {
			poison[protocol.EventID(wl.IDPrefix, i)] = true
		}
	}
	const deliveries = events * 2
	okDeliveries := int64(deliveries - 2*10)
	if !final.KeysReported || len(final.Keys) != wl.KeyCount {
		t.Errorf("final inspect reports keys %v: %+v, want the %d keys", final.KeysReported, final.Keys, wl.KeyCount)
	}
	for _, k := range final.Keys {
		if k.LastSequence != k.Events || k.MaxSequence != k.Events {
			t.Errorf("key state %+v: want sequences 1..events", k)
		}
	}
	if final.Completed != okDeliveries || final.Dead != 20 || final.Pending != 0 || final.Processing != 0 {
		t.Errorf("final inspect %+v, want %d completed, 20 dead, nothing left", final, okDeliveries)
	}
	if len(final.DeadLetters) != 20 || final.DeadLettersTruncated {
		t.Errorf("%d dead letters (truncated %v), want 20", len(final.DeadLetters), final.DeadLettersTruncated)
	}
	for _, dl := range final.DeadLetters {
		if !poison[dl.EventID] || dl.Attempts != 3 || !strings.Contains(dl.Error, "planted failure (poison=true, attempt 3)") {
			t.Errorf("dead letter %+v is not a poison event's third failure", dl)
		}
	}
	if counters.Handled != okDeliveries || counters.Completed != okDeliveries || counters.Buried != 20 ||
		counters.HandlerFailed != okDeliveries+20*3 || counters.Rescheduled != okDeliveries+20*2 || counters.Claims == 0 {
		t.Errorf("dispatcher counters %+v, want handled = completed = %d, buried 20, failed %d, rescheduled %d",
			counters, okDeliveries, okDeliveries+60, okDeliveries+40)
	}
	recs := readRecords(t, filepath.Join(dir, "preload.rec"), filepath.Join(dir, "pub.rec"),
		filepath.Join(dir, "disp-0.rec"), filepath.Join(dir, "disp-1.rec"))
	if len(recs.Published) != events {
		t.Errorf("%d published records, want %d", len(recs.Published), events)
	}
	checkHandles(t, recs, wl.Handlers, wl.FailFirst, wl.MaxAttempts, func(id string) bool { return poison[id] })
}

// TestDispatchCells runs the work cells' shapes small: unkeyed, 4 hot
// keys and many keys, a preload drained by two dispatcher processes,
// exactly once and in key order.
func TestDispatchCells(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		keys      string
		keyCount  int
		events    int
		handlers  []string
		dispatch  protocol.Dispatcher
		publisher bool // a publisher beside the dispatchers (the mixed cell)
	}{
		{"unkeyed", "none", 0, 4000, []string{"noop"}, protocol.Dispatcher{Concurrency: 50, Batch: 200, PollMs: 50}, false},
		{"hot keys", "hot", 4, 2000, []string{"noop"}, protocol.Dispatcher{Concurrency: 50, Batch: 200, PollMs: 50}, false},
		{"many keys", "many", 1000, 3000, []string{"h1", "h2"}, protocol.Dispatcher{Concurrency: 10, Batch: 50, PollMs: 50}, false},
		{"mixed", "many", 100, 1000, []string{"noop"}, protocol.Dispatcher{Concurrency: 10, Batch: 10, PollMs: 10}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if testing.Short() {
				tc.events /= 4
			}
			dsn := needDB(t)
			dir := t.TempDir()
			store := protocol.Store{Kind: "postgres", DSN: dsn, PoolSize: 8}
			wl := protocol.Workload{EventType: "bench.event", Handlers: tc.handlers, Keys: tc.keys, KeyCount: tc.keyCount,
				PayloadBytes: 128, IDPrefix: "c-"}
			runRole(t, &protocol.Config{Protocol: 1, Role: protocol.RoleSetup, Name: "setup", Store: store})
			files := []string{filepath.Join(dir, "preload.rec")}
			preload := tc.events
			if tc.publisher {
				preload = tc.events / 2
			}
			runRole(t, &protocol.Config{Protocol: 1, Role: protocol.RolePreload, Name: "preload",
				RecordPath: files[0], Store: store, Workload: wl,
				Publisher: protocol.Publisher{Publishers: 4, Batch: 100, Events: preload}})
			var disps []*proc
			for i := range 2 {
				name := fmt.Sprint("disp-", i)
				files = append(files, filepath.Join(dir, name+".rec"))
				p := startProc(t, &protocol.Config{Protocol: 1, Role: protocol.RoleDispatcher, Name: name,
					RecordPath: files[len(files)-1], Store: store, Workload: wl, Dispatcher: tc.dispatch})
				p.waitReady()
				disps = append(disps, p)
			}
			if tc.publisher {
				files = append(files, filepath.Join(dir, "pub.rec"))
				runRole(t, &protocol.Config{Protocol: 1, Role: protocol.RolePublisher, Name: "pub",
					RecordPath: files[len(files)-1], Store: store, Workload: wl,
					Publisher: protocol.Publisher{Publishers: 4, Batch: 1, Events: tc.events - preload, RatePerSec: 500, StartIndex: int64(preload)}})
			}
			final := drain(t, dsn)
			var completed int64
			for _, p := range disps {
				completed += p.stop().Counters.Completed
			}
			want := int64(tc.events * len(tc.handlers))
			if final.Completed != want || final.Dead != 0 || completed != want {
				t.Errorf("final inspect %+v, dispatchers completed %d; want %d completed", final, completed, want)
			}
			checkHandles(t, readRecords(t, files...), tc.handlers, 0, 0, func(string) bool { return false })
		})
	}
}

// TestGracefulStop: a dispatcher stopped with SIGTERM in the middle of a
// backlog completes what it claimed and exits; another one takes the
// rest: every delivery is handled exactly once.
func TestGracefulStop(t *testing.T) {
	t.Parallel()
	dsn := needDB(t)
	dir := t.TempDir()
	store := protocol.Store{Kind: "postgres", DSN: dsn, PoolSize: 4}
	wl := protocol.Workload{EventType: "bench.event", Handlers: []string{"h"}, Keys: "hot", KeyCount: 3,
		PayloadBytes: 32, IDPrefix: "stop-", HandlerCostUs: 300}
	events, stopAfter := int64(3000), int64(300)
	if testing.Short() {
		events, stopAfter = 1000, 100
	}
	runRole(t, &protocol.Config{Protocol: 1, Role: protocol.RoleSetup, Name: "setup", Store: store})
	runRole(t, &protocol.Config{Protocol: 1, Role: protocol.RolePreload, Name: "preload",
		RecordPath: filepath.Join(dir, "preload.rec"), Store: store, Workload: wl,
		Publisher: protocol.Publisher{Publishers: 2, Batch: 100, Events: int(events)}})
	disp := protocol.Dispatcher{Concurrency: 8, Batch: 50, PollMs: 20}
	start := func(name string) *proc {
		p := startProc(t, &protocol.Config{Protocol: 1, Role: protocol.RoleDispatcher, Name: name,
			RecordPath: filepath.Join(dir, name+".rec"), CountersIntervalMs: 20, Store: store, Workload: wl, Dispatcher: disp})
		p.waitReady()
		return p
	}
	a := start("disp-a")
	deadline := time.Now().Add(roleTimeout)
	for a.lastCounters().Handled < stopAfter {
		if time.Now().After(deadline) {
			t.Fatalf("disp-a handled %d in %v", a.lastCounters().Handled, roleTimeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
	doneA := a.stop()
	if c := doneA.Counters; c.Completed != c.Handled || c.Handled >= events {
		t.Errorf("disp-a stopped with %+v: want every handled delivery completed, and a backlog left", c)
	}
	b := start("disp-b")
	final := drain(t, dsn)
	b.stop()
	if final.Completed != events || final.Dead != 0 {
		t.Errorf("final inspect %+v, want %d completed", final, events)
	}
	checkHandles(t, readRecords(t, filepath.Join(dir, "preload.rec"), filepath.Join(dir, "disp-a.rec"), filepath.Join(dir, "disp-b.rec")),
		wl.Handlers, 0, 0, func(string) bool { return false })
}
