package main

import (
	"bytes"
	"context"
	"io"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/berkcansavur/relaybus/bench/protocol"
	"github.com/berkcansavur/relaybus/bench/worker/workerkit"
	"github.com/berkcansavur/relaybus/bench/worker/workerkit/peertest"
	"github.com/berkcansavur/relaybus/relaybus"
)

func TestVersion(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	if code := command.Run([]string{"version"}, &out, &errOut); code != 0 {
		t.Fatalf("version: exit %d, stderr %q", code, errOut.String())
	}
	// The test binary is built with this module's requirements, so its
	// build information names the River this module pins.
	if got := out.String(); !strings.HasPrefix(got, "river v0.51.2 ") || !strings.Contains(got, "worker protocol 1") {
		t.Errorf("version printed %q, want river v0.51.2 and worker protocol 1", got)
	}
	if code := command.Run([]string{"version", "x"}, io.Discard, io.Discard); code != 2 {
		t.Errorf("version with an argument: exit %d, want 2", code)
	}
	if code := command.Run(nil, io.Discard, io.Discard); code != 2 {
		t.Errorf("no command: exit %d, want 2", code)
	}
}

func TestModuleVersion(t *testing.T) {
	t.Parallel()
	bi := &debug.BuildInfo{Deps: []*debug.Module{
		{Path: "github.com/riverqueue/river/rivertype", Version: "v9.9.9"},
		{Path: riverModule, Version: "v0.51.2"},
	}}
	if got := moduleVersion(bi, riverModule); got != "v0.51.2" {
		t.Errorf("moduleVersion = %q, want v0.51.2", got)
	}
	bi.Deps[1].Replace = &debug.Module{Path: "example.test/fork", Version: "v0.51.3-fork"}
	if got := moduleVersion(bi, riverModule); got != "v0.51.3-fork" {
		t.Errorf("moduleVersion with a replacement = %q, want v0.51.3-fork", got)
	}
	if got := moduleVersion(&debug.BuildInfo{}, riverModule); got != "(unknown version)" {
		t.Errorf("moduleVersion without River = %q", got)
	}
}

