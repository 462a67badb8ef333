package admincli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/berkcansavur/relaybus/relaybus"
)

// Limits of the dead-letter commands.
const (
	// defaultDeadPage is dead list's page when --limit is not given: a
	// screenful.
	defaultDeadPage = 50
	// maxScanPages bounds the pages of relaybus.MaxListLimit dead
	// letters that dead show and a bulk requeue read (a million): the
	// store has no lookup by delivery ID, so show reads the dead letters
	// until it finds it; a filter (--handler, --key, --event) makes that
	// shorter.
	maxScanPages = 1_000
)

// filterFlags select dead letters (each unset selects all).
type filterFlags struct {
	handler, key, event string
}

func (f *filterFlags) bind(fs *flag.FlagSet) {
	fs.StringVar(&f.handler, "handler", "", "only the dead letters of this handler")
	fs.StringVar(&f.key, "key", "", "only the dead letters of events with this ordering key")
	fs.StringVar(&f.event, "event", "", "only the dead letters of the event with this ID")
}

func (f *filterFlags) set() bool { return f.handler != "" || f.key != "" || f.event != "" }

// params are the list params of the filter, dead letters only.
func (f *filterFlags) params(limit int, after string) *relaybus.DeliveryListParams {
	return &relaybus.DeliveryListParams{Status: relaybus.StatusDead, Handler: f.handler, Key: f.key, EventID: f.event, Limit: limit, After: after}
}

// text is the filter as the flags that give it.
func (f *filterFlags) text() string {
	var parts []string
	for _, p := range []struct{ name, v string }{{"handler", f.handler}, {"key", f.key}, {"event", f.event}} {
		if p.v != "" {
			parts = append(parts, fmt.Sprintf("--%s %q", p.name, p.v))
		}
	}
	return strings.Join(parts, " ")
}

func deadListCommand() *command {
	var filter filterFlags
	var limit int
	var after string
	cmd := &command{
		usage: fmt.Sprintf(`usage: relaybus dead list [flags]

The dead letters (deliveries whose attempt budget is spent, or that
failed with a Permanent error), oldest first, a page at a time: each
with its handler, event, key, attempts, when it died and the first line
of its last error (relaybus dead show ID prints it whole). A page holds
--limit (at most %d); the last line says how to get the next one, and
--json gives its cursor as "next".`, relaybus.MaxListLimit),
		db: true,
		flags: func(fs *flag.FlagSet) {
			filter.bind(fs)
			fs.IntVar(&limit, "limit", defaultDeadPage, fmt.Sprintf("dead letters per page, [1, %d]", relaybus.MaxListLimit))
			fs.StringVar(&after, "after", "", "the cursor of the page to list (the previous page's next); empty: the first page")
		},
	}
	cmd.run = func(ctx context.Context, c *call) error {
		if limit < 1 || limit > relaybus.MaxListLimit {
			return usagef("relaybus %s: --limit %d out of range [1, %d]", c.name, limit, relaybus.MaxListLimit)
		}
		s, err := c.open(ctx)
		if err != nil {
			return err
		}
		defer s.close()
		cctx, cancel := s.callCtx(ctx)
		defer cancel()
		page, err := s.bus.ListDeliveries(cctx, filter.params(limit, after))
		if err != nil {
			return c.listError(err)
		}
		return writeDeadList(c, page, &filter, limit)
	}
	return cmd
}

type deadListJSON struct {
	Deliveries []*deliveryJSON `json:"deliveries"`
	Next       string          `json:"next"`
}

func writeDeadList(c *call, page *relaybus.DeliveryListResult, filter *filterFlags, limit int) error {
	if c.conn.json {
		out := deadListJSON{Deliveries: []*deliveryJSON{}, Next: page.Next}
		for _, d := range page.Deliveries {
			out.Deliveries = append(out.Deliveries, toJSON(d, false))
		}
		return writeJSON(c.stdout(), out)
	}
	if len(page.Deliveries) == 0 {
		fmt.Fprintln(c.stdout(), "no dead letters")
		return nil
	}
	tw := tabwriter.NewWriter(c.stdout(), 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "id\thandler\tevent type\tkey\tattempts\tdied\tlast error")
	for _, d := range page.Deliveries {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d/%d\t%s\t%s\n", cell(d.ID), cell(d.Handler), cell(d.EventType), cell(d.Key),
			d.Attempts, d.MaxAttempts, timeText(d.UpdatedAt), cell(oneLine(d.LastError, lastErrorCellBytesMax)))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if page.Next != "" {
		args := []string{"relaybus dead list"}
		if f := filter.text(); f != "" {
			args = append(args, f)
		}
		if limit != defaultDeadPage {
			args = append(args, fmt.Sprintf("--limit %d", limit))
		}
		args = append(args, "--after "+page.Next)
		fmt.Fprintf(c.stdout(), "more: %s\n", strings.Join(args, " "))
	}
	return nil
}

