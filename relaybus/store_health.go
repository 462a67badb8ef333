package relaybus

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

// StoreHealth is a store's report on its own upkeep (Bus.StoreHealth):
// dead rows and vacuums of the deliveries table, HOT updates of the
// lanes, and what holds the xmin horizon back. It names
// relaytype.StoreHealth.
type StoreHealth = relaytype.StoreHealth

// XminHolder describes what holds the xmin horizon back
// (relaytype.XminHolder).
type XminHolder = relaytype.XminHolder

// StoreHealth reads the store's health report, for a store with the
// driver.HealthReporter capability (relaybus/postgres); for any other it
// returns an error wrapping errors.ErrUnsupported. CheckStoreHealth
// judges a report, WatchStoreHealth reads and judges one periodically.
func (b *Bus[TTx]) StoreHealth(ctx context.Context) (*StoreHealth, error) {
	r, ok := b.store.(driver.HealthReporter)
	if !ok {
		return nil, fmt.Errorf("relaybus: store health: the store (%T) does not report its health: %w", b.store, errors.ErrUnsupported)
	}
	h, err := r.StoreHealth(ctx, &driver.StoreHealthParams{})
	if err != nil {
		return nil, fmt.Errorf("relaybus: store health: %w", err)
	}
	return h, nil
}

// The checks of CheckStoreHealth, in HealthWarning.Check. What each one
// means and what to do about it: docs/operations.md.
const (
	// HealthCheckDeadRows: the deliveries table's dead rows are over
	// HealthThresholds.DeadRowsShareMax of its rows (and over
	// DeadRowsMin): vacuum is not keeping up with the completions.
	HealthCheckDeadRows = "dead_rows"
	// HealthCheckVacuum: with more than DeadRowsMin dead rows, the
	// deliveries table has not been vacuumed (autovacuum or VACUUM) for
	// VacuumAgeMax, or never.
	HealthCheckVacuum = "vacuum"
	// HealthCheckLaneHOT: fewer than LaneHOTShareMin of the lane updates
	// since the previous report were HOT (over at least LaneUpdatesMin
	// updates): the lane pages could not be pruned.
	HealthCheckLaneHOT = "lane_hot_share"
	// HealthCheckXmin: a transaction has held the xmin horizon back for
	// XminAgeMax or longer: no dead row newer than its snapshot can be
	// removed.
	HealthCheckXmin = "xmin_horizon"
	// HealthCheckOldestDue (with StoreHealthWatch.Statistics, per
	// handler): the handler's oldest due pending delivery has waited
	// OldestDueAgeMax or longer: its dispatchers do not keep up, are
	// not running, or the handler is paused.
	HealthCheckOldestDue = "oldest_due"
	// HealthCheckDeadLetters (with StoreHealthWatch.Statistics, per
	// handler): DeadNewMin or more of the handler's deliveries became dead
	// since the previous reading (since none, at the first: all of them).
	HealthCheckDeadLetters = "dead_letters"
)

// Defaults of HealthThresholds and StoreHealthWatch, used for zero
// fields. Disabled turns a threshold's check off.
const (
	// DefaultHealthDeadRowsMin: below 100,000 dead rows no dead-row or
	// vacuum warning, whatever their share: a small table is vacuumed in
	// milliseconds once autovacuum gets to it.
	DefaultHealthDeadRowsMin = 100_000
	// DefaultHealthDeadRowsShareMax: 20% of the rows dead. Setup sets the
	// deliveries table's autovacuum_vacuum_scale_factor to 2%, so a
	// table vacuum keeps up with stays far below it.
	DefaultHealthDeadRowsShareMax = 0.2
	// DefaultHealthVacuumAgeMax: an hour without a vacuum while dead rows
	// pile up.
	DefaultHealthVacuumAgeMax = time.Hour
	// DefaultHealthLaneHOTShareMin: 90% of lane updates HOT. The lanes
	// are laid out for HOT updates; the benchmarks measure 99.7-100%.
	DefaultHealthLaneHOTShareMin = 0.9
	// DefaultHealthLaneUpdatesMin: the HOT share is judged over at least
	// 1,000 lane updates, so that an idle interval's few do not warn.
	DefaultHealthLaneUpdatesMin = 1_000
	// DefaultHealthXminAgeMax: five minutes. A dispatcher's transactions
	// last milliseconds; a transaction older than this is a report, a
	// dump, a forgotten psql session or a stuck application.
	DefaultHealthXminAgeMax = 5 * time.Minute
	// DefaultHealthOldestDueAgeMax: five minutes. A dispatcher that keeps
	// up claims a due delivery within its poll interval.
	DefaultHealthOldestDueAgeMax = 5 * time.Minute
	// DefaultHealthDeadNewMin: every new dead delivery warns.
	DefaultHealthDeadNewMin = 1
	// DefaultHealthInterval is StoreHealthWatch.Interval when zero.
	DefaultHealthInterval = time.Minute
)