func TestHelloAndBadConfig(t *testing.T) {
	t.Parallel()
	const pub = `"record_path":"/x","store":{"kind":"postgres","dsn":"x"},"publisher":{"publishers":1,"batch":1}`
	hello := func(t *testing.T, hello protocol.Message) {
		if !strings.HasPrefix(hello.Version, "river v") {
			t.Errorf("hello %+v is not river's", hello)
		}
		for _, c := range []string{"peer", "no-key-order", "store:postgres"} {
			if !slices.Contains(hello.Capabilities, c) {
				t.Errorf("hello capabilities %v lack %q", hello.Capabilities, c)
			}
		}
	}
	peertest.CheckBadConfigs(t, workerMain, hello, []peertest.BadConfig{
		{"empty", ``, "not valid JSON"},
		{"wrong protocol", `{"protocol":2,"role":"setup","store":{"kind":"postgres","dsn":"x"}}`, "protocol 2"},
		{"unknown role", `{"protocol":1,"role":"juggle","store":{"kind":"postgres","dsn":"x"}}`, `unknown role "juggle"`},
		{"mongo", `{"protocol":1,"role":"setup","store":{"kind":"mongo","mongo_uri":"m","database":"d"}}`, `store kind "mongo" is not supported`},
		{"no dsn", `{"protocol":1,"role":"setup","store":{"kind":"postgres"}}`, "needs dsn"},
		{"no record path", `{"protocol":1,"role":"dispatcher","store":{"kind":"postgres","dsn":"x"}}`, "needs record_path"},
		{"preload without count", `{"protocol":1,"role":"preload",` + pub + `,
			"workload":{"event_type":"t","handlers":["h"],"payload_bytes":10}}`, "preload needs a positive count"},
		{"bad keys", `{"protocol":1,"role":"publisher",` + pub + `,
			"workload":{"event_type":"t","handlers":["h"],"payload_bytes":10,"keys":"hot"}}`, "key_count"},
		{"handler twice", `{"protocol":1,"role":"publisher",` + pub + `,
			"workload":{"event_type":"t","handlers":["h","h"],"payload_bytes":10}}`, "listed twice"},
		{"tab in handler", `{"protocol":1,"role":"publisher",` + pub + `,
			"workload":{"event_type":"t","handlers":["a\tb"],"payload_bytes":10}}`, "control character"},
		{"retry max below base", `{"protocol":1,"role":"publisher",` + pub + `,
			"workload":{"event_type":"t","handlers":["h"],"payload_bytes":10,"retry_base_delay_ms":100,"retry_max_delay_ms":50}}`, "retry delays out of range"},
		{"concurrency over River's max", `{"protocol":1,"role":"dispatcher","record_path":"/x","store":{"kind":"postgres","dsn":"x"},
			"workload":{"event_type":"t","handlers":["h"],"payload_bytes":10},"dispatcher":{"concurrency":10001}}`, "concurrency 10001"},
		{"bad cooldown option", `{"protocol":1,"role":"dispatcher","record_path":"/x","store":{"kind":"postgres","dsn":"x"},
			"workload":{"event_type":"t","handlers":["h"],"payload_bytes":10},"dispatcher":{"options":{"fetch_cooldown_ms":0.5}}}`, "fetch_cooldown_ms"},
		{"bad max_workers option", `{"protocol":1,"role":"dispatcher","record_path":"/x","store":{"kind":"postgres","dsn":"x"},
			"workload":{"event_type":"t","handlers":["h"],"payload_bytes":10},"dispatcher":{"options":{"max_workers":10001}}}`, "max_workers"},
		{"bad poll interval option", `{"protocol":1,"role":"dispatcher","record_path":"/x","store":{"kind":"postgres","dsn":"x"},
			"workload":{"event_type":"t","handlers":["h"],"payload_bytes":10},"dispatcher":{"options":{"fetch_poll_interval_ms":"20"}}}`, "fetch_poll_interval_ms"},
		{"bad poll_only option", `{"protocol":1,"role":"dispatcher","record_path":"/x","store":{"kind":"postgres","dsn":"x"},
			"workload":{"event_type":"t","handlers":["h"],"payload_bytes":10},"dispatcher":{"options":{"poll_only":"yes"}}}`, "poll_only"},
	})
}

