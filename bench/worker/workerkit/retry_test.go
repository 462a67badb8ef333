package workerkit

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berkcansavur/relaybus/bench/protocol"
)

// TestRetryDelayMatchesRelaybus: RetryDelay, the copy the peers retry
// on, gives the schedule of relaybus/testdata/retry_delays.txt, the table
// relaybus's own TestRetryDelay checks the original against. A change of
// relaybus's schedule changes the table, and this test fails until the
// copy follows it.
func TestRetryDelayMatchesRelaybus(t *testing.T) {
	t.Parallel()
	path := filepath.Join("..", "..", "..", "relaybus", "testdata", "retry_delays.txt")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for i, line := range strings.Split(string(data), "\n") {
		line, _, _ = strings.Cut(line, "#")
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) != 6 {
			t.Fatalf("%s:%d: %d columns, want 6", path, i+1, len(f))
		}
		attempt, err0 := strconv.Atoi(f[0])
		base, err1 := time.ParseDuration(f[1])
		maxDelay, err2 := time.ParseDuration(f[2])
		jitter, err3 := strconv.ParseFloat(f[3], 64)
		r, err4 := strconv.ParseFloat(f[4], 64)
		want, err5 := time.ParseDuration(f[5])
		if err := errors.Join(err0, err1, err2, err3, err4, err5); err != nil {
			t.Fatalf("%s:%d: %v", path, i+1, err)
		}
		// Within a millisecond: jitter is float arithmetic.
		if got := RetryDelay(attempt, base, maxDelay, jitter, r); math.Abs(float64(got-want)) > float64(time.Millisecond) {
			t.Errorf("%s:%d: RetryDelay(%d, %v, %v, %v, %v) = %v, want %v", path, i+1, attempt, base, maxDelay, jitter, r, got, want)
		}
		n++
	}
	if n == 0 {
		t.Fatalf("%s: no cases", path)
	}
}

func TestRetrySchedule(t *testing.T) {
	t.Parallel()
	k := &Checks{Pkg: "peer", Limits: RelaybusLimits}
	s, err := k.RetrySchedule(&protocol.Workload{RetryBaseDelayMs: 50, RetryMaxDelayMs: 200})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		attempt int
		r       float64
		want    time.Duration
	}{
		{1, 0.5, 50 * time.Millisecond}, {2, 0.5, 100 * time.Millisecond}, {3, 0.5, 200 * time.Millisecond},
		{9, 0.5, 200 * time.Millisecond}, {100, 0.5, 200 * time.Millisecond}, {0, 0.5, 50 * time.Millisecond},
		{1, 0, 45 * time.Millisecond}, {2, 1, 110 * time.Millisecond}, {3, 1, 200 * time.Millisecond},
	} {
		if got := s.Delay(tc.attempt, tc.r); got != tc.want {
			t.Errorf("Delay(%d, %v) = %v, want %v", tc.attempt, tc.r, got, tc.want)
		}
	}
	for _, tc := range []struct {
		baseMs, maxMs     int
		wantBase, wantMax time.Duration // 0: an error
	}{
		{0, 0, time.Second, time.Hour},
		{50, 0, 50 * time.Millisecond, time.Hour},
		{2000, 0, 2 * time.Second, time.Hour},
		{0, 500, 0, 0}, // below the default base of 1s
		{100, 50, 0, 0},
		{-1, 0, 0, 0},
		{0, 31 * 24 * 3_600_000, 0, 0}, // past relaybus.MaxRetryDelay
	} {
		s, err := k.RetrySchedule(&protocol.Workload{RetryBaseDelayMs: tc.baseMs, RetryMaxDelayMs: tc.maxMs})
		if tc.wantBase == 0 {
			if err == nil || !strings.HasPrefix(err.Error(), "peer: workload retry delays") {
				t.Errorf("RetrySchedule(%d ms, %d ms) = %+v, %v; want an error", tc.baseMs, tc.maxMs, s, err)
			}
			continue
		}
		if err != nil || s.Base != tc.wantBase || s.Max != tc.wantMax {
			t.Errorf("RetrySchedule(%d ms, %d ms) = %+v, %v; want base %v, max %v", tc.baseMs, tc.maxMs, s, err, tc.wantBase, tc.wantMax)
		}
	}
}