// HealthThresholds say when CheckStoreHealth warns. Zero fields take
// their defaults (DefaultHealth...); Disabled turns a check off (for
// DeadRowsMin and LaneUpdatesMin, the checks that depend on them).
type HealthThresholds struct {
	// DeadRowsMin: HealthCheckDeadRows and HealthCheckVacuum need at
	// least this many dead rows in the deliveries table. At least 1.
	DeadRowsMin int64
	// DeadRowsShareMax: HealthCheckDeadRows warns when dead rows are at
	// least this share of live plus dead rows. (0, 1].
	DeadRowsShareMax float64
	// VacuumAgeMax: HealthCheckVacuum warns when the last vacuum of the
	// deliveries table is at least this old, or never was. At least
	// MinHealthInterval.
	VacuumAgeMax time.Duration
	// LaneHOTShareMin: HealthCheckLaneHOT warns when the HOT share of the
	// lane updates is below it. (0, 1].
	LaneHOTShareMin float64
	// LaneUpdatesMin: HealthCheckLaneHOT needs at least this many lane
	// updates in the interval. At least 1.
	LaneUpdatesMin int64
	// XminAgeMax: HealthCheckXmin warns when the xmin holder's
	// transaction is at least this old. At least a millisecond.
	XminAgeMax time.Duration
	// OldestDueAgeMax: HealthCheckOldestDue warns for a handler whose
	// Counts.OldestDueAge is at least this. At least a second.
	OldestDueAgeMax time.Duration
	// DeadNewMin: HealthCheckDeadLetters warns for a handler with at
	// least this many more dead deliveries than at the previous reading.
	// At least 1.
	DeadNewMin int64
}

// resolved is th with its defaults (every default for a nil th),
// checked.
func (th *HealthThresholds) resolved() (HealthThresholds, error) {
	var t HealthThresholds
	if th != nil {
		t = *th
	}
	return t.withDefaults()
}

// withDefaults returns th with its zero fields set and checks it.
func (th HealthThresholds) withDefaults() (HealthThresholds, error) {
	setInt := func(name string, v *int64, def int64) error {
		switch {
		case *v == 0:
			*v = def
		case *v != Disabled && *v < 1:
			return invalidf("health thresholds: %s %d: at least 1, or Disabled", name, *v)
		}
		return nil
	}
	setShare := func(name string, v *float64, def float64) error {
		switch {
		case *v == 0:
			*v = def
		case *v != Disabled && (*v < 0 || *v > 1):
			return invalidf("health thresholds: %s %v: in (0, 1], or Disabled", name, *v)
		}
		return nil
	}
	setAge := func(name string, v *time.Duration, def, least time.Duration) error {
		switch {
		case *v == 0:
			*v = def
		case *v != Disabled && *v < least:
			return invalidf("health thresholds: %s %v: at least %v, or Disabled", name, *v, least)
		}
		return nil
	}
	err := errors.Join(
		setInt("DeadRowsMin", &th.DeadRowsMin, DefaultHealthDeadRowsMin),
		setShare("DeadRowsShareMax", &th.DeadRowsShareMax, DefaultHealthDeadRowsShareMax),
		setAge("VacuumAgeMax", &th.VacuumAgeMax, DefaultHealthVacuumAgeMax, MinHealthInterval),
		setShare("LaneHOTShareMin", &th.LaneHOTShareMin, DefaultHealthLaneHOTShareMin),
		setInt("LaneUpdatesMin", &th.LaneUpdatesMin, DefaultHealthLaneUpdatesMin),
		setAge("XminAgeMax", &th.XminAgeMax, DefaultHealthXminAgeMax, time.Millisecond),
		setAge("OldestDueAgeMax", &th.OldestDueAgeMax, DefaultHealthOldestDueAgeMax, time.Second),
		setInt("DeadNewMin", &th.DeadNewMin, DefaultHealthDeadNewMin),
	)
	return th, err
}