func TestClassifyOptions(t *testing.T) {
	t.Parallel()
	raw := `{"protocol":1,"role":"dispatcher","name":"d","record_path":"/r",
		"store":{"kind":"postgres","dsn":"x","pool_size":20,"options":{"completion_history":true}},
		"workload":{"event_type":"t","handlers":["h"],"keys":"many","key_count":100,"payload_bytes":128,
			"poison_every":50,"max_attempts":3,"retry_base_delay_ms":50,"retry_max_delay_ms":0},
		"publisher":{"publishers":0,"options":{"group_commit":true}},
		"dispatcher":{"concurrency":20,"batch":20,"poll_ms":100,"lease_ms":2000,"completion_window_us":500,
			"completion_batch_max":0,"completion_window_disabled":true,
			"options":{"fetch_cooldown_ms":10,"poll_only":true,"lanes":4,"max_workers":2000,"fetch_poll_interval_ms":20}},
		"cpu_profile_path":"/p","future_field":1}`
	applied, ignored, err := optionRules.Classify([]byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	wantApplied := []string{
		"dispatcher.concurrency", "dispatcher.lease_ms", "dispatcher.options.fetch_cooldown_ms",
		"dispatcher.options.fetch_poll_interval_ms", "dispatcher.options.max_workers",
		"dispatcher.options.poll_only", "dispatcher.poll_ms",
		"store.dsn", "store.kind", "store.pool_size",
		"workload.event_type", "workload.handlers", "workload.max_attempts", "workload.payload_bytes",
		"workload.poison_every", "workload.retry_base_delay_ms",
	}
	wantIgnored := []string{
		"cpu_profile_path", "dispatcher.batch", "dispatcher.completion_window_disabled",
		"dispatcher.completion_window_us", "dispatcher.options.lanes", "future_field", "publisher.options.group_commit", "store.options.completion_history",
		"workload.key_count", "workload.keys",
	}
	if !slices.Equal(applied, wantApplied) {
		t.Errorf("applied\n got %v\nwant %v", applied, wantApplied)
	}
	if !slices.Equal(ignored, wantIgnored) {
		t.Errorf("ignored\n got %v\nwant %v", ignored, wantIgnored)
	}
}

func TestRetryDelay(t *testing.T) {
	t.Parallel()
	// The schedule itself is workerkit's TestRetrySchedule's and
	// TestRetryDelayMatchesRelaybus's; here: the policy applies it with
	// relaybus's settings.
	const base, maxDelay = 50 * time.Millisecond, 200 * time.Millisecond
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	p := &backoffPolicy{schedule: workerkit.RetrySchedule{Base: base, Max: maxDelay}, now: func() time.Time { return now }, rand: func() float64 { return 0.5 }}
	if got := p.NextRetry(&rivertype.JobRow{Attempt: 2}); !got.Equal(now.Add(100 * time.Millisecond)) {
		t.Errorf("NextRetry after attempt 2 = %v, want now + 100ms", got)
	}

	for _, tc := range []struct {
		baseMs, maxMs     int
		wantErr           bool
		wantDefault       bool // River's default policy (nil)
		wantBase, wantMax time.Duration
	}{
		{baseMs: 0, maxMs: 0, wantDefault: true},
		{baseMs: 50, maxMs: 200, wantBase: base, wantMax: maxDelay},
		{baseMs: 50, maxMs: 0, wantBase: base, wantMax: relaybus.DefaultRetryMaxDelay},
		{baseMs: 2000, maxMs: 0, wantBase: 2 * time.Second, wantMax: relaybus.DefaultRetryMaxDelay},
		{baseMs: 0, maxMs: 500, wantErr: true}, // below the default base of 1s
		{baseMs: 100, maxMs: 50, wantErr: true},
	} {
		pol, err := retryPolicyFor(&protocol.Workload{RetryBaseDelayMs: tc.baseMs, RetryMaxDelayMs: tc.maxMs})
		switch {
		case tc.wantErr:
			if err == nil {
				t.Errorf("retryPolicyFor(%d ms, %d ms): no error", tc.baseMs, tc.maxMs)
			}
		case tc.wantDefault:
			if err != nil || pol != nil {
				t.Errorf("retryPolicyFor(0, 0) = %v, %v; want River's default (nil)", pol, err)
			}
		default:
			b, ok := pol.(*backoffPolicy)
			if err != nil || !ok || b.schedule.Base != tc.wantBase || b.schedule.Max != tc.wantMax {
				t.Errorf("retryPolicyFor(%d ms, %d ms) = %+v, %v; want base %v max %v", tc.baseMs, tc.maxMs, pol, err, tc.wantBase, tc.wantMax)
			}
		}
	}
}

func TestClientConfig(t *testing.T) {
	t.Parallel()
	workers := river.NewWorkers()
	river.AddWorker(workers, &deliveryWorker{})
	for _, tc := range []struct {
		name                   string
		d                      protocol.Dispatcher
		extra                  dispatcherOptions
		maxWorkers             int
		poll, cooldown, rescue time.Duration // rescue: RescueStuckJobsAfter and JobTimeout (0: River's defaults)
		wantErr                string
	}{
		{name: "defaults", maxWorkers: defaultConcurrency},
		{name: "scenario 2 defaults", d: protocol.Dispatcher{Concurrency: 10, Batch: 10, PollMs: 1000},
			maxWorkers: 10, poll: time.Second, cooldown: river.FetchCooldownDefault},
		{name: "tuned", d: protocol.Dispatcher{Concurrency: 200, Batch: 200, PollMs: 50},
			maxWorkers: 200, poll: 50 * time.Millisecond, cooldown: 50 * time.Millisecond},
		{name: "faults", d: protocol.Dispatcher{Concurrency: 20, Batch: 20, PollMs: 100, LeaseMs: 2000},
			maxWorkers: 20, poll: 100 * time.Millisecond, cooldown: 100 * time.Millisecond, rescue: 2 * time.Second},
		{name: "cooldown option", d: protocol.Dispatcher{PollMs: 50}, extra: dispatcherOptions{fetchCooldown: 5 * time.Millisecond},
			maxWorkers: defaultConcurrency, poll: 50 * time.Millisecond, cooldown: 5 * time.Millisecond},
		{name: "cooldown over poll", d: protocol.Dispatcher{PollMs: 50}, extra: dispatcherOptions{fetchCooldown: 60 * time.Millisecond},
			wantErr: "longer than the poll interval"},
		{name: "max_workers option", d: protocol.Dispatcher{Concurrency: 200, PollMs: 50}, extra: dispatcherOptions{maxWorkers: 2000},
			maxWorkers: 2000, poll: 50 * time.Millisecond, cooldown: 50 * time.Millisecond},
		{name: "poll interval option", d: protocol.Dispatcher{PollMs: 1000}, extra: dispatcherOptions{fetchPollInterval: 20 * time.Millisecond},
			maxWorkers: defaultConcurrency, poll: 20 * time.Millisecond, cooldown: 20 * time.Millisecond},
		{name: "as river bench runs it", d: protocol.Dispatcher{Concurrency: 200, Batch: 200, PollMs: 50},
			extra: dispatcherOptions{maxWorkers: riverBenchMaxWorkers, fetchCooldown: riverBenchFetchCooldownMs * time.Millisecond,
				fetchPollInterval: riverBenchFetchPollIntervalMs * time.Millisecond},
			maxWorkers: 2000, poll: 20 * time.Millisecond, cooldown: 2 * time.Millisecond},
		{name: "cooldown over the poll option", d: protocol.Dispatcher{PollMs: 1000},
			extra:   dispatcherOptions{fetchCooldown: 30 * time.Millisecond, fetchPollInterval: 20 * time.Millisecond},
			wantErr: "longer than the poll interval"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := &protocol.Config{Dispatcher: tc.d}
			cfg, err := clientConfig(c, tc.extra, workers)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("clientConfig: error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := cfg.Queues[riverQueue].MaxWorkers; got != tc.maxWorkers {
				t.Errorf("MaxWorkers = %d, want %d", got, tc.maxWorkers)
			}
			if cfg.FetchPollInterval != tc.poll || cfg.FetchCooldown != tc.cooldown ||
				cfg.RescueStuckJobsAfter != tc.rescue || cfg.JobTimeout != tc.rescue {
				t.Errorf("poll %v cooldown %v rescue %v timeout %v, want %v %v %v %v", cfg.FetchPollInterval, cfg.FetchCooldown,
					cfg.RescueStuckJobsAfter, cfg.JobTimeout, tc.poll, tc.cooldown, tc.rescue, tc.rescue)
			}
			if cfg.CompletedJobRetentionPeriod != -1 || cfg.DiscardedJobRetentionPeriod != -1 ||
				cfg.CancelledJobRetentionPeriod != -1 || cfg.ReindexerIndexNames == nil || len(cfg.ReindexerIndexNames) != 0 {
				t.Errorf("retention/reindexer settings %+v are not the package doc's", cfg)
			}
			// River validates the config when the client is made; a pool
			// connects lazily, so none is made here.
			pool, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:1/none")
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			if _, err := river.NewClient(riverpgxv5.New(pool), cfg); err != nil {
				t.Errorf("River refuses the mapped config: %v", err)
			}
		})
	}
}
