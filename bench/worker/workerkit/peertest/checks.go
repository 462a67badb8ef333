package peertest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berkcansavur/relaybus/bench/peer"
	"github.com/berkcansavur/relaybus/bench/protocol"
	"github.com/berkcansavur/relaybus/bench/worker/workerkit"
)

var update = flag.Bool("update", false, "rewrite the peer's testdata/*.golden")

// mainModule is the module the peers import through their replace
// directive.
const mainModule = "github.com/berkcansavur/relaybus"

// CheckBuildInputs checks that every package of the main module the
// peer's build compiles lies under the harness's list of its inputs
// (peer.Descriptor.Inputs), so that a change to one of them makes the
// harness build the peer from the working tree instead of HEAD's commit.
func CheckBuildInputs(t *testing.T) {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", "-f", "{{with .Module}}{{.Path}}{{end}}\t{{.Dir}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	p, ok := peer.ByName(peerName)
	if !ok {
		t.Fatalf("the harness knows no %s peer", peerName)
	}
	n := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		mod, dir, _ := strings.Cut(line, "\t")
		if mod != mainModule && mod != mainModule+"/"+p.Dir() {
			continue
		}
		n++
		rel, err := filepath.Rel(root, dir)
		if err != nil {
			t.Fatal(err)
		}
		rel = filepath.ToSlash(rel)
		covered := false
		for _, in := range p.Inputs() {
			if rel == in || strings.HasPrefix(rel, in+"/") {
				covered = true
			}
		}
		if !covered {
			t.Errorf("the peer compiles %s (%s), which the harness's Inputs %q for %s leave out", rel, mod, p.Inputs(), peerName)
		}
	}
	if n < 3 {
		t.Fatalf("go list named %d packages of this repository, want the peer, bench/protocol and bench/record:\n%s", n, out)
	}
}

// DecodeLines parses a worker's stdout.
func DecodeLines(t testing.TB, out []byte) []protocol.Message {
	t.Helper()
	var msgs []protocol.Message
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var m protocol.Message
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("stdout line %q is not JSON: %v", sc.Text(), err)
		}
		msgs = append(msgs, m)
	}
	return msgs
}

// BadConfig is a config a worker must refuse, and a piece of the error
// it must say why with. It is an unnamed struct type so that a peer's
// table of them reads as one line a case.
type BadConfig = struct{ Name, Config, Want string }

// CheckBadConfigs runs worker on each config (in the test's process) and
// checks that it exits 2 after exactly three lines: a protocol 1 hello,
// which hello checks further, an error, and a done line whose error
// starts with the peer's name and contains Want.
func CheckBadConfigs(t *testing.T, worker workerkit.WorkerMain, hello func(t *testing.T, m protocol.Message), cases []BadConfig) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) {
			t.Parallel()
			var out bytes.Buffer
			if code := worker(context.Background(), strings.NewReader(tc.Config), &out, io.Discard); code != 2 {
				t.Errorf("exit code %d, want 2", code)
			}
			msgs := DecodeLines(t, out.Bytes())
			if len(msgs) != 3 {
				t.Fatalf("got %d lines, want hello, error, done: %+v", len(msgs), msgs)
			}
			if msgs[0].Type != protocol.TypeHello || msgs[0].Protocol != protocol.Version {
				t.Errorf("first line %+v is not a protocol 1 hello", msgs[0])
			}
			hello(t, msgs[0])
			if done := msgs[2]; done.Type != protocol.TypeDone || !strings.Contains(done.Error, tc.Want) || !strings.HasPrefix(done.Error, peerName+": ") {
				t.Errorf("last line %+v, want done with an error containing %q", done, tc.Want)
			}
		})
	}
}

// golden compares got with testdata/<name>.golden; on a mismatch it writes
// got beside it as testdata/<name>.actual. With -update it rewrites the
// golden file instead.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -run %s -update writes it)", err, t.Name())
	}
	if !bytes.Equal(got, want) {
		actual := filepath.Join("testdata", name+".actual")
		_ = os.WriteFile(actual, got, 0o644)
		t.Fatalf("%s differs from %s (wrote %s; go test -run %s -update rewrites it)", name, path, actual, t.Name())
	}
}

// timeField is the time stamp of every protocol line, left out of the
// golden files.
var timeField = regexp.MustCompile(`"t_ns":[0-9]+,?`)