// HealthWarning is one check of a report past its threshold.
type HealthWarning struct {
	// Check is one of the HealthCheck... names.
	Check string
	// Message says what was found, with the figures, and what to look
	// at first; docs/operations.md has the rest.
	Message string
}

// HealthReport is a StoreHealth judged against HealthThresholds
// (CheckStoreHealth).
type HealthReport struct {
	Health *StoreHealth
	// LaneUpdates and LaneHOTShare are over the interval since the
	// previous report's reading (all the statistics hold, for the first
	// report, or after the counters went back: a statistics reset).
	// LaneHOTShare is meaningless (0) when LaneUpdates is 0.
	LaneUpdates  int64
	LaneHOTShare float64
	// Statistics are the deliveries' statistics read with the health
	// (StoreHealthWatch.Statistics), or nil.
	Statistics *Statistics
	// Warnings are the checks past their thresholds, in the order of the
	// HealthCheck... constants (the per-handler ones by handler name).
	Warnings []HealthWarning
}

// CheckStoreHealth judges h against th (nil: every default); prev is
// the previous report of the same store, or nil, for the lane updates
// between the two. It reads nothing: Bus.StoreHealth reads h.
func CheckStoreHealth(h *StoreHealth, prev *HealthReport, th *HealthThresholds) (*HealthReport, error) {
	if h == nil {
		return nil, invalidf("check store health: the report is nil")
	}
	t, err := th.resolved()
	if err != nil {
		return nil, err
	}
	r := &HealthReport{Health: h, LaneUpdates: h.LaneUpdates}
	hot := h.LaneHOTUpdates
	if prev != nil && prev.Health != nil && h.LaneUpdates >= prev.Health.LaneUpdates && h.LaneHOTUpdates >= prev.Health.LaneHOTUpdates {
		r.LaneUpdates -= prev.Health.LaneUpdates
		hot -= prev.Health.LaneHOTUpdates
	}
	if r.LaneUpdates > 0 {
		r.LaneHOTShare = float64(hot) / float64(r.LaneUpdates)
	}
	warn := func(check, format string, args ...any) {
		r.Warnings = append(r.Warnings, HealthWarning{Check: check, Message: fmt.Sprintf(format, args...)})
	}

	dead, rows := h.DeliveriesDeadRows, h.DeliveriesLiveRows+h.DeliveriesDeadRows
	manyDead := t.DeadRowsMin != Disabled && dead >= t.DeadRowsMin
	holder := ""
	if x := h.XminHolder; x != nil {
		holder = fmt.Sprintf("; the xmin horizon is held by %s, first", describeXminHolder(x))
	}
	if manyDead && t.DeadRowsShareMax != Disabled && rows > 0 && float64(dead) >= t.DeadRowsShareMax*float64(rows) {
		warn(HealthCheckDeadRows, "relaybus: the deliveries table holds %d dead rows, %.0f%% of its %d rows (threshold %.0f%%): vacuum is not keeping up with the completions%s",
			dead, 100*float64(dead)/float64(rows), rows, 100*t.DeadRowsShareMax, holder)
	}
	if manyDead && t.VacuumAgeMax != Disabled {
		last := h.DeliveriesLastAutovacuum
		if h.DeliveriesLastVacuum.After(last) {
			last = h.DeliveriesLastVacuum
		}
		switch {
		case last.IsZero():
			warn(HealthCheckVacuum, "relaybus: the deliveries table, with %d dead rows, has not been vacuumed since its statistics began%s", dead, holder)
		case h.At.Sub(last) >= t.VacuumAgeMax:
			warn(HealthCheckVacuum, "relaybus: the deliveries table, with %d dead rows, was last vacuumed %v ago (at %s; threshold %v)%s",
				dead, h.At.Sub(last).Round(time.Second), last.Format(time.RFC3339), t.VacuumAgeMax, holder)
		}
	}
	if t.LaneHOTShareMin != Disabled && t.LaneUpdatesMin != Disabled && r.LaneUpdates >= t.LaneUpdatesMin && r.LaneHOTShare < t.LaneHOTShareMin {
		warn(HealthCheckLaneHOT, "relaybus: %.1f%% of %d lane updates were HOT (threshold %.0f%%): the lane pages could not be pruned%s",
			100*r.LaneHOTShare, r.LaneUpdates, 100*t.LaneHOTShareMin, holder)
	}
	if x := h.XminHolder; x != nil && t.XminAgeMax != Disabled && !x.XactStart.IsZero() && x.Age >= t.XminAgeMax {
		warn(HealthCheckXmin, "relaybus: %s has held the xmin horizon back for %v (threshold %v, %d transaction IDs behind): no dead row newer than its snapshot can be removed",
			describeXminHolder(x), x.Age.Round(time.Millisecond), t.XminAgeMax, x.XminAge)
	}
	return r, nil
}

