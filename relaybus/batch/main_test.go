package batch

import (
	"flag"
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	flag.Parse()
	// rapid's default of 100 runs finds the rarer lane interleavings only
	// sometimes (a stale timer entry reordering the ready line took ~7,000
	// runs; TestLanesStaleTimerKeepsOrder pins that one); 5,000 take about a
	// second, 1,000 under the race detector. An explicit -rapid.checks wins.
	if f := flag.Lookup("rapid.checks"); f != nil && f.Value.String() == f.DefValue {
		checks := "5000"
		if raceEnabled {
			checks = "1000"
		}
		_ = flag.Set("rapid.checks", checks)
	}
	goleak.VerifyTestMain(m)
	os.Exit(0) // not reached: VerifyTestMain exits
}