// protocolConfigs are the configs CheckProtocol writes to `worker`, the
// same for every peer, each named in the golden file instead of written
// out (it holds a test database's DSN, $DSN here): refused ones, and for
// each role one that sets every field and every peer's free-form
// options, so that the ready lines show what the peer applies and
// ignores.
var protocolConfigs = []struct{ name, config string }{
	{"empty stdin", ``},
	{"not JSON", `{`},
	{"protocol 2", `{"protocol":2,"role":"setup","store":{"kind":"postgres","dsn":"$DSN"}}`},
	{"a tab in a handler name", `{"protocol":1,"role":"publisher","record_path":"$DIR/p.rec","store":{"kind":"postgres","dsn":"$DSN"},
		"workload":{"event_type":"t","handlers":["a\tb"],"payload_bytes":10},"publisher":{"publishers":1,"batch":1}}`},
	{"setup", `{"protocol":1,"role":"setup","name":"setup","cpu_profile_path":"","future_field":1,
		"store":{"kind":"postgres","dsn":"$DSN","pool_size":3,"mongo_uri":"m","database":"d","options":{"completion_history":true}}}`},
	{"inspect", `{"protocol":1,"role":"inspect","name":"inspect","store":{"kind":"postgres","dsn":"$DSN","pool_size":2}}`},
	{"publisher", `{"protocol":1,"role":"publisher","name":"pub","record_path":"$DIR/pub.rec","counters_interval_ms":100000,
		"store":{"kind":"postgres","dsn":"$DSN","pool_size":2},
		"workload":{"event_type":"bench.event","handlers":["a","b"],"keys":"many","key_count":3,"payload_bytes":16,"id_prefix":"p-",
			"poison_every":5,"fail_first":1,"max_attempts":3,"retry_base_delay_ms":10,"retry_max_delay_ms":20,"handler_cost_us":1},
		"publisher":{"publishers":1,"batch":1,"events":1,"rate_per_sec":10,"start_index":7,"stride":2,"options":{"group_commit":true}}}`},
	{"dispatcher", `{"protocol":1,"role":"dispatcher","name":"disp","record_path":"$DIR/disp.rec","counters_interval_ms":100000,
		"cpu_profile_path":"$DIR/cpu.prof","store":{"kind":"postgres","dsn":"$DSN","pool_size":4},
		"workload":{"event_type":"bench.event","handlers":["a","b"],"keys":"hot","key_count":2,"payload_bytes":16,"id_prefix":"d-",
			"poison_every":5,"fail_first":1,"max_attempts":3,"retry_base_delay_ms":10,"retry_max_delay_ms":20,"handler_cost_us":1},
		"dispatcher":{"concurrency":4,"batch":10,"poll_ms":10,"lease_ms":1000,"completion_window_us":5,"completion_batch_max":3,
			"completion_window_disabled":true,"extra_cost_per_delivery_us":1,
			"options":{"streams":2,"max_lanes":4,"max_workers":3,"fetch_cooldown_ms":2,"fetch_poll_interval_ms":20,"poll_only":true,"lanes":3}}}`},
}

// CheckProtocol holds what the peer's binary says on the harness's side
// of protocol 1 to testdata/protocol.golden, byte for byte but for the
// times (t_ns) and Go's version: its command line (usage, version and
// errors, with their exit codes), and for each of protocolConfigs, on a
// fresh database that role setup prepared, the lines `worker` writes up
// to its ready line: hello; error and done for a refused config; ready
// with the applied and ignored options. The process is killed after its
// ready line.
func CheckProtocol(t *testing.T) {
	t.Helper()
	var b bytes.Buffer
	for _, args := range [][]string{nil, {"help"}, {"version"}, {"version", "x"}, {"bogus"}} {
		cmd := exec.Command(peerBin, args...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		code := 0
		if err := cmd.Run(); err != nil {
			ee, ok := err.(*exec.ExitError)
			if !ok {
				t.Fatal(err)
			}
			code = ee.ExitCode()
		}
		b.WriteString("$ " + strings.Join(append([]string{peerName}, args...), " ") + "\n")
		b.WriteString("exit " + strconv.Itoa(code) + "\n")
		b.WriteString("stdout:\n" + strings.ReplaceAll(stdout.String(), runtime.Version(), "GOVERSION"))
		b.WriteString("stderr:\n" + stderr.String())
	}
	dsn, dir := Database(t), t.TempDir()
	Run(t, &protocol.Config{Protocol: protocol.Version, Role: protocol.RoleSetup, Name: "setup",
		Store: protocol.Store{Kind: "postgres", DSN: dsn}})
	for _, c := range protocolConfigs {
		b.WriteString("$ " + peerName + " worker <<< " + c.name + "\n")
		cfg := strings.NewReplacer("$DSN", dsn, "$DIR", dir).Replace(c.config)
		for _, line := range linesUntilReady(t, cfg) {
			b.Write(timeField.ReplaceAll(line, nil))
			b.WriteByte('\n')
		}
	}
	golden(t, "protocol", b.Bytes())
}

// linesUntilReady runs `<peer> worker` with stdin and returns its stdout
// lines up to its ready line, or all of them when it exits before one.
func linesUntilReady(t *testing.T, stdin string) [][]byte {
	t.Helper()
	cmd := exec.Command(peerBin, "worker")
	cmd.Stdin = strings.NewReader(stdin)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	timer := time.AfterFunc(RoleTimeout, func() { _ = cmd.Process.Kill() })
	defer timer.Stop()
	var lines [][]byte
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		lines = append(lines, slices.Clone(sc.Bytes()))
		if bytes.Contains(sc.Bytes(), []byte(`"type":"ready"`)) {
			break
		}
	}
	return lines
}