// CheckStatistics judges st, the deliveries' statistics (Bus.Statistics),
// against th (nil: every default), and returns its warnings, by handler
// name: HealthCheckOldestDue for each handler whose oldest due delivery
// has waited OldestDueAgeMax, HealthCheckDeadLetters for each with
// DeadNewMin more dead deliveries than in prev (nil: than none). It reads
// nothing; StoreHealthWatch.Statistics reads st with each report.
func CheckStatistics(st, prev *Statistics, th *HealthThresholds) ([]HealthWarning, error) {
	if st == nil {
		return nil, invalidf("check statistics: the statistics are nil")
	}
	t, err := th.resolved()
	if err != nil {
		return nil, err
	}
	handlers := make([]string, 0, len(st.Handlers))
	for h := range st.Handlers {
		handlers = append(handlers, h)
	}
	slices.Sort(handlers)
	var ws []HealthWarning
	for _, h := range handlers {
		c := st.Handlers[h]
		if t.OldestDueAgeMax != Disabled && c.OldestDueAge >= t.OldestDueAgeMax {
			ws = append(ws, HealthWarning{Check: HealthCheckOldestDue, Message: fmt.Sprintf(
				"relaybus: handler %q: its oldest due delivery has waited %v (threshold %v), with %d pending and %d processing: are its dispatchers running and keeping up, or is it paused?",
				h, c.OldestDueAge.Round(time.Second), t.OldestDueAgeMax, c.Pending, c.Processing)})
		}
	}
	for _, h := range handlers {
		c := st.Handlers[h]
		var before int64
		if prev != nil {
			before = prev.Handlers[h].Dead
		}
		if t.DeadNewMin != Disabled && c.Dead-before >= t.DeadNewMin {
			ws = append(ws, HealthWarning{Check: HealthCheckDeadLetters, Message: fmt.Sprintf(
				"relaybus: handler %q: %d deliveries became dead since the previous reading, %d dead in all: list them (ListDeliveries with StatusDead), fix the cause, then Requeue or purge them",
				h, c.Dead-before, c.Dead)})
		}
	}
	return ws, nil
}

// describeXminHolder names x for a warning: what to terminate or finish.
func describeXminHolder(x *XminHolder) string {
	if x.Kind == relaytype.XminHolderPrepared {
		return fmt.Sprintf("prepared transaction %q of %q, prepared at %s", x.Name, x.User, x.XactStart.Format(time.RFC3339))
	}
	s := fmt.Sprintf("pid %d (%s of %q, application %q, %s", x.PID, x.BackendType, x.User, x.Name, x.State)
	if !x.XactStart.IsZero() {
		s += ", transaction started " + x.XactStart.Format(time.RFC3339)
	}
	if !x.QueryStart.IsZero() {
		s += ", query started " + x.QueryStart.Format(time.RFC3339)
	}
	return s + ")"
}

