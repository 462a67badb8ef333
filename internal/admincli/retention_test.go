package admincli

import (
	"testing"
	"time"
)

// retentionCases are the table of parseRetention, and the fuzz target's
// seeds.
var retentionCases = []struct {
	in   string
	want time.Duration
	ok   bool
}{
	{"", 0, true},
	{"0", 0, true},
	{"30d", 30 * 24 * time.Hour, true},
	{"0d", 0, true},
	{"36500d", 36500 * 24 * time.Hour, true},
	{"720h", 720 * time.Hour, true},
	{"90m", 90 * time.Minute, true},
	{"1h30m", 90 * time.Minute, true},
	{"36501d", 0, false},
	{"1.5d", 0, false},
	{"-1d", 0, false},
	{"d", 0, false},
	{"-1h", 0, false},
	{"thirty days", 0, false},
	{"30", 0, false},
	{"9223372036854775807d", 0, false},
}

func TestParseRetention(t *testing.T) {
	t.Parallel()
	for _, tc := range retentionCases {
		got, err := parseRetention("dead", tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("parseRetention(%q) = %v, %v; want %v, ok %v", tc.in, got, err, tc.want, tc.ok)
		}
		if err != nil && ExitCode(err) != ExitUsage {
			t.Errorf("parseRetention(%q): exit status %d, want %d (usage)", tc.in, ExitCode(err), ExitUsage)
		}
	}
}

// FuzzParseRetention: whatever it is given, parseRetention does not
// panic, and what it accepts is a retention of zero or more, never past
// the days bound.
func FuzzParseRetention(f *testing.F) {
	for _, tc := range retentionCases {
		f.Add(tc.in)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := parseRetention("dead", s)
		if err != nil {
			if d != 0 {
				t.Errorf("parseRetention(%q) = %v with an error", s, d)
			}
			return
		}
		if d < 0 {
			t.Errorf("parseRetention(%q) = %v: negative", s, d)
		}
	})
}
