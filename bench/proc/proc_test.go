package proc

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berkcansavur/relaybus/bench/protocol"
)

// fakeWorkerEnv makes the test binary act as a worker (`<test> worker`).
// Its value is the behaviour: "v010" speaks only the fields v0.1.0's
// protocol 1 has; "extra" adds unknown fields and message types;
// "nohello" never says hello; "proto2" claims protocol 2; "stubborn"
// ignores SIGTERM.
const fakeWorkerEnv = "RELAYBUS_BENCH_FAKE_WORKER"

func TestMain(m *testing.M) {
	if mode := os.Getenv(fakeWorkerEnv); mode != "" && len(os.Args) > 1 && os.Args[1] == "worker" {
		os.Exit(fakeWorker(mode))
	}
	os.Exit(m.Run())
}

func fakeWorker(mode string) int {
	out := json.NewEncoder(os.Stdout)
	now := func() int64 { return time.Now().UnixNano() }
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	switch mode {
	case "nohello":
		io.Copy(io.Discard, os.Stdin)
		fmt.Fprintln(os.Stderr, "fake: no hello")
		return 1
	case "proto2":
		out.Encode(map[string]any{"type": "hello", "t_ns": now(), "protocol": 2, "version": "9.0.0"})
		return 0
	}
	if mode == "extra" {
		out.Encode(map[string]any{"type": "greeting", "t_ns": now(), "mood": "fine"})
		out.Encode(map[string]any{"type": "hello", "t_ns": now(), "protocol": 1, "version": "0.9.0",
			"capabilities": []string{"lanes"}, "build": map[string]any{"go": "1.99"}})
	} else {
		// Exactly the v0.1.0 hello: no capabilities.
		fmt.Fprintf(os.Stdout, `{"type":"hello","t_ns":%d,"protocol":1,"version":"0.1.0"}`+"\n", now())
	}
	var cfg protocol.Config
	if err := json.NewDecoder(os.Stdin).Decode(&cfg); err != nil {
		out.Encode(protocol.Message{Type: protocol.TypeDone, TimeNs: now(), Error: "fake: no config: " + err.Error()})
		return 1
	}
	fmt.Fprintf(os.Stderr, "fake worker %s role %s\n", cfg.Name, cfg.Role)
	if mode == "extra" {
		out.Encode(map[string]any{"type": "ready", "t_ns": now(), "applied": []string{"dispatcher.batch"}, "ignored": []string{"dispatcher.options.wake"}, "shards": 3})
		out.Encode(map[string]any{"type": "telemetry", "t_ns": now(), "cpu": 0.5})
	} else {
		fmt.Fprintf(os.Stdout, `{"type":"ready","t_ns":%d,"ignored":["dispatcher.options.wake"]}`+"\n", now())
	}
	handled := int64(0)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-term:
			if mode == "stubborn" {
				continue
			}
			out.Encode(protocol.Message{Type: protocol.TypeDone, TimeNs: now(), Counters: &protocol.Counters{Handled: handled}})
			return 0
		case <-tick.C:
			handled += 10
			if mode == "extra" {
				out.Encode(map[string]any{"type": "counters", "t_ns": now(), "counters": map[string]any{"handled": handled, "wake_ups": 7}})
			} else {
				out.Encode(protocol.Message{Type: protocol.TypeCounters, TimeNs: now(), Counters: &protocol.Counters{Handled: handled}})
			}
		}
	}
}

func fakeBin(t *testing.T, mode string) string {
	t.Helper()
	t.Setenv(fakeWorkerEnv, mode)
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

func TestProcDrivesOldAndNewWorkers(t *testing.T) {
	for _, mode := range []string{"v010", "extra"} {
		t.Run(mode, func(t *testing.T) {
			bin := fakeBin(t, mode)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			log := filepath.Join(t.TempDir(), "disp-0.log")
			p, err := Start(bin, protocol.Config{Protocol: 1, Role: protocol.RoleDispatcher, Name: "disp-0"}, log)
			if err != nil {
				t.Fatal(err)
			}
			hello, err := p.Hello(ctx)
			if err != nil || CheckHello(hello) != nil {
				t.Fatalf("hello %+v: %v", hello, err)
			}
			ready, err := p.WaitReady(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(ready.Ignored) != 1 || ready.Ignored[0] != "dispatcher.options.wake" {
				t.Fatalf("ready ignored = %v", ready.Ignored)
			}
			for p.Counters() == nil || p.Counters().Handled < 20 {
				select {
				case <-ctx.Done():
					t.Fatal("no counters")
				case <-time.After(5 * time.Millisecond):
				}
			}
			p.Stop(5 * time.Second)
			done, err := p.Wait(ctx)
			if err != nil || done == nil || done.Counters.Handled < 20 {
				t.Fatalf("done %+v: %v", done, err)
			}
			logText, _ := os.ReadFile(log)
			if !strings.Contains(string(logText), "fake worker disp-0 role dispatcher") {
				t.Fatalf("stderr log = %q", logText)
			}
		})
	}
}

func TestProcStopKillsStubbornWorker(t *testing.T) {
	bin := fakeBin(t, "stubborn")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p, err := Start(bin, protocol.Config{Protocol: 1, Role: protocol.RoleDispatcher, Name: "d"}, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	p.Stop(200 * time.Millisecond)
	// A worker that ignores SIGTERM broke protocol 1: an error, unlike a
	// planned kill.
	if _, err := p.Wait(ctx); err == nil || !strings.Contains(err.Error(), "ignored SIGTERM for 200ms") {
		t.Fatalf("Wait after a forced stop: %v", err)
	}
	if p.Killed() {
		t.Fatal("a forced stop is not a planned kill")
	}
}

func TestProcPlannedKillIsNotAnError(t *testing.T) {
	bin := fakeBin(t, "v010")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p, err := Start(bin, protocol.Config{Protocol: 1, Role: protocol.RoleDispatcher, Name: "d"}, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	p.Kill()
	if done, err := p.Wait(ctx); err != nil || done != nil || !p.Killed() {
		t.Fatalf("planned kill: done %+v, err %v, killed %v", done, err, p.Killed())
	}
}

func TestProcWorkerExitsWithoutDone(t *testing.T) {
	bin := fakeBin(t, "nohello")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p, err := Start(bin, protocol.Config{Protocol: 1, Role: protocol.RoleSetup, Name: "s"}, filepath.Join(t.TempDir(), "s.log"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.WaitReady(ctx); err == nil || !strings.Contains(err.Error(), "exited before it was ready") || !strings.Contains(err.Error(), "s.log") {
		t.Fatalf("WaitReady: %v", err)
	}
	if _, err := p.Wait(ctx); err == nil || !strings.Contains(err.Error(), "without a done line") {
		t.Fatalf("Wait: %v", err)
	}
}

func TestHandshake(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct{ mode, want string }{
		{"v010", ""},
		{"extra", ""},
		{"nohello", "exited without a hello line"},
		{"proto2", "speaks protocol 2 but this harness knows only up to 1"},
	} {
		bin := fakeBin(t, tc.mode)
		hello, err := Handshake(ctx, bin)
		if tc.want == "" {
			if err != nil || hello.Protocol != 1 {
				t.Errorf("%s: %+v %v", tc.mode, hello, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.mode, err, tc.want)
		}
	}
}
