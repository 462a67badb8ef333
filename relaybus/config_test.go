package relaybus

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/berkcansavur/relaybus/relaybus/driver"
)

func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	c, err := Config{}.withDefaults()
	require.NoError(t, err)
	require.NoError(t, driver.ValidateName("owner", c.Owner))
	require.Equal(t, DefaultConcurrency, c.Concurrency)
	require.Equal(t, DefaultBatchSize, c.BatchSize)
	require.Equal(t, DefaultPollInterval, c.PollInterval)
	require.Equal(t, DefaultLeaseDuration, c.LeaseDuration)
	require.Equal(t, DefaultLeaseDuration/3, c.LeaseRenewInterval)
	require.Equal(t, DefaultCompletionBatchWindow, c.CompletionBatchWindow)
	require.Equal(t, DefaultCompletionBatchMax, c.CompletionBatchMax)
	require.Equal(t, DefaultMaxAttempts, c.MaxAttempts)
	require.Equal(t, DefaultRetryBaseDelay, c.RetryBaseDelay)
	require.Equal(t, DefaultRetryMaxDelay, c.RetryMaxDelay)
	require.Equal(t, DefaultRetryJitter, c.RetryJitter)
	require.Equal(t, DefaultMaxPayloadBytes, c.MaxPayloadBytes)
	require.NotNil(t, c.Logger)
	require.NotNil(t, c.Now)

	// Two buses never share a default owner.
	c2, err := Config{}.withDefaults()
	require.NoError(t, err)
	require.NotEqual(t, c.Owner, c2.Owner)

	// Disabled turns batching and jitter off.
	c, err = Config{CompletionBatchWindow: Disabled, RetryJitter: Disabled}.withDefaults()
	require.NoError(t, err)
	require.Equal(t, time.Duration(Disabled), c.CompletionBatchWindow)
	require.Zero(t, c.RetryJitter)

	// A large base raises the default max instead of failing.
	c, err = Config{RetryBaseDelay: 2 * time.Hour}.withDefaults()
	require.NoError(t, err)
	require.Equal(t, 2*time.Hour, c.RetryMaxDelay)
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	tests := []struct {
		field string
		cfg   Config
	}{
		{"Owner", Config{Owner: strings.Repeat("o", MaxHandlerNameBytes+1)}},
		{"Owner", Config{Owner: "a\x00b"}},
		{"Concurrency", Config{Concurrency: -1}},
		{"Concurrency", Config{Concurrency: MaxConcurrency + 1}},
		{"BatchSize", Config{BatchSize: -1}},
		{"BatchSize", Config{BatchSize: MaxClaimLimit + 1}},
		{"PollInterval", Config{PollInterval: MinPollInterval - 1}},
		{"PollInterval", Config{PollInterval: MaxPollInterval + 1}},
		{"LeaseDuration", Config{LeaseDuration: MinLeaseDuration - 1}},
		{"LeaseDuration", Config{LeaseDuration: MaxLeaseDuration + 1}},
		{"LeaseRenewInterval", Config{LeaseRenewInterval: -1}},
		{"LeaseRenewInterval", Config{LeaseDuration: time.Second, LeaseRenewInterval: time.Second}},
		{"CompletionBatchWindow", Config{CompletionBatchWindow: -2}},
		{"CompletionBatchWindow", Config{CompletionBatchWindow: MaxCompletionBatchWindow + 1}},
		{"CompletionBatchMax", Config{CompletionBatchMax: -1}},
		{"CompletionBatchMax", Config{CompletionBatchMax: MaxLeasesPerCall + 1}},
		{"MaxAttempts", Config{MaxAttempts: -1}},
		{"MaxAttempts", Config{MaxAttempts: MaxAttemptsLimit + 1}},
		{"RetryBaseDelay", Config{RetryBaseDelay: -1}},
		{"RetryBaseDelay", Config{RetryBaseDelay: MaxRetryDelay + 1}},
		{"RetryMaxDelay", Config{RetryBaseDelay: time.Minute, RetryMaxDelay: time.Second}},
		{"RetryMaxDelay", Config{RetryMaxDelay: MaxRetryDelay + 1}},
		{"RetryJitter", Config{RetryJitter: -0.5}},
		{"RetryJitter", Config{RetryJitter: 1.01}},
		{"RetryJitter", Config{RetryJitter: math.NaN()}},
		{"MaxPayloadBytes", Config{MaxPayloadBytes: -1}},
		{"MaxPayloadBytes", Config{MaxPayloadBytes: MaxPayloadBytesLimit + 1}},
	}
	for _, tt := range tests {
		_, err := New[*fakeTx](newFakeStore(), tt.cfg)
		require.ErrorIs(t, err, ErrInvalid, tt.field)
		require.Contains(t, err.Error(), tt.field)
		require.True(t, strings.HasPrefix(err.Error(), "relaybus: "), err.Error())
	}

	// The bounds themselves are accepted.
	for _, cfg := range []Config{
		{Concurrency: 1, BatchSize: 1, PollInterval: MinPollInterval, LeaseDuration: MinLeaseDuration,
			CompletionBatchMax: 1, MaxAttempts: 1, RetryBaseDelay: 1, RetryMaxDelay: 1, RetryJitter: 1, MaxPayloadBytes: 1},
		{Concurrency: MaxConcurrency, BatchSize: MaxClaimLimit, PollInterval: MaxPollInterval, LeaseDuration: MaxLeaseDuration,
			LeaseRenewInterval: MaxLeaseDuration - 1, CompletionBatchWindow: MaxCompletionBatchWindow, CompletionBatchMax: MaxLeasesPerCall,
			MaxAttempts: MaxAttemptsLimit, RetryBaseDelay: MaxRetryDelay, RetryMaxDelay: MaxRetryDelay, MaxPayloadBytes: MaxPayloadBytesLimit},
	} {
		_, err := New[*fakeTx](newFakeStore(), cfg)
		require.NoError(t, err)
	}

	_, err := New[*fakeTx](nil, Config{})
	require.ErrorIs(t, err, ErrInvalid)
}

