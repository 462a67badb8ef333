package admincli

import (
	"context"
	"flag"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/berkcansavur/relaybus/relaybus"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

func healthCommand() *command {
	var f healthFlags
	return &command{
		usage: `usage: relaybus health [flags]

The store's report on its own upkeep (Bus.StoreHealth) judged against
thresholds (relaybus.CheckStoreHealth): the deliveries table's live and
dead rows and when it was last vacuumed, the share of lane updates that
were HOT, and the session or prepared transaction that holds the xmin
horizon back. Each check past its threshold is a warning, and the
command then exits 5, so that a cron job or a monitoring probe can run
it as it is. What each warning means and what to do about it:
docs/operations.md.

The row and update counts are PostgreSQL's cumulative statistics, so the
HOT share is over everything since the statistics were last reset (a
watching Bus, WatchStoreHealth, judges it per interval instead). A
threshold of "off" turns its check off.`,
		db:    true,
		flags: f.bind,
		run:   func(ctx context.Context, c *call) error { return runHealth(ctx, c, &f) },
	}
}

// healthFlags are the thresholds of relaybus health, each defaulting to
// the library's.
type healthFlags struct {
	deadRowsMin      int64
	deadRowsShareMax float64
	vacuumAgeMax     time.Duration
	laneHOTShareMin  float64
	laneUpdatesMin   int64
	xminAgeMax       time.Duration
}

func (f *healthFlags) bind(fs *flag.FlagSet) {
	*f = healthFlags{
		deadRowsMin: relaybus.DefaultHealthDeadRowsMin, deadRowsShareMax: relaybus.DefaultHealthDeadRowsShareMax,
		vacuumAgeMax: relaybus.DefaultHealthVacuumAgeMax, laneHOTShareMin: relaybus.DefaultHealthLaneHOTShareMin,
		laneUpdatesMin: relaybus.DefaultHealthLaneUpdatesMin, xminAgeMax: relaybus.DefaultHealthXminAgeMax,
	}
	fs.Var(threshold[int64]{&f.deadRowsMin}, "dead-rows-min", "the dead-row and vacuum checks need at least this `many` dead rows in the deliveries table, or off")
	fs.Var(threshold[float64]{&f.deadRowsShareMax}, "dead-rows-share-max", "warn when dead rows are at least this `share` of the deliveries table's rows, in (0, 1], or off")
	fs.Var(threshold[time.Duration]{&f.vacuumAgeMax}, "vacuum-age-max", "warn when the deliveries table, with many dead rows, was not vacuumed for this `long`, or off")
	fs.Var(threshold[float64]{&f.laneHOTShareMin}, "lane-hot-share-min", "warn when fewer of the lane updates than this `share` were HOT, in (0, 1], or off")
	fs.Var(threshold[int64]{&f.laneUpdatesMin}, "lane-updates-min", "the HOT check needs at least this `many` lane updates, or off")
	fs.Var(threshold[time.Duration]{&f.xminAgeMax}, "xmin-age-max", "warn when a transaction has held the xmin horizon back for this `long`, or off")
}

// threshold is a flag of one of the library's thresholds: a value, or
// "off" (relaybus.Disabled). 0, which the library would read as "the
// default", is refused: the flag's default is the library's already.
type threshold[T int64 | float64 | time.Duration] struct{ v *T }

func (t threshold[T]) String() string {
	if t.v == nil {
		return ""
	}
	if *t.v == relaybus.Disabled {
		return "off"
	}
	if d, ok := any(*t.v).(time.Duration); ok {
		return d.String()
	}
	return fmt.Sprint(*t.v)
}

func (t threshold[T]) Set(s string) error {
	if s == "off" {
		*t.v = relaybus.Disabled
		return nil
	}
	var v T
	switch p := any(&v).(type) {
	case *time.Duration:
		d, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("%q: not a duration (5m, 1h) or off", s)
		}
		*p = d
	case *int64:
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return fmt.Errorf("%q: not a whole number or off", s)
		}
		*p = n
	case *float64:
		x, err := strconv.ParseFloat(s, 64)
		if err != nil || math.IsNaN(x) {
			return fmt.Errorf("%q: not a number or off", s)
		}
		if x > 1 {
			return fmt.Errorf("%q: a share is in (0, 1], or off", s)
		}
		*p = x
	}
	if v <= 0 {
		return fmt.Errorf("%q: must be above 0 (or off)", s)
	}
	*t.v = v
	return nil
}

// thresholds are f as the library's thresholds.
func (f *healthFlags) thresholds() *relaybus.HealthThresholds {
	return &relaybus.HealthThresholds{
		DeadRowsMin: f.deadRowsMin, DeadRowsShareMax: f.deadRowsShareMax, VacuumAgeMax: f.vacuumAgeMax,
		LaneHOTShareMin: f.laneHOTShareMin, LaneUpdatesMin: f.laneUpdatesMin, XminAgeMax: f.xminAgeMax,
	}
}

type xminHolderJSON struct {
	Kind        string  `json:"kind"`
	PID         int     `json:"pid,omitempty"`
	Name        string  `json:"name"`
	User        string  `json:"user"`
	State       string  `json:"state,omitempty"`
	BackendType string  `json:"backend_type,omitempty"`
	XactStart   *string `json:"xact_start"`
	QueryStart  *string `json:"query_start"`
	AgeSeconds  float64 `json:"age_seconds"`
	XminAge     int64   `json:"xmin_age"`
}

type warningJSON struct {
	Check   string `json:"check"`
	Message string `json:"message"`
}

