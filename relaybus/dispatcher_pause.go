package relaybus

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/berkcansavur/relaybus/relaybus/driver"
)

// Paused handlers (Bus.PauseHandler): the dispatcher reads the store's
// paused handlers before a claim when its last reading is a PollInterval
// old or more, and claims with the others' names only. A pause is
// therefore seen by every dispatcher within about one PollInterval, a
// resume too, and costs one cheap statement per PollInterval per
// dispatcher.

// pauses is what the dispatcher knows of the paused handlers; only the
// claim loop (or Work's loop) uses it.
type pauses struct {
	readAt time.Time       // of the last reading that succeeded, on the real clock; zero before the first
	paused map[string]bool // of the dispatcher's handlers, as last read
	// claim is d.claim with the paused handlers' names left out,
	// validated and marked when the set changed; none: every handler of
	// the dispatcher is paused.
	claim driver.DeliveryClaimParams
	none  bool
	// failures counts the readings that failed since the last that did
	// not, for the log.
	failures int
}

// claimParams returns the claim's params without the paused handlers,
// reading the paused handlers first when due, and false when every
// handler of the dispatcher is paused. It fails only when the paused
// handlers were never read: not knowing which are paused, it claims
// nothing. A later reading that fails keeps the last one and is logged.
func (d *dispatcher[TTx]) claimParams(ctx context.Context) (driver.DeliveryClaimParams, bool, error) {
	pz := &d.pauses
	if pz.readAt.IsZero() || time.Since(pz.readAt) >= d.cfg.PollInterval {
		if err := d.readPauses(ctx); err != nil {
			if pz.readAt.IsZero() {
				return driver.DeliveryClaimParams{}, false, err
			}
			if ctx.Err() != nil {
				return pz.claim, !pz.none, nil // the shutdown began: its claim is the last
			}
			pz.failures++
			d.log.Warn("relaybus: reading the paused handlers failed; going on with the last reading",
				"owner", d.cfg.Owner, "error", err, "errors_in_a_row", pz.failures, "last_read", pz.readAt)
		}
	}
	if len(pz.paused) == 0 {
		return d.claim, true, nil
	}
	return pz.claim, !pz.none, nil
}

// readPauses reads the paused handlers and, when the dispatcher's share
// of them changed, says so and builds the claim's params.
func (d *dispatcher[TTx]) readPauses(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, d.cfg.LeaseDuration)
	defer cancel()
	ps, err := d.store.HandlersPaused(cctx, &driver.HandlersPausedParams{})
	if err != nil {
		return fmt.Errorf("relaybus: reading the paused handlers: %w", err)
	}
	pz := &d.pauses
	pz.readAt, pz.failures = time.Now(), 0
	now := map[string]bool{}
	for _, p := range ps {
		if _, ours := d.handlers[p.Handler]; ours {
			now[p.Handler] = true
			if !pz.paused[p.Handler] {
				d.log.Info("relaybus: handler paused: its deliveries are not claimed until it is resumed",
					"owner", d.cfg.Owner, "handler", p.Handler, "reason", p.Reason, "paused_at", p.PausedAt)
			}
		}
	}
	changed := len(now) != len(pz.paused)
	for h := range pz.paused {
		if !now[h] {
			changed = true
			d.log.Info("relaybus: handler resumed", "owner", d.cfg.Owner, "handler", h)
		}
	}
	if !changed && pz.paused != nil {
		return nil
	}
	pz.paused = now
	names := slices.DeleteFunc(slices.Clone(d.claim.Handlers), func(h string) bool { return now[h] })
	pz.claim, pz.none = d.claim, len(names) == 0
	if len(now) > 0 && !pz.none {
		pz.claim.Handlers = names
		// A paused batch handler's key runs go with it: a claim asks
		// for runs of its own handlers only.
		pz.claim.KeyRuns = slices.DeleteFunc(slices.Clone(d.claim.KeyRuns), func(r driver.KeyRun) bool { return now[r.Handler] })
		if err := validateClaimNames(&pz.claim); err != nil {
			return err // not reached: a subset of names validated at start
		}
	}
	return nil
}
