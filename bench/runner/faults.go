package runner

import (
	"context"
	"fmt"
	"time"

	"github.com/berkcansavur/relaybus/bench/validate"
)

// The fault plan's clock and bounds.
const (
	// faultPoll is how often the window checks its fault plan's clock.
	faultPoll = 10 * time.Millisecond
	// crashPoll is how often a cell that crashes the database looks at
	// its dispatchers' counters: a crash follows the claim it waits for
	// by about crashPoll plus crashCountersMs.
	crashPoll = time.Millisecond
	// crashCountersMs is the counters interval of a crash cell's
	// dispatchers (the protocol's default is 1 s).
	crashCountersMs = 5
	// crashAfterClaim bounds a crash's wait for a claim after its point,
	// or after the previous crash when that ended later: a side whose
	// counters show none (a peer that counts no claims) is crashed then
	// anyway, and the run says so. It covers relaybus's longest wait after
	// claim errors in a row at the fault cells' 100 ms poll (16 polls):
	// after a crash, the dispatchers claim again only that late.
	crashAfterClaim = 2 * time.Second
)

// duringWindow waits out the window and applies the cell's fault plan:
// the kill, the restart and the crashes, each at its point of the
// window; a crash at the first claim that a window dispatcher's
// counters show after its point. A window whose last crash has not
// happened by the window's end runs on until it has (at most
// crashAfterClaim past its point).
func (w *windowRun) duringWindow(ctx context.Context, t0 time.Time) error {
	c, window := w.c, w.c.WindowIn(w.step.Window)
	end := t0.Add(window)
	at := func(f float64) time.Time { return t0.Add(time.Duration(f * float64(window))) }
	killAt, restartAt := at(c.KillDispatcherAt), at(c.RestartDBAt)
	killed, restarted := c.KillDispatcherAt == 0, c.RestartDBAt == 0
	crashes := 0 // crashes made
	// armedAt: the next crash's point has passed; claims: the dispatchers'
	// claimed deliveries then.
	var armedAt time.Time
	var claims int64
	dbFaults := false
	poll := faultPoll
	if len(c.CrashDBAt) > 0 {
		poll = crashPoll
	}
	tick := time.NewTicker(poll)
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
			restarted, dbFaults = true, true
			w.step.logf("  fault: restarting the database server")
			start := time.Now().UnixNano()
			if err := w.step.Server.Restart(ctx); err != nil {
				return fmt.Errorf("fault: restart: %w", err)
			}
			w.faults = append(w.faults, validate.Fault{Kind: validate.FaultRestart, StartNs: start, EndNs: time.Now().UnixNano()})
		}
		if crashes < len(c.CrashDBAt) && !now.Before(at(c.CrashDBAt[crashes])) {
			switch n := w.claimed(); {
			case armedAt.IsZero():
				armedAt, claims = now, n
			case n > claims || now.Sub(armedAt) >= crashAfterClaim:
				crashes, dbFaults = crashes+1, true
				if err := w.crash(ctx, crashes, n > claims, now.Sub(armedAt)); err != nil {
					return err
				}
				armedAt = time.Time{}
			}
		}
		if dbFaults {
			// A worker may choose to fail rather than reconnect.
			if err := w.replaceExited(); err != nil {
				return err
			}
		}
		if !now.Before(end) && crashes == len(c.CrashDBAt) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// crash crashes the database server, the n-th crash of the window,
// waited after its point; afterClaim: a claim was seen.
func (w *windowRun) crash(ctx context.Context, n int, afterClaim bool, waited time.Duration) error {
	how := fmt.Sprintf("a claim seen %s after its point", waited.Round(time.Millisecond))
	if !afterClaim {
		how = fmt.Sprintf("no claim seen in %s", crashAfterClaim)
		w.step.warnOnce("%s: a database crash of cell %q saw no claim within %s of its point and was made without one", w.side.Name, w.c.Name, crashAfterClaim)
	}
	w.step.logf("  fault: crashing the database server (%d of %d, %s)", n, len(w.c.CrashDBAt), how)
	// Stamped before the signal and after the server accepts again: the
	// validator explains repeats around that span.
	start := time.Now().UnixNano()
	if err := w.step.Server.Crash(ctx); err != nil {
		return fmt.Errorf("fault: crash: %w", err)
	}
	w.faults = append(w.faults, validate.Fault{Kind: validate.FaultCrash, StartNs: start, EndNs: time.Now().UnixNano()})
	return nil
}

// claimed is the deliveries the window's dispatchers have claimed, by
// their latest counters (replaced and exited ones included: their counts
// no longer move).
func (w *windowRun) claimed() int64 {
	var n int64
	for _, p := range w.disps {
		if k := p.Counters(); k != nil {
			n += k.Claimed
		}
	}
	return n
}

// replaceExited starts a replacement for every window worker that has
// exited since a database fault (a worker may choose to fail rather than
// reconnect), once per worker. A replaced dispatcher's exit is not the
// window's error (measure warns of it).
func (w *windowRun) replaceExited() error {
	for i, p := range w.disps {
		if (i == 0 && w.c.KillDispatcherAt > 0) || w.replaced[p] || !exited(p) {
			continue
		}
		w.restarts++
		np, err := w.startDispatcher(fmt.Sprintf("%s-re%d", p.Name(), w.restarts), w.c.DispatcherFor(w.side.Name), w.c.DispatcherPool)
		if err != nil {
			return err
		}
		w.markReplaced(p)
		w.mark(np, func(r *validate.Process) { r.Replaces = p.Name() })
		w.step.logf("  fault: %s exited after a database fault; %s replaces it", p.Name(), np.Name())
		w.disps = append(w.disps, np)
	}
	for i, p := range w.pubs {
		if !exited(p) {
			continue
		}
		w.restarts++
		np, err := w.startPublisher(i, fmt.Sprintf("pub-%d-re%d", i, w.restarts), fmt.Sprintf("%s-pub%d-re%d-", w.name, i, w.restarts))
		if err != nil {
			return err
		}
		w.mark(np, func(r *validate.Process) { r.Replaces = p.Name() })
		w.step.logf("  fault: %s exited after a database fault; %s replaces it", p.Name(), np.Name())
		w.pubs[i] = np
	}
	return nil
}

func (w *windowRun) markReplaced(p Worker) {
	if w.replaced == nil {
		w.replaced = map[Worker]bool{}
	}
	w.replaced[p] = true
}
