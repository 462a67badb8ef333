package relaybus

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

var healthAt = time.Date(2031, 1, 1, 12, 0, 0, 0, time.UTC)

// healthyReport is a report that no default threshold warns about.
func healthyReport() *StoreHealth {
	return &StoreHealth{
		At: healthAt, DeliveriesLiveRows: 1_000_000, DeliveriesDeadRows: 10_000,
		DeliveriesLastAutovacuum: healthAt.Add(-time.Minute),
		LaneUpdates:              10_000, LaneHOTUpdates: 10_000,
		XminHolder: &XminHolder{Kind: relaytype.XminHolderSession, PID: 7, Name: "psql", User: "app", State: "idle in transaction",
			BackendType: "client backend", XactStart: healthAt.Add(-time.Second), QueryStart: healthAt.Add(-time.Second), Age: time.Second},
	}
}

func checks(t *testing.T, h *StoreHealth, prev *HealthReport, th *HealthThresholds) []string {
	t.Helper()
	r, err := CheckStoreHealth(h, prev, th)
	require.NoError(t, err)
	var out []string
	for _, w := range r.Warnings {
		require.True(t, strings.HasPrefix(w.Message, "relaybus: "), w.Message)
		out = append(out, w.Check)
	}
	return out
}

// TestCheckStoreHealth: each check warns at its threshold and not below
// it, Disabled turns it off, the HOT share is over the interval since the
// previous report (the whole counters after a reset), and the messages
// name the figures and the xmin holder.
func TestCheckStoreHealth(t *testing.T) {
	t.Parallel()
	require.Empty(t, checks(t, healthyReport(), nil, nil), "a healthy report")

	for _, c := range []struct {
		name string
		edit func(h *StoreHealth)
		th   *HealthThresholds
		want []string
	}{
		{"dead rows at 20%", func(h *StoreHealth) { h.DeliveriesLiveRows, h.DeliveriesDeadRows = 400_000, 100_000 }, nil,
			[]string{HealthCheckDeadRows}},
		{"dead rows just under 20%", func(h *StoreHealth) { h.DeliveriesLiveRows, h.DeliveriesDeadRows = 400_004, 100_000 }, nil, nil},
		{"a high share of few dead rows", func(h *StoreHealth) { h.DeliveriesLiveRows, h.DeliveriesDeadRows = 0, 99_999 }, nil, nil},
		{"dead rows, DeadRowsMin Disabled", func(h *StoreHealth) { h.DeliveriesLiveRows, h.DeliveriesDeadRows = 0, 1<<30 },
			&HealthThresholds{DeadRowsMin: Disabled}, nil},
		{"dead rows, share Disabled", func(h *StoreHealth) { h.DeliveriesLiveRows, h.DeliveriesDeadRows = 0, 1<<30 },
			&HealthThresholds{DeadRowsShareMax: Disabled}, nil},
		{"no vacuum for an hour", func(h *StoreHealth) {
			h.DeliveriesDeadRows, h.DeliveriesLastAutovacuum = 100_000, healthAt.Add(-time.Hour)
		}, nil, []string{HealthCheckVacuum}},
		{"a manual vacuum counts", func(h *StoreHealth) {
			h.DeliveriesDeadRows, h.DeliveriesLastAutovacuum, h.DeliveriesLastVacuum = 100_000, healthAt.Add(-time.Hour), healthAt.Add(-time.Minute)
		}, nil, nil},
		{"never vacuumed", func(h *StoreHealth) { h.DeliveriesDeadRows, h.DeliveriesLastAutovacuum = 100_000, time.Time{} }, nil,
			[]string{HealthCheckVacuum}},
		{"never vacuumed, few dead rows", func(h *StoreHealth) { h.DeliveriesLastAutovacuum = time.Time{} }, nil, nil},
		{"vacuum age Disabled", func(h *StoreHealth) { h.DeliveriesDeadRows, h.DeliveriesLastAutovacuum = 100_000, time.Time{} },
			&HealthThresholds{VacuumAgeMax: Disabled}, nil},
		{"HOT share under 90%", func(h *StoreHealth) { h.LaneHOTUpdates = 8_999 }, nil, []string{HealthCheckLaneHOT}},
		{"HOT share at 90%", func(h *StoreHealth) { h.LaneHOTUpdates = 9_000 }, nil, nil},
		{"a low HOT share over few updates", func(h *StoreHealth) { h.LaneUpdates, h.LaneHOTUpdates = 999, 0 }, nil, nil},
		{"HOT share Disabled", func(h *StoreHealth) { h.LaneHOTUpdates = 0 }, &HealthThresholds{LaneHOTShareMin: Disabled}, nil},
		{"xmin held five minutes", func(h *StoreHealth) { h.XminHolder.Age = 5 * time.Minute }, nil, []string{HealthCheckXmin}},
		{"xmin held a little less", func(h *StoreHealth) { h.XminHolder.Age = 5*time.Minute - time.Millisecond }, nil, nil},
		{"an xmin holder with no transaction", func(h *StoreHealth) {
			h.XminHolder.XactStart, h.XminHolder.Age = time.Time{}, 0
		}, &HealthThresholds{XminAgeMax: time.Millisecond}, nil},
		{"a custom xmin threshold", func(h *StoreHealth) {}, &HealthThresholds{XminAgeMax: time.Second}, []string{HealthCheckXmin}},
		{"everything at once", func(h *StoreHealth) {
			h.DeliveriesLiveRows, h.DeliveriesDeadRows, h.DeliveriesLastAutovacuum = 0, 1<<20, time.Time{}
			h.LaneHOTUpdates = 0
			h.XminHolder.Age = time.Hour
		}, nil, []string{HealthCheckDeadRows, HealthCheckVacuum, HealthCheckLaneHOT, HealthCheckXmin}},
	} {
		h := healthyReport()
		c.edit(h)
		require.Equal(t, c.want, checks(t, h, nil, c.th), c.name)
	}

	// The HOT share of the interval since the previous report.
	prev, err := CheckStoreHealth(healthyReport(), nil, nil)
	require.NoError(t, err)
	h := healthyReport()
	h.LaneUpdates, h.LaneHOTUpdates = 12_000, 10_500 // 2,000 updates since, 500 of them HOT
	r, err := CheckStoreHealth(h, prev, nil)
	require.NoError(t, err)
	require.Equal(t, int64(2_000), r.LaneUpdates)
	require.InDelta(t, 0.25, r.LaneHOTShare, 1e-9)
	require.Equal(t, []string{HealthCheckLaneHOT}, checks(t, h, prev, nil), "cumulatively 87.5%, but 25% since the last report")
	h.LaneUpdates, h.LaneHOTUpdates = 10_500, 10_400 // 500 since: too few to judge
	require.Empty(t, checks(t, h, prev, nil))
	h.LaneUpdates, h.LaneHOTUpdates = 5_000, 1_000 // counters reset: the whole counters
	r, err = CheckStoreHealth(h, prev, nil)
	require.NoError(t, err)
	require.Equal(t, int64(5_000), r.LaneUpdates)
	require.InDelta(t, 0.2, r.LaneHOTShare, 1e-9)

	// The messages name the figures and the holder to end.
	h = healthyReport()
	h.DeliveriesLiveRows, h.DeliveriesDeadRows = 100_000, 300_000
	h.XminHolder.Age = time.Hour
	r, err = CheckStoreHealth(h, nil, nil)
	require.NoError(t, err)
	require.Len(t, r.Warnings, 2)
	require.Contains(t, r.Warnings[0].Message, "300000 dead rows, 75% of its 400000 rows (threshold 20%)")
	require.Contains(t, r.Warnings[0].Message, "held by pid 7 (client backend of \"app\", application \"psql\", idle in transaction")
	require.Contains(t, r.Warnings[1].Message, "pid 7")
	require.Contains(t, r.Warnings[1].Message, "for 1h0m0s (threshold 5m0s")
	h.XminHolder = &XminHolder{Kind: relaytype.XminHolderPrepared, Name: "gid-1", User: "app", XactStart: healthAt.Add(-time.Hour), Age: time.Hour}
	r, err = CheckStoreHealth(h, nil, nil)
	require.NoError(t, err)
	require.Contains(t, r.Warnings[1].Message, `prepared transaction "gid-1" of "app"`)
}