type healthJSON struct {
	At                       string          `json:"at"`
	DeliveriesLiveRows       int64           `json:"deliveries_live_rows"`
	DeliveriesDeadRows       int64           `json:"deliveries_dead_rows"`
	DeliveriesLastAutovacuum *string         `json:"deliveries_last_autovacuum"`
	DeliveriesLastVacuum     *string         `json:"deliveries_last_vacuum"`
	LaneUpdates              int64           `json:"lane_updates"`
	LaneHOTUpdates           int64           `json:"lane_hot_updates"`
	XminHolder               *xminHolderJSON `json:"xmin_holder"`
	Healthy                  bool            `json:"healthy"`
	Warnings                 []warningJSON   `json:"warnings"`
}

// jsonTime is t in RFC 3339, or nil (null) when zero.
func jsonTime(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	s := t.UTC().Format(time.RFC3339Nano)
	return &s
}

func runHealth(ctx context.Context, c *call, f *healthFlags) error {
	th := f.thresholds()
	if _, err := relaybus.CheckStoreHealth(&relaybus.StoreHealth{}, nil, th); err != nil {
		// Out of the library's ranges: said before connecting.
		return usagef("relaybus health: %v", err)
	}
	return c.withCall(ctx, func(cctx context.Context, s *session) error {
		h, err := s.bus.StoreHealth(cctx)
		if err != nil {
			return c.storeError("store health", err)
		}
		r, err := relaybus.CheckStoreHealth(h, nil, th)
		if err != nil {
			return err // not reached: th was checked above
		}
		if c.conn.json {
			if err := writeJSON(c.stdout(), healthJSONOf(r)); err != nil {
				return err
			}
		} else if err := writeHealth(c, r); err != nil {
			return err
		}
		if len(r.Warnings) > 0 {
			return withCode(ExitUnhealthy, "relaybus health: %d %s", len(r.Warnings), plural(len(r.Warnings), "warning", "warnings"))
		}
		return nil
	})
}

func healthJSONOf(r *relaybus.HealthReport) *healthJSON {
	h := r.Health
	out := &healthJSON{
		At:                 h.At.UTC().Format(time.RFC3339Nano),
		DeliveriesLiveRows: h.DeliveriesLiveRows, DeliveriesDeadRows: h.DeliveriesDeadRows,
		DeliveriesLastAutovacuum: jsonTime(h.DeliveriesLastAutovacuum), DeliveriesLastVacuum: jsonTime(h.DeliveriesLastVacuum),
		LaneUpdates: h.LaneUpdates, LaneHOTUpdates: h.LaneHOTUpdates,
		Healthy: len(r.Warnings) == 0, Warnings: []warningJSON{},
	}
	if x := h.XminHolder; x != nil {
		out.XminHolder = &xminHolderJSON{Kind: x.Kind, PID: x.PID, Name: x.Name, User: x.User, State: x.State, BackendType: x.BackendType,
			XactStart: jsonTime(x.XactStart), QueryStart: jsonTime(x.QueryStart), AgeSeconds: x.Age.Seconds(), XminAge: x.XminAge}
	}
	for _, w := range r.Warnings {
		out.Warnings = append(out.Warnings, warningJSON{Check: w.Check, Message: w.Message})
	}
	return out
}

func writeHealth(c *call, r *relaybus.HealthReport) error {
	h, w := r.Health, c.stdout()
	rows := h.DeliveriesLiveRows + h.DeliveriesDeadRows
	share := ""
	if rows > 0 {
		share = fmt.Sprintf(" (%.1f%% of its rows)", 100*float64(h.DeliveriesDeadRows)/float64(rows))
	}
	fmt.Fprintf(w, "deliveries table: %d live rows, %d dead%s\n", h.DeliveriesLiveRows, h.DeliveriesDeadRows, share)
	fmt.Fprintf(w, "  last autovacuum: %s\n", agoText(h.At, h.DeliveriesLastAutovacuum))
	fmt.Fprintf(w, "  last vacuum:     %s\n", agoText(h.At, h.DeliveriesLastVacuum))
	if hot, ok := h.LaneHOTShare(); ok {
		fmt.Fprintf(w, "lane updates: %d, %.1f%% HOT (since the statistics were reset)\n", h.LaneUpdates, 100*hot)
	} else {
		fmt.Fprintln(w, "lane updates: none since the statistics were reset")
	}
	if x := h.XminHolder; x != nil {
		who := fmt.Sprintf("%s pid %d (%s, application %q, user %q, %s)", x.Kind, x.PID, x.BackendType, cell(x.Name), cell(x.User), x.State)
		if x.Kind == relaytype.XminHolderPrepared {
			who = fmt.Sprintf("prepared transaction %q (user %q)", cell(x.Name), cell(x.User))
		}
		held := ""
		if !x.XactStart.IsZero() {
			held = fmt.Sprintf(", its transaction started %s", agoText(h.At, x.XactStart))
		}
		fmt.Fprintf(w, "xmin horizon: held furthest back by %s%s, %d transaction IDs behind\n", who, held, x.XminAge)
	} else {
		fmt.Fprintln(w, "xmin horizon: no other session holds a snapshot or a transaction ID")
	}
	if len(r.Warnings) == 0 {
		fmt.Fprintln(w, "healthy: no check past its threshold")
		return nil
	}
	fmt.Fprintf(w, "%d %s:\n", len(r.Warnings), plural(len(r.Warnings), "warning", "warnings"))
	for _, wn := range r.Warnings {
		fmt.Fprintf(w, "  %s: %s\n", wn.Check, wn.Message)
	}
	return nil
}

// agoText is t and how long before at it was, or "never" when zero.
func agoText(at, t time.Time) string {
	if t.IsZero() {
		return "never (since the statistics were reset)"
	}
	return fmt.Sprintf("%s (%s ago)", timeText(t), durationText(at.Sub(t)))
}
