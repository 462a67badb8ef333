package admincli

import (
	"context"
	"flag"
	"fmt"
	"text/tabwriter"
	"time"
)

func pauseCommand() *command {
	var reason string
	return &command{
		usage: `usage: relaybus pause [flags] HANDLER

Pause a handler for every process (Bus.PauseHandler): from their next
reading of the paused handlers, within about a poll interval, no
dispatcher claims its deliveries; they stay pending, their attempts
unspent, until relaybus resume. What a dispatcher is running then
finishes. The other handlers go on. Only dispatchers of relaybus 0.3.0
or later know pauses. Pausing a paused handler changes nothing (the
first pause's reason and time stay).`,
		db: true,
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&reason, "reason", "", "what the pause is for (a ticket, a name), recorded with it")
		},
		minArgs: 1, maxArgs: 1,
		run: func(ctx context.Context, c *call) error { return runPause(ctx, c, reason) },
	}
}

func resumeCommand() *command {
	return &command{
		usage: `usage: relaybus resume [flags] HANDLER

Resume a paused handler (Bus.ResumeHandler): the dispatchers claim its
deliveries again from their next reading, within about a poll interval.
A handler that is not paused: exit 4, nothing changed.`,
		db:      true,
		minArgs: 1, maxArgs: 1,
		run: runResume,
	}
}

func pausedCommand() *command {
	return &command{
		usage: `usage: relaybus paused [flags]

The paused handlers, with their reason and when they were paused
(Bus.PausedHandlers).`,
		db:  true,
		run: runPaused,
	}
}

type pausedJSON struct {
	Handler  string `json:"handler"`
	Reason   string `json:"reason"`
	PausedAt string `json:"paused_at"`
}

func runPause(ctx context.Context, c *call, reason string) error {
	return c.withCall(ctx, func(cctx context.Context, s *session) error {
		handler := c.args[0]
		if err := s.bus.PauseHandler(cctx, handler, reason); err != nil {
			if isInvalid(err) {
				return usagef("relaybus pause: %v", err)
			}
			return c.storeError("pause", err)
		}
		if c.conn.json {
			return writeJSON(c.stdout(), map[string]any{"paused": handler})
		}
		fmt.Fprintf(c.stdout(), "paused %s: no dispatcher claims its deliveries from its next reading (within about a poll interval)\n", cell(handler))
		return nil
	})
}

func runResume(ctx context.Context, c *call) error {
	return c.withCall(ctx, func(cctx context.Context, s *session) error {
		handler := c.args[0]
		ok, err := s.bus.ResumeHandler(cctx, handler)
		if err != nil {
			if isInvalid(err) {
				return usagef("relaybus resume: %v", err)
			}
			return c.storeError("resume", err)
		}
		if !ok {
			return withCode(ExitNotFound, "relaybus resume: handler %q is not paused", handler)
		}
		if c.conn.json {
			return writeJSON(c.stdout(), map[string]any{"resumed": handler})
		}
		fmt.Fprintf(c.stdout(), "resumed %s: the dispatchers claim its deliveries again from their next reading\n", cell(handler))
		return nil
	})
}

func runPaused(ctx context.Context, c *call) error {
	return c.withCall(ctx, func(cctx context.Context, s *session) error {
		ps, err := s.bus.PausedHandlers(cctx)
		if err != nil {
			return c.storeError("paused handlers", err)
		}
		if c.conn.json {
			out := make([]pausedJSON, len(ps))
			for i, p := range ps {
				out[i] = pausedJSON{Handler: p.Handler, Reason: p.Reason, PausedAt: p.PausedAt.UTC().Format(time.RFC3339Nano)}
			}
			return writeJSON(c.stdout(), out)
		}
		if len(ps) == 0 {
			fmt.Fprintln(c.stdout(), "no handler is paused")
			return nil
		}
		tw := tabwriter.NewWriter(c.stdout(), 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "handler\tpaused at\treason")
		for _, p := range ps {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", cell(p.Handler), timeText(p.PausedAt), cellOrDash(p.Reason))
		}
		return tw.Flush()
	})
}

// cellOrDash is cell(s), or "-" for an empty s.
func cellOrDash(s string) string {
	if s == "" {
		return "-"
	}
	return cell(s)
}