func TestCheckStoreHealthInvalid(t *testing.T) {
	t.Parallel()
	_, err := CheckStoreHealth(nil, nil, nil)
	require.ErrorIs(t, err, ErrInvalid)
	for _, th := range []HealthThresholds{
		{DeadRowsMin: -2}, {DeadRowsShareMax: 1.5}, {DeadRowsShareMax: -0.5}, {VacuumAgeMax: time.Millisecond},
		{LaneHOTShareMin: 2}, {LaneUpdatesMin: -5}, {XminAgeMax: time.Microsecond},
	} {
		_, err := CheckStoreHealth(healthyReport(), nil, &th)
		require.ErrorIs(t, err, ErrInvalid, "%+v", th)
	}
}

// healthStore is the fake store with the HealthReporter capability: it
// returns the reports of next in turn (an error where one is nil), then
// the last one again.
type healthStore struct {
	*fakeStore
	mu    sync.Mutex
	next  []*StoreHealth
	calls int
}

func (s *healthStore) StoreHealth(_ context.Context, p *driver.StoreHealthParams) (*StoreHealth, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.next[min(s.calls, len(s.next)-1)]
	s.calls++
	if h == nil {
		return nil, errors.New("connection refused")
	}
	return h, nil
}

// logRecords is a slog handler that keeps what it is given.
type logRecords struct {
	mu      sync.Mutex
	records []slog.Record
}

