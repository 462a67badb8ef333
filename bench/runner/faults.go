package runner

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/berkcansavur/relaybus/bench/validate"
)

// settleAfterRestart lets the connection errors of a database restart
// reach the workers before the step looks for the ones that exited.
const settleAfterRestart = time.Second

// duringWindow waits out the window, applies the cell's fault plan and
// samples the backlog (deliveries published but not yet completed or
// buried).
func (w *windowRun) duringWindow(ctx context.Context, t0 time.Time) (float64, error) {
	c, window := w.c, w.step.Window
	end := t0.Add(window)
	killAt := t0.Add(time.Duration(c.KillDispatcherAt * float64(window)))
	restartAt := t0.Add(time.Duration(c.RestartDBAt * float64(window)))
	killed, restarted := c.KillDispatcherAt == 0, c.RestartDBAt == 0
	backlogMax := 0.0
	tick := time.NewTicker(backlogSample)
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
				return 0, fmt.Errorf("fault: restart: %w", err)
			}
			w.faults = append(w.faults, validate.Fault{Kind: validate.FaultRestart, StartNs: start, EndNs: time.Now().UnixNano()})
			if err := sleepCtx(ctx, settleAfterRestart); err != nil {
				return 0, err
			}
			if err := w.replaceExited(); err != nil {
				return 0, err
			}
		}
		if b := w.backlog(); b > backlogMax {
			backlogMax = b
		}
		if !now.Before(end) {
			return backlogMax, nil
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
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

// backlog is the deliveries published and not yet completed or buried,
// from the workers' latest counters.
func (w *windowRun) backlog() float64 {
	published := float64(w.c.Preload)
	for _, p := range w.pubs {
		if k := p.Counters(); k != nil {
			published += float64(k.Published)
		}
	}
	done := 0.0
	for _, p := range w.disps {
		if k := p.Counters(); k != nil {
			done += float64(k.Completed + k.Buried)
		}
	}
	return math.Max(0, published*float64(len(w.c.Workload.Handlers))-done)
}
