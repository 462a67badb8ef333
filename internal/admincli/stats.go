package admincli

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"text/tabwriter"

	"github.com/berkcansavur/relaybus/relaybus"
)

func statsCommand() *command {
	return &command{
		usage: `usage: relaybus stats [flags]

Deliveries per status (pending, processing, completed, dead), per handler
and in all, and how long the oldest due delivery of each has waited
(Bus.Statistics). Completed counts only what the store keeps: a completed
delivery is deleted unless the store keeps a completion history. The
counts are read from the deliveries, so on a large backlog the command
costs a scan of them.`,
		db:  true,
		run: runStats,
	}
}

type countsJSON struct {
	Pending             int64   `json:"pending"`
	Processing          int64   `json:"processing"`
	Completed           int64   `json:"completed"`
	Dead                int64   `json:"dead"`
	OldestDueAgeSeconds float64 `json:"oldest_due_age_seconds"`
}

type statsJSON struct {
	countsJSON
	Handlers map[string]countsJSON `json:"handlers"`
}

func countsOf(c relaybus.Counts) countsJSON {
	return countsJSON{Pending: c.Pending, Processing: c.Processing, Completed: c.Completed, Dead: c.Dead,
		OldestDueAgeSeconds: c.OldestDueAge.Seconds()}
}

func runStats(ctx context.Context, c *call) error {
	return c.withCall(ctx, func(cctx context.Context, s *session) error {
		st, err := s.bus.Statistics(cctx)
		if err != nil {
			return c.storeError("statistics", err)
		}
		if c.conn.json {
			out := statsJSON{countsJSON: countsOf(st.Counts), Handlers: map[string]countsJSON{}}
			for h, n := range st.Handlers {
				out.Handlers[h] = countsOf(n)
			}
			return writeJSON(c.stdout(), out)
		}
		tw := tabwriter.NewWriter(c.stdout(), 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "handler\tpending\tprocessing\tcompleted\tdead\toldest due")
		row := func(name string, n relaybus.Counts) {
			age := "-"
			if n.OldestDueAge > 0 {
				age = durationText(n.OldestDueAge)
			}
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\n", cell(name), n.Pending, n.Processing, n.Completed, n.Dead, age)
		}
		for _, h := range slices.Sorted(maps.Keys(st.Handlers)) {
			row(h, st.Handlers[h])
		}
		row("(all)", st.Counts)
		if err := tw.Flush(); err != nil {
			return err
		}
		if st.OldestDueAge > 0 {
			fmt.Fprintf(c.stdout(), "the oldest due delivery has waited %s\n", durationText(st.OldestDueAge))
		} else {
			fmt.Fprintln(c.stdout(), "no delivery is waiting")
		}
		return nil
	})
}