func (l *logRecords) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecords) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	l.records = append(l.records, r)
	l.mu.Unlock()
	return nil
}
func (l *logRecords) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logRecords) WithGroup(string) slog.Handler      { return l }

func (l *logRecords) warnings() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, r := range l.records {
		if r.Level != slog.LevelWarn {
			continue
		}
		line := r.Message
		r.Attrs(func(a slog.Attr) bool {
			line += " " + a.Key + "=" + a.Value.String()
			return true
		})
		out = append(out, line)
	}
	return out
}

// TestWatchStoreHealth: the watch reads at once and then every
// interval, logs each warning at Warn with its check, hands every report
// to OnReport (with the interval's HOT share), logs a failed reading and
// goes on, and returns nil when its context is done.
func TestWatchStoreHealth(t *testing.T) {
	t.Parallel()
	bad := healthyReport()
	bad.XminHolder.Age = time.Hour
	worse := healthyReport()
	worse.XminHolder.Age = 2 * time.Hour
	worse.LaneUpdates, worse.LaneHOTUpdates = 12_000, 10_000
	hs := &healthStore{fakeStore: newFakeStore(), next: []*StoreHealth{bad, nil, worse}}
	logs := &logRecords{}
	cfg := testConfig()
	cfg.Logger = slog.New(logs)
	b, err := New[*fakeTx](hs, cfg)
	require.NoError(t, err)

	h, err := b.StoreHealth(t.Context())
	require.NoError(t, err)
	require.Same(t, bad, h)
	hs.calls = 0

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	reports := make(chan *HealthReport, 3)
	done := make(chan error, 1)
	go func() {
		done <- b.WatchStoreHealth(ctx, &StoreHealthWatch{Interval: MinHealthInterval, OnReport: func(_ context.Context, r *HealthReport) {
			reports <- r
		}})
	}()
	first := <-reports
	require.Same(t, bad, first.Health)
	require.Equal(t, []string{HealthCheckXmin}, []string{first.Warnings[0].Check})
	second := <-reports // after the failed reading, two intervals on
	require.Same(t, worse, second.Health)
	require.Equal(t, int64(2_000), second.LaneUpdates, "since the first report")
	require.Len(t, second.Warnings, 2)
	cancel()
	require.NoError(t, <-done)

	warns := logs.warnings()
	require.Len(t, warns, 4, "%q", warns)
	require.Contains(t, warns[0], "has held the xmin horizon back for 1h0m0s")
	require.True(t, strings.HasSuffix(warns[0], " check=xmin_horizon"), warns[0])
	require.Contains(t, warns[1], "reading failed")
	require.Contains(t, warns[1], "connection refused")
	require.True(t, strings.HasSuffix(warns[2], " check=lane_hot_share"), warns[2])
	require.True(t, strings.HasSuffix(warns[3], " check=xmin_horizon"), warns[3])
}

// TestStoreHealthUnsupported: on a store without the capability both
// calls say so with errors.ErrUnsupported; a bad watch is ErrInvalid.
func TestStoreHealthUnsupported(t *testing.T) {
	t.Parallel()
	tb := setup(t, testConfig())
	_, err := tb.bus.StoreHealth(t.Context())
	require.ErrorIs(t, err, errors.ErrUnsupported)
	require.ErrorIs(t, tb.bus.WatchStoreHealth(t.Context(), nil), errors.ErrUnsupported)

	b, err := New[*fakeTx](&healthStore{fakeStore: newFakeStore(), next: []*StoreHealth{healthyReport()}}, testConfig())
	require.NoError(t, err)
	require.ErrorIs(t, b.WatchStoreHealth(t.Context(), &StoreHealthWatch{Interval: time.Millisecond}), ErrInvalid)
	require.ErrorIs(t, b.WatchStoreHealth(t.Context(), &StoreHealthWatch{Thresholds: HealthThresholds{XminAgeMax: -7}}), ErrInvalid)
}

