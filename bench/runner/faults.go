package runner

import (
	"context"
	"fmt"
	"time"

	"github.com/berkcansavur/relaybus/bench/validate"
)

// settleAfterRestart lets the connection errors of a database restart
// reach the workers before the step looks for the ones that exited.
const settleAfterRestart = time.Second

// faultPoll is how often the window checks its fault plan's clock.
const faultPoll = 10 * time.Millisecond

// duringWindow waits out the window and applies the cell's fault plan.
func (w *windowRun) duringWindow(ctx context.Context, t0 time.Time) error {
	c, window := w.c, w.step.Window
	end := t0.Add(window)
	killAt := t0.Add(time.Duration(c.KillDispatcherAt * float64(window)))
	restartAt := t0.Add(time.Duration(c.RestartDBAt * float64(window)))
	killed, restarted := c.KillDispatcherAt == 0, c.RestartDBAt == 0
	tick := time.NewTicker(faultPoll)
	defer tick.Stop()
	for {
		now := time.Now()
		if !killed && now.After(killAt) {
			killed = true
			victim := w.disps[0]
			w.step.logf("  fault: SIGKILL %s", victim.Name())
			victim.Kill()
			// Stamped after kill(2) returned: the process runs no more
			// code after that, so a handle it started later would be
			// impossible (the validator flags one).
			at := time.Now().UnixNano()
			w.faults = append(w.faults, validate.Fault{Kind: validate.FaultKill, Process: victim.Name(), StartNs: at, EndNs: at})
		}
		if !restarted && now.After(restartAt) {
			restarted = true
			w.step.logf("  fault: restarting the database server")
			start := time.Now().UnixNano()
			if err := w.step.Server.Restart(ctx); err != nil {
				return fmt.Errorf("fault: restart: %w", err)
			}
			w.faults = append(w.faults, validate.Fault{Kind: validate.FaultRestart, StartNs: start, EndNs: time.Now().UnixNano()})
			if err := sleepCtx(ctx, settleAfterRestart); err != nil {
				return err
			}
			if err := w.replaceExited(); err != nil {
				return err
			}
		}
		if !now.Before(end) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// replaceExited restarts workers that a database restart made exit (a
// worker may choose to fail rather than reconnect).
func (w *windowRun) replaceExited() error {
	for i, p := range w.disps {
		if i == 0 && w.c.KillDispatcherAt > 0 {
			continue
		}
		if exited(p) {
			w.restarts++
			np, err := w.startDispatcher(fmt.Sprintf("%s-re%d", p.Name(), w.restarts), w.c.Dispatcher, w.c.DispatcherPool)
			if err != nil {
				return err
			}
			w.disps = append(w.disps, np)
		}
	}
	for i, p := range w.pubs {
		if exited(p) {
			w.restarts++
			np, err := w.startPublisher(i, fmt.Sprintf("pub-%d-re%d", i, w.restarts), fmt.Sprintf("%s-pub%d-re%d-", w.name, i, w.restarts))
			if err != nil {
				return err
			}
			w.pubs[i] = np
		}
	}
	return nil
}
