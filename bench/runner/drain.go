package runner

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/berkcansavur/relaybus/bench/protocol"
)

// drain waits until the store has nothing pending or processing, asking
// it through role inspect; it returns the last inspection.
func (w *windowRun) drain(ctx context.Context) (*protocol.Inspect, error) {
	timeout := orDefault(w.step.DrainTimeout, DefaultDrainTimeout)
	deadline := time.Now().Add(timeout)
	for n := 1; ; n++ {
		done, err := w.runOnce(ctx, w.config(protocol.RoleInspect, fmt.Sprintf("inspect-%d", n), 2))
		if err != nil {
			return nil, fmt.Errorf("drain: %w", err)
		}
		if done == nil || done.Inspect == nil {
			return nil, errors.New("drain: the inspect role reported no state")
		}
		in := done.Inspect
		if in.Pending == 0 && in.Processing == 0 {
			return in, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("drain: not drained after %s (pending %d, processing %d): INVALID", timeout, in.Pending, in.Processing)
		}
		if err := sleepCtx(ctx, drainPoll); err != nil {
			return nil, err
		}
	}
}