// TestCheckStatistics: a handler whose oldest due delivery waited past
// the threshold warns, and so does one with new dead deliveries (all of
// them at the first reading), by handler name; Disabled turns either
// off; bad input is ErrInvalid.
func TestCheckStatistics(t *testing.T) {
	t.Parallel()
	st := &Statistics{Handlers: map[string]Counts{
		"b": {Pending: 3, Dead: 2, OldestDueAge: 10 * time.Minute},
		"a": {Pending: 1, OldestDueAge: 6 * time.Minute},
		"c": {Pending: 9, Dead: 5, OldestDueAge: time.Minute},
	}}
	checks := func(ws []HealthWarning) []string {
		var out []string
		for _, w := range ws {
			out = append(out, w.Check+" "+strings.SplitN(w.Message, ":", 3)[1])
		}
		return out
	}
	ws, err := CheckStatistics(st, nil, nil)
	require.NoError(t, err)
	require.Equal(t, []string{
		`oldest_due  handler "a"`, `oldest_due  handler "b"`,
		`dead_letters  handler "b"`, `dead_letters  handler "c"`,
	}, checks(ws))
	require.Contains(t, ws[1].Message, "waited 10m0s (threshold 5m0s), with 3 pending and 0 processing")
	require.Contains(t, ws[3].Message, "5 deliveries became dead since the previous reading, 5 dead in all")

	prev := &Statistics{Handlers: map[string]Counts{"b": {Dead: 2}, "c": {Dead: 1}}}
	ws, err = CheckStatistics(st, prev, &HealthThresholds{OldestDueAgeMax: Disabled, DeadNewMin: 3})
	require.NoError(t, err)
	require.Equal(t, []string{`dead_letters  handler "c"`}, checks(ws))
	require.Contains(t, ws[0].Message, "4 deliveries became dead")

	ws, err = CheckStatistics(st, st, &HealthThresholds{OldestDueAgeMax: 20 * time.Minute})
	require.NoError(t, err)
	require.Empty(t, ws)

	_, err = CheckStatistics(nil, nil, nil)
	require.ErrorIs(t, err, ErrInvalid)
	_, err = CheckStatistics(st, nil, &HealthThresholds{OldestDueAgeMax: time.Millisecond})
	require.ErrorIs(t, err, ErrInvalid)
	_, err = CheckStatistics(st, nil, &HealthThresholds{DeadNewMin: -2})
	require.ErrorIs(t, err, ErrInvalid)
}

// statsHealthStore is healthStore whose Statistics returns stats in
// turn (an error where one is nil), then the last again.
type statsHealthStore struct {
	*healthStore
	stats []*Statistics
	n     int
}

func (s *statsHealthStore) Statistics(context.Context, *driver.StatisticsParams) (*Statistics, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats[min(s.n, len(s.stats)-1)]
	s.n++
	if st == nil {
		return nil, errors.New("statement timeout")
	}
	return st, nil
}

// TestWatchStoreHealthStatistics: with Statistics, each report carries
// the statistics read with it and their warnings; new dead deliveries
// are counted from the last statistics read, across a failed reading
// (whose report has none).
func TestWatchStoreHealthStatistics(t *testing.T) {
	t.Parallel()
	one := &Statistics{Handlers: map[string]Counts{"h": {Pending: 1, Dead: 1}}}
	three := &Statistics{Handlers: map[string]Counts{"h": {Pending: 1, Dead: 3, OldestDueAge: time.Hour}}}
	hs := &statsHealthStore{
		healthStore: &healthStore{fakeStore: newFakeStore(), next: []*StoreHealth{healthyReport()}},
		stats:       []*Statistics{one, nil, three},
	}
	logs := &logRecords{}
	cfg := testConfig()
	cfg.Logger = slog.New(logs)
	b, err := New[*fakeTx](hs, cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	reports := make(chan *HealthReport, 3)
	done := make(chan error, 1)
	go func() {
		done <- b.WatchStoreHealth(ctx, &StoreHealthWatch{Interval: MinHealthInterval, Statistics: true,
			OnReport: func(_ context.Context, r *HealthReport) { reports <- r }})
	}()
	first, second, third := <-reports, <-reports, <-reports
	cancel()
	require.NoError(t, <-done)
	require.Same(t, one, first.Statistics)
	require.Nil(t, second.Statistics, "the reading failed")
	require.Same(t, three, third.Statistics)
	var got []string
	for _, w := range third.Warnings {
		got = append(got, w.Check)
	}
	require.Equal(t, []string{HealthCheckOldestDue, HealthCheckDeadLetters}, got)
	require.Contains(t, third.Warnings[1].Message, "2 deliveries became dead since the previous reading, 3 dead in all")
	warns := logs.warnings()
	require.Len(t, warns, 4, "%q", warns)
	require.True(t, strings.HasSuffix(warns[0], " check=dead_letters"), warns[0])
	require.Contains(t, warns[1], "reading the statistics failed")
	require.True(t, strings.HasSuffix(warns[2], " check=oldest_due"), warns[2])
	require.True(t, strings.HasSuffix(warns[3], " check=dead_letters"), warns[3])
}
