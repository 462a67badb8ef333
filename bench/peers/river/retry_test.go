package main

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestRetryDelayMatchesRelaybus: retryDelay, the copy this peer retries
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
		if got := retryDelay(attempt, base, maxDelay, jitter, r); math.Abs(float64(got-want)) > float64(time.Millisecond) {
			t.Errorf("%s:%d: retryDelay(%d, %v, %v, %v, %v) = %v, want %v", path, i+1, attempt, base, maxDelay, jitter, r, got, want)
		}
		n++
	}
	if n == 0 {
		t.Fatalf("%s: no cases", path)
	}
}
