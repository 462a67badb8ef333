package relaybustest

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/berkcansavur/relaybus/relaybus"
)

// WorkOptions tune Work. A nil *WorkOptions takes every default.
type WorkOptions struct {
	// Handlers limits the run to these of the bus's handlers; empty:
	// every handler the bus runs.
	Handlers []string
	// Limit bounds the deliveries run: 0 means relaybus.DefaultWorkLimit,
	// and reaching that fails the test (a handler that keeps publishing
	// work for itself); a Limit set here stops the run without failing
	// it.
	Limit int
	// AllowFailures keeps a failed attempt (rescheduled, buried, or any
	// other outcome than completed) from failing the test: the test
	// checks the result itself.
	AllowFailures bool
}

// Work runs bus's handlers over every due delivery, synchronously, with
// relaybus.Bus.Work, and returns what ran. It fails t when Work returns
// an error, when a delivery did not complete (unless
// opts.AllowFailures), or when the default limit stopped it, listing
// every delivery it ran and how it ended.
func Work[TTx any](ctx context.Context, t testing.TB, bus *relaybus.Bus[TTx], opts *WorkOptions) *relaybus.WorkResult {
	t.Helper()
	var o WorkOptions
	if opts != nil {
		o = *opts
	}
	res, err := bus.Work(ctx, &relaybus.WorkParams{Handlers: o.Handlers, Limit: o.Limit})
	if err != nil {
		t.Fatalf("relaybustest: Work: %v\n%s", err, describeWorked(res))
		return res
	}
	failed := 0
	for _, w := range res.Worked {
		if w.Outcome != relaybus.FinishCompleted {
			failed++
		}
	}
	switch {
	case failed > 0 && !o.AllowFailures:
		t.Fatalf("relaybustest: Work: %d of %d %s did not complete (WorkOptions.AllowFailures accepts that):\n%s",
			failed, len(res.Worked), plural(len(res.Worked), "delivery", "deliveries"), describeWorked(res))
	case res.LimitReached && o.Limit == 0:
		t.Fatalf("relaybustest: Work: stopped after relaybus.DefaultWorkLimit (%d) deliveries, and more may be due: does a handler publish work for itself? (WorkOptions.Limit stops earlier without failing)\n%s",
			relaybus.DefaultWorkLimit, describeWorked(res))
	}
	return res
}

// workedListMax bounds the deliveries a failure lists: the first ones,
// then the failures among the rest.
const workedListMax = 50

// describeWorked lists what a Work call ran, one line per delivery.
func describeWorked(res *relaybus.WorkResult) string {
	if res == nil || len(res.Worked) == 0 {
		return "nothing ran"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d ran:\n", len(res.Worked))
	left := 0
	for i, w := range res.Worked {
		if i >= workedListMax && w.Outcome == relaybus.FinishCompleted {
			left++
			continue
		}
		d := w.Delivery
		fmt.Fprintf(&b, "  [%d] handler %q, event %s key %s id %q, attempt %d: %s", i, d.Handler, d.EventType, keyText(d.Key), d.EventID, d.Attempts, w.Outcome)
		if w.HandlerErr != nil {
			fmt.Fprintf(&b, ": %v", w.HandlerErr)
		}
		if w.WriteErr != nil {
			fmt.Fprintf(&b, " (write: %v)", w.WriteErr)
		}
		b.WriteByte('\n')
	}
	if left > 0 {
		fmt.Fprintf(&b, "  and %d more that completed\n", left)
	}
	return strings.TrimRight(b.String(), "\n")
}