// listError is the error of a failed list: a bad cursor is the user's.
func (c *call) listError(err error) error {
	if isInvalid(err) {
		return usagef("relaybus %s: %v", c.name, err)
	}
	return c.storeError("list dead letters", err)
}

func isInvalid(err error) bool { return err != nil && errors.Is(err, relaybus.ErrInvalid) }

func deadShowCommand() *command {
	var filter filterFlags
	cmd := &command{
		usage: `usage: relaybus dead show [flags] ID

One dead letter in full: its event (ID, type, key, sequence, headers,
payload), its attempts, when it was created and died, and its last error,
whole. ID is a delivery ID as dead list prints it. The store has no
lookup by ID, so this reads the dead letters until it finds the one
named; --handler, --key or --event make that shorter. Exit status 4 when
no dead letter has that ID.`,
		db:      true,
		minArgs: 1, maxArgs: 1,
		flags: filter.bind,
	}
	cmd.run = func(ctx context.Context, c *call) error {
		id := c.args[0]
		s, err := c.open(ctx)
		if err != nil {
			return err
		}
		defer s.close()
		var found *relaybus.Delivery
		err = scanDead(ctx, c, s, &filter, func(d *relaybus.Delivery) bool {
			if d.ID == id {
				found = d
				return false
			}
			return true
		})
		if err != nil {
			return err
		}
		if found == nil {
			return withCode(ExitNotFound, "relaybus %s: no dead letter %q%s (relaybus dead list lists them)", c.name, id, filterNote(&filter))
		}
		return writeDelivery(c, found)
	}
	return cmd
}

func filterNote(f *filterFlags) string {
	if !f.set() {
		return ""
	}
	return " matching " + f.text()
}

// scanDead calls each with the dead letters of filter, in ID order,
// until it returns false or none is left, at most maxScanPages pages.
func scanDead(ctx context.Context, c *call, s *session, filter *filterFlags, each func(*relaybus.Delivery) bool) error {
	after := ""
	for range maxScanPages {
		cctx, cancel := s.callCtx(ctx)
		page, err := s.bus.ListDeliveries(cctx, filter.params(relaybus.MaxListLimit, after))
		cancel()
		if err != nil {
			return c.listError(err)
		}
		for _, d := range page.Deliveries {
			if !each(d) {
				return nil
			}
		}
		if page.Next == "" {
			return nil
		}
		after = page.Next
	}
	return fmt.Errorf("relaybus %s: read %d dead letters without reaching the end; narrow it with --handler, --key or --event", c.name, maxScanPages*relaybus.MaxListLimit)
}

func writeDelivery(c *call, d *relaybus.Delivery) error {
	if c.conn.json {
		return writeJSON(c.stdout(), toJSON(d, true))
	}
	tw := tabwriter.NewWriter(c.stdout(), 0, 0, 2, ' ', 0)
	key := cell(d.Key)
	if d.Key != "" {
		key = fmt.Sprintf("%s (sequence %d)", cell(d.Key), d.Sequence)
	}
	suspect := "no"
	if d.Suspect {
		suspect = "yes (it was in flight when a process died)"
	}
	for _, row := range [][2]string{
		{"delivery", cell(d.ID)},
		{"status", string(d.Status)},
		{"handler", cell(d.Handler)},
		{"event", fmt.Sprintf("%s (%s)", cell(d.EventID), cell(d.EventType))},
		{"key", key},
		{"attempts", fmt.Sprintf("%d of %d", d.Attempts, d.MaxAttempts)},
		{"suspect", suspect},
		{"published", timeText(d.EventCreatedAt)},
		{"created", timeText(d.CreatedAt)},
		{"died", timeText(d.UpdatedAt)},
	} {
		fmt.Fprintf(tw, "%s\t%s\n", row[0], row[1])
	}
	for _, name := range slices.Sorted(maps.Keys(d.Headers)) {
		fmt.Fprintf(tw, "header\t%s=%s\n", cell(name), cell(d.Headers[name]))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(c.stdout(), "payload (%d bytes)\n", len(d.Payload))
	if text := string(d.Payload); len(d.Payload) > 0 && isText(text) {
		fmt.Fprintln(c.stdout(), indent(text))
	} else if len(d.Payload) > 0 {
		fmt.Fprintln(c.stdout(), "  (not text: --json gives it as payload_base64)")
	}
	fmt.Fprintln(c.stdout(), "last error")
	fmt.Fprintln(c.stdout(), indent(d.LastError))
	return nil
}