// CheckRecords runs a small workload on a fresh database (a preload of 50
// events with 5 keys, for two handlers; every delivery fails its first
// attempt, every 20th event is poison and dead after 2) drained by one
// dispatcher with settings d, and holds the record lines of the preload
// and the dispatcher, sorted, to testdata/records.golden: byte for byte
// but for their times and lease tokens, which differ from run to run.
func CheckRecords(t *testing.T, d protocol.Dispatcher) {
	t.Helper()
	dsn := Database(t)
	dir := t.TempDir()
	store := protocol.Store{Kind: "postgres", DSN: dsn, PoolSize: 4}
	wl := protocol.Workload{EventType: "bench.event", Handlers: []string{"a", "b"}, Keys: "many", KeyCount: 5,
		PayloadBytes: 32, IDPrefix: "rec-", PoisonEvery: 20, FailFirst: 1, MaxAttempts: 2,
		RetryBaseDelayMs: 10, RetryMaxDelayMs: 20}
	Run(t, &protocol.Config{Protocol: protocol.Version, Role: protocol.RoleSetup, Name: "setup", Store: store})
	files := []string{filepath.Join(dir, "preload.rec"), filepath.Join(dir, "disp.rec")}
	Run(t, &protocol.Config{Protocol: protocol.Version, Role: protocol.RolePreload, Name: "preload", RecordPath: files[0],
		Store: store, Workload: wl, Publisher: protocol.Publisher{Publishers: 1, Batch: 10, Events: 50}})
	disp := Start(t, &protocol.Config{Protocol: protocol.Version, Role: protocol.RoleDispatcher, Name: "disp", RecordPath: files[1],
		Store: store, Workload: wl, Dispatcher: d})
	disp.WaitReady()
	Drain(t, dsn)
	disp.Stop()
	var lines []string
	for _, path := range files {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for line := range strings.Lines(string(b)) {
			lines = append(lines, maskRecord(strings.TrimSuffix(line, "\n")))
		}
	}
	slices.Sort(lines)
	golden(t, "records", []byte(strings.Join(lines, "\n")+"\n"))
}

// maskRecord replaces the times and the lease token of a record line
// (bench/record's format) with T and TOKEN.
func maskRecord(line string) string {
	f := strings.Split(line, "\t")
	mask := func(i int, with string) {
		if i < len(f) {
			f[i] = with
		}
	}
	switch f[0] {
	case "P": // P id type key commit uncertain [call_start]
		mask(4, "T")
		mask(6, "T")
	case "H": // H id handler key sequence attempt start ok [end holder token]
		mask(6, "T")
		mask(8, "T")
		mask(10, "TOKEN")
	case "C": // C id handler attempt token completed
		mask(4, "TOKEN")
		mask(5, "T")
	}
	return strings.Join(f, "\t")
}

// Exercise runs the checks every peer's tests make, as subtests:
// CheckBuildInputs, CheckProtocol, and CheckRecords with dispatcher
// settings d (for records that are the same on every run: one delivery
// in flight at a time).
func Exercise(t *testing.T, d protocol.Dispatcher) {
	t.Helper()
	t.Run("build inputs", func(t *testing.T) {
		t.Parallel()
		CheckBuildInputs(t)
	})
	t.Run("protocol", func(t *testing.T) {
		t.Parallel()
		CheckProtocol(t)
	})
	t.Run("records", func(t *testing.T) {
		t.Parallel()
		CheckRecords(t, d)
	})
}
