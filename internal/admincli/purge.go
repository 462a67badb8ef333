package admincli

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/berkcansavur/relaybus/relaybus"
)

func purgeCommand() *command {
	var dead, completed string
	var yes bool
	cmd := &command{
		usage: `usage: relaybus purge [flags] --dead DUR | --completed DUR

Deletes what is past its retention (Bus.PurgeExpired): dead letters last
updated more than --dead ago, completed deliveries (the completion
history, where the store keeps one) completed more than --completed ago,
and then the events older than --completed that have no delivery left.
DUR is whole days (30d) or a Go duration (720h, 90m); 0 or unset keeps
that kind. Events follow --completed only: an event is what keeps a
republished event ID from running its handlers again, so without
--completed no event is deleted.

It says what it will delete and asks first (--yes: does not ask): a
refusal deletes nothing (exit status 3). Nothing deleted can be brought
back.`,
		db: true,
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&dead, "dead", "", "delete dead letters older than this (30d, 720h); unset: keep them")
			fs.StringVar(&completed, "completed", "", "delete completed deliveries, and then events without deliveries, older than this; unset: keep them")
			fs.BoolVar(&yes, "yes", false, "do not ask for confirmation")
		},
	}
	cmd.run = func(ctx context.Context, c *call) error {
		var r relaybus.Retention
		var err error
		if r.Dead, err = parseRetention("dead", dead); err != nil {
			return usagef("relaybus %s: %v", c.name, err)
		}
		if r.Completed, err = parseRetention("completed", completed); err != nil {
			return usagef("relaybus %s: %v", c.name, err)
		}
		if r.Dead == 0 && r.Completed == 0 {
			return usagef("relaybus %s: nothing to purge: give --dead, --completed or both (see relaybus purge --help)", c.name)
		}
		s, err := c.open(ctx)
		if err != nil {
			return err
		}
		defer s.close()
		if err := c.confirm(yes, purgeQuestion(r, s.now)); err != nil {
			return err
		}
		cctx, cancel := s.callCtx(ctx)
		defer cancel()
		res, err := s.bus.PurgeExpired(cctx, r)
		if err != nil {
			return c.storeError("purge", err)
		}
		return writePurge(c, res, r, s.now)
	}
	return cmd
}

// purgeQuestion says what a purge with r at now deletes.
func purgeQuestion(r relaybus.Retention, now time.Time) string {
	var parts []string
	if r.Dead > 0 {
		parts = append(parts, fmt.Sprintf("dead letters last updated before %s (older than %s)", timeText(now.Add(-r.Dead)), retentionText(r.Dead)))
	}
	if r.Completed > 0 {
		parts = append(parts, fmt.Sprintf("completed deliveries completed before %s (older than %s), and then the events published before it that have no delivery left", timeText(now.Add(-r.Completed)), retentionText(r.Completed)))
	}
	return "delete " + strings.Join(parts, "; and ") + "? This cannot be undone."
}

type purgeJSON struct {
	Deliveries      int64      `json:"deliveries"`
	Events          int64      `json:"events"`
	DeadBefore      *time.Time `json:"dead_before,omitempty"`
	CompletedBefore *time.Time `json:"completed_before,omitempty"`
}

func writePurge(c *call, res *relaybus.PurgeResult, r relaybus.Retention, now time.Time) error {
	if c.conn.json {
		out := purgeJSON{Deliveries: res.Deliveries, Events: res.Events}
		if r.Dead > 0 {
			t := now.Add(-r.Dead).UTC()
			out.DeadBefore = &t
		}
		if r.Completed > 0 {
			t := now.Add(-r.Completed).UTC()
			out.CompletedBefore = &t
		}
		return writeJSON(c.stdout(), out)
	}
	fmt.Fprintf(c.stdout(), "purged %d %s and %d %s\n", res.Deliveries, plural(int(res.Deliveries), "delivery", "deliveries"), res.Events, plural(int(res.Events), "event", "events"))
	return nil
}
