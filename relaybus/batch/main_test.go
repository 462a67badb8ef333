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
	// runs); 5,000 takes about a second. An explicit -rapid.checks wins.
	if f := flag.Lookup("rapid.checks"); f != nil && f.Value.String() == f.DefValue {
		_ = flag.Set("rapid.checks", "5000")
	}
	goleak.VerifyTestMain(m)
	os.Exit(0) // not reached: VerifyTestMain exits
}
