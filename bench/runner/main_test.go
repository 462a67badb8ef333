package runner

import (
	"testing"

	"github.com/berkcansavur/relaybus/internal/dbenv/dbtest"
)

// The runner's tests run on fakes, but for the held snapshot's
// (snapshot_test.go), which needs a server.
func TestMain(m *testing.M) { dbtest.Main(m) }
