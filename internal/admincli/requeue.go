package admincli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/berkcansavur/relaybus/relaybus"
)

// maxRequeue bounds the dead letters one bulk requeue makes pending: the
// first ones, oldest first; the command says when more are left, and
// running it again requeues them.
const maxRequeue = 100_000

func requeueCommand() *command {
	var filter filterFlags
	var all, yes bool
	cmd := &command{
		usage: fmt.Sprintf(`usage: relaybus requeue [flags] ID...
       relaybus requeue [flags] --all | --handler H [--key K] [--event E]

Makes dead letters pending again, due now, with a fresh attempt budget
(Bus.Requeue): their handlers run them again. Their last error is kept.

With IDs, requeues the deliveries named (as dead list prints them); exit
status 4 when one does not exist or is not dead (the others are requeued).
With --all, or a filter, lists the dead letters it selects, says how many
of each handler, and asks first (--yes: does not ask): a refusal changes
nothing (exit status 3). It requeues at most %d at a time, oldest first,
and says when more are left; one that is no longer dead when its turn
comes (requeued meanwhile) is skipped.`, maxRequeue),
		db:      true,
		minArgs: 0, maxArgs: -1,
		flags: func(fs *flag.FlagSet) {
			filter.bind(fs)
			fs.BoolVar(&all, "all", false, "requeue every dead letter")
			fs.BoolVar(&yes, "yes", false, "do not ask for confirmation")
		},
	}
	cmd.run = func(ctx context.Context, c *call) error {
		switch {
		case len(c.args) > 0 && (all || filter.set()):
			return usagef("relaybus %s: give delivery IDs or a selection (--all, --handler, --key, --event), not both", c.name)
		case len(c.args) == 0 && !all && !filter.set():
			return usagef("relaybus %s: which dead letters? give delivery IDs, --all, or a filter (--handler, --key, --event) (see relaybus requeue --help)", c.name)
		case all && filter.set():
			return usagef("relaybus %s: --all with a filter: give one or the other", c.name)
		}
		for _, id := range c.args {
			if strings.TrimSpace(id) == "" {
				return usagef("relaybus %s: an empty delivery ID", c.name)
			}
		}
		s, err := c.open(ctx)
		if err != nil {
			return err
		}
		defer s.close()
		if len(c.args) > 0 {
			return requeueNamed(ctx, c, s, c.args)
		}
		return requeueSelected(ctx, c, s, &filter, yes)
	}
	return cmd
}

type requeueJSON struct {
	Requeued []string      `json:"requeued"`
	Skipped  []skippedJSON `json:"skipped"`
	// More: the selection had more than one call requeues.
	More bool `json:"more"`
}

type skippedJSON struct {
	ID     string `json:"id"`
	Reason string `json:"reason"`
}

// requeueNamed requeues the deliveries ids; one that does not exist or
// is not dead is reported and makes the exit status 4.
func requeueNamed(ctx context.Context, c *call, s *session, ids []string) error {
	out := requeueJSON{Requeued: []string{}, Skipped: []skippedJSON{}}
	for _, id := range ids {
		reason, err := requeueOne(ctx, c, s, id)
		if err != nil {
			return err
		}
		if reason != "" {
			out.Skipped = append(out.Skipped, skippedJSON{ID: id, Reason: reason})
			continue
		}
		out.Requeued = append(out.Requeued, id)
	}
	if err := writeRequeue(c, &out); err != nil {
		return err
	}
	if len(out.Skipped) > 0 {
		return withCode(ExitNotFound, "relaybus %s: %d of %d not requeued", c.name, len(out.Skipped), len(ids))
	}
	return nil
}

// requeueOne requeues id: reason says why not when it does not exist or
// is not dead; err is any other failure.
func requeueOne(ctx context.Context, c *call, s *session, id string) (reason string, err error) {
	cctx, cancel := s.callCtx(ctx)
	defer cancel()
	err = s.bus.Requeue(cctx, id)
	switch {
	case err == nil:
		return "", nil
	case errors.Is(err, relaybus.ErrNotFound):
		return "not found", nil
	case errors.Is(err, relaybus.ErrNotDead):
		return "not dead", nil
	case errors.Is(err, relaybus.ErrInvalid):
		return "", usagef("relaybus %s: delivery %q: %v", c.name, id, err)
	}
	return "", c.storeError(fmt.Sprintf("requeue %s", id), err)
}

// requeueSelected requeues the dead letters of filter (all when unset),
// once confirmed.
func requeueSelected(ctx context.Context, c *call, s *session, filter *filterFlags, yes bool) error {
	var ids []string
	perHandler := map[string]int{}
	more := false
	err := scanDead(ctx, c, s, filter, func(d *relaybus.Delivery) bool {
		if len(ids) == maxRequeue {
			more = true
			return false
		}
		ids = append(ids, d.ID)
		perHandler[d.Handler]++
		return true
	})
	if err != nil {
		return err
	}
	out := requeueJSON{Requeued: []string{}, Skipped: []skippedJSON{}, More: more}
	if len(ids) == 0 {
		if c.conn.json {
			return writeJSON(c.stdout(), out)
		}
		fmt.Fprintf(c.stdout(), "no dead letters%s: nothing to requeue\n", filterNote(filter))
		return nil
	}
	var counts []string
	for _, h := range slices.Sorted(maps.Keys(perHandler)) {
		counts = append(counts, fmt.Sprintf("%s %d", h, perHandler[h]))
	}
	what := fmt.Sprintf("requeue %d dead %s%s (%s)? Their handlers run them again.", len(ids), plural(len(ids), "letter", "letters"), filterNote(filter), strings.Join(counts, ", "))
	if more {
		what += fmt.Sprintf(" (The first %d: more are left.)", maxRequeue)
	}
	if err := c.confirm(yes, what); err != nil {
		return err
	}
	for _, id := range ids {
		reason, err := requeueOne(ctx, c, s, id)
		if err != nil {
			return err
		}
		if reason != "" {
			out.Skipped = append(out.Skipped, skippedJSON{ID: id, Reason: reason})
			continue
		}
		out.Requeued = append(out.Requeued, id)
	}
	return writeRequeue(c, &out)
}

func writeRequeue(c *call, out *requeueJSON) error {
	if c.conn.json {
		return writeJSON(c.stdout(), out)
	}
	w := c.stdout()
	fmt.Fprintf(w, "requeued %d %s\n", len(out.Requeued), plural(len(out.Requeued), "delivery", "deliveries"))
	for _, sk := range out.Skipped {
		fmt.Fprintf(w, "not requeued: %s: %s\n", cell(sk.ID), sk.Reason)
	}
	if out.More {
		fmt.Fprintf(w, "more dead letters are left: run it again\n")
	}
	return nil
}