func TestHandleValidation(t *testing.T) {
	t.Parallel()
	b, err := New[*fakeTx](newFakeStore(), Config{})
	require.NoError(t, err)
	noop := func(context.Context, *Delivery) error { return nil }
	require.NoError(t, b.Handle("t", "h", noop, nil))

	for name, err := range map[string]error{
		"empty type":        b.Handle("", "h2", noop, nil),
		"type with NUL":     b.Handle("a\x00", "h2", noop, nil),
		"type too long":     b.Handle(strings.Repeat("t", MaxEventTypeBytes+1), "h2", noop, nil),
		"empty name":        b.Handle("t", "", noop, nil),
		"name too long":     b.Handle("t", strings.Repeat("n", MaxHandlerNameBytes+1), noop, nil),
		"duplicate name":    b.Handle("other", "h", noop, nil),
		"duplicate declare": b.Declare("t", "h", nil),
		"nil fn":            b.Handle("t", "h2", nil, nil),
		"nil tx fn":         b.HandleTx("t", "h2", nil, nil),
		"attempts < 0":      b.Handle("t", "h2", noop, &HandlerOptions{MaxAttempts: -1}),
		"attempts > limit":  b.Handle("t", "h2", noop, &HandlerOptions{MaxAttempts: MaxAttemptsLimit + 1}),
		"timeout too small": b.Handle("t", "h2", noop, &HandlerOptions{Timeout: time.Microsecond}),
		"timeout too large": b.Handle("t", "h2", noop, &HandlerOptions{Timeout: MaxHandlerTimeout + 1}),
		"negative timeout":  b.Handle("t", "h2", noop, &HandlerOptions{Timeout: -time.Second}),
	} {
		require.ErrorIs(t, err, ErrInvalid, name)
	}
	require.NoError(t, b.Handle("t", "h2", noop, &HandlerOptions{MaxAttempts: 1, Timeout: MinHandlerTimeout}))
}

// TestRetryDelay checks the schedule against testdata/retry_delays.txt,
// the table the River peer's copy of it is checked against too.
func TestRetryDelay(t *testing.T) {
	t.Parallel()
	for _, tt := range readRetryDelays(t, "testdata/retry_delays.txt") {
		got := retryDelay(tt.attempt, tt.base, tt.max, tt.jitter, tt.r)
		require.InDelta(t, float64(tt.want), float64(got), float64(time.Millisecond), "line %d: %+v", tt.line, tt)
	}
}

type retryDelayCase struct {
	line      int
	attempt   int
	base, max time.Duration
	jitter, r float64
	want      time.Duration
}

// readRetryDelays reads the table of path: one case a line, six columns,
// # comments.
func readRetryDelays(t *testing.T, path string) []retryDelayCase {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	var cases []retryDelayCase
	for i, line := range strings.Split(string(data), "\n") {
		line, _, _ = strings.Cut(line, "#")
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		require.Len(t, f, 6, "%s:%d", path, i+1)
		c := retryDelayCase{line: i + 1}
		var errs [6]error
		c.attempt, errs[0] = strconv.Atoi(f[0])
		c.base, errs[1] = time.ParseDuration(f[1])
		c.max, errs[2] = time.ParseDuration(f[2])
		c.jitter, errs[3] = strconv.ParseFloat(f[3], 64)
		c.r, errs[4] = strconv.ParseFloat(f[4], 64)
		c.want, errs[5] = time.ParseDuration(f[5])
		require.NoError(t, errors.Join(errs[:]...), "%s:%d", path, i+1)
		cases = append(cases, c)
	}
	require.NotEmpty(t, cases, path)
	return cases
}

func TestClaimErrorDelay(t *testing.T) {
	t.Parallel()
	p := 10 * time.Millisecond
	require.Equal(t, p, claimErrorDelay(1, p))
	require.Equal(t, 2*p, claimErrorDelay(2, p))
	require.Equal(t, 8*p, claimErrorDelay(4, p))
	require.Equal(t, maxClaimErrorBackoffFactor*p, claimErrorDelay(100, p))
}

func TestPermanent(t *testing.T) {
	t.Parallel()
	require.Nil(t, Permanent(nil))
	base := errors.New("bad input")
	err := Permanent(base)
	require.True(t, IsPermanent(err))
	require.True(t, IsPermanent(fmt.Errorf("wrapped: %w", err)))
	require.ErrorIs(t, err, base)
	require.False(t, IsPermanent(base))
}
