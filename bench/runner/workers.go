package runner

import (
	"context"
	"time"

	"github.com/berkcansavur/relaybus/bench/proc"
	"github.com/berkcansavur/relaybus/bench/protocol"
)

// Worker is one running worker as the measurement step drives it;
// *proc.Proc is one, and the runner's tests use in-process fakes.
type Worker interface {
	Name() string
	// WaitReady waits for the ready line.
	WaitReady(ctx context.Context) (*protocol.Message, error)
	// Wait waits for the exit and returns the done line; see proc.Proc.Wait
	// for which exits are errors.
	Wait(ctx context.Context) (*protocol.Message, error)
	// Stop asks the worker to finish (SIGTERM) and kills it after timeout.
	Stop(timeout time.Duration)
	// Kill kills the worker at once (a planned fault).
	Kill()
	// Exited is closed once the worker has exited.
	Exited() <-chan struct{}
	// Counters returns the latest counters (nil before the first).
	Counters() *protocol.Counters
}

// Launcher starts `bin worker` with cfg; the worker's stderr goes to
// logPath.
type Launcher func(bin string, cfg protocol.Config, logPath string) (Worker, error)

// ProcLauncher starts real worker processes.
func ProcLauncher(bin string, cfg protocol.Config, logPath string) (Worker, error) {
	p, err := proc.Start(bin, cfg, logPath)
	if err != nil {
		return nil, err
	}
	return p, nil
}

func exited(w Worker) bool {
	select {
	case <-w.Exited():
		return true
	default:
		return false
	}
}