// StoreHealthWatch configures WatchStoreHealth. A nil *StoreHealthWatch
// takes every default.
type StoreHealthWatch struct {
	// Interval between readings. Default DefaultHealthInterval (a
	// minute), [MinHealthInterval, MaxHealthInterval].
	Interval time.Duration
	// Thresholds of the warnings (zero fields: the defaults).
	Thresholds HealthThresholds
	// OnReport, when set, gets every report, warnings or not, on the
	// watching goroutine: relaybus/otel's Instruments.RecordStoreHealth
	// records the health metrics from it.
	OnReport func(ctx context.Context, r *HealthReport)
	// Statistics also reads Bus.Statistics at each interval, into the
	// report's Statistics, and warns as CheckStatistics says (the
	// oldest due delivery of each handler, new dead deliveries). On
	// PostgreSQL that call scans the deliveries table unless its
	// statistics counters are on (postgres.Store.EnableStatisticsCounters):
	// turn them on, or keep the interval long, on a large backlog. A
	// failed reading is logged at Warn, and the report goes out without.
	Statistics bool
}

// WatchStoreHealth reads the store's health every Interval until ctx is
// done, and returns nil then. Each warning of CheckStoreHealth is logged
// at Warn on Config.Logger, with ctx, the check's name and the figures;
// every report goes to OnReport. A reading that fails is logged at Warn
// and tried again at the next interval. It reads at once when it starts.
// For a store without the driver.HealthReporter capability it returns an
// error wrapping errors.ErrUnsupported at once, and an invalid watch an
// ErrInvalid error. Run it on a goroutine of its own, in one process of a
// deployment (every process would read the same database).
func (b *Bus[TTx]) WatchStoreHealth(ctx context.Context, w *StoreHealthWatch) error {
	var cfg StoreHealthWatch
	if w != nil {
		cfg = *w
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultHealthInterval
	}
	if cfg.Interval < MinHealthInterval || cfg.Interval > MaxHealthInterval {
		return invalidf("store health watch: interval %v out of range [%v, %v]", cfg.Interval, MinHealthInterval, MaxHealthInterval)
	}
	th, err := cfg.Thresholds.withDefaults()
	if err != nil {
		return err
	}
	if _, ok := b.store.(driver.HealthReporter); !ok {
		return fmt.Errorf("relaybus: store health watch: the store (%T) does not report its health: %w", b.store, errors.ErrUnsupported)
	}
	log := b.cfg.Logger
	t := time.NewTicker(cfg.Interval)
	defer t.Stop()
	var prev *HealthReport
	var lastStats *Statistics // the last statistics read, for the dead deliveries' growth
	for {
		h, err := b.StoreHealth(ctx)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			log.WarnContext(ctx, "relaybus: store health: reading failed; trying again at the next interval", "error", err, "interval", cfg.Interval)
		default:
			r, err := CheckStoreHealth(h, prev, &th)
			if err != nil {
				return err // not reached: th is checked above
			}
			if cfg.Statistics {
				if r.Statistics = b.watchStatistics(ctx, lastStats, &th, r); r.Statistics != nil {
					lastStats = r.Statistics
				}
			}
			for _, wn := range r.Warnings {
				log.WarnContext(ctx, wn.Message, "check", wn.Check)
			}
			if cfg.OnReport != nil {
				cfg.OnReport(ctx, r)
			}
			prev = r
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// watchStatistics reads the statistics for WatchStoreHealth's report r
// and appends their warnings to it, the dead deliveries compared with
// last (the last statistics read); nil when the reading fails (logged).
func (b *Bus[TTx]) watchStatistics(ctx context.Context, last *Statistics, th *HealthThresholds, r *HealthReport) *Statistics {
	st, err := b.Statistics(ctx)
	if err != nil {
		if ctx.Err() == nil {
			b.cfg.Logger.WarnContext(ctx, "relaybus: store health: reading the statistics failed; trying again at the next interval", "error", err)
		}
		return nil
	}
	ws, err := CheckStatistics(st, last, th)
	if err == nil {
		r.Warnings = append(r.Warnings, ws...)
	}
	return st
}
