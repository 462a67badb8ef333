package admincli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/berkcansavur/relaybus/internal/admincli"
	"github.com/berkcansavur/relaybus/internal/dbenv/dbtest"
	"github.com/berkcansavur/relaybus/relaybus"
	"github.com/berkcansavur/relaybus/relaybus/postgres"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// result is one run of the CLI.
type result struct {
	code           int
	stdout, stderr string
}

// runOpts are the process a run gets; unset: no stdin, not a terminal,
// no environment.
type runOpts struct {
	stdin       string
	interactive bool
	env         map[string]string
}

// run runs the CLI with args, as cmd/relaybus does.
func run(t *testing.T, o *runOpts, args ...string) result {
	t.Helper()
	if o == nil {
		o = &runOpts{}
	}
	var stdout, stderr bytes.Buffer
	code := admincli.Main(t.Context(), args, admincli.Env{
		Stdin: strings.NewReader(o.stdin), Stdout: &stdout, Stderr: &stderr,
		Getenv:      func(k string) string { return o.env[k] },
		Interactive: o.interactive,
	})
	return result{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

// requireCode fails the test unless r ended with code, showing its
// output.
func requireCode(t *testing.T, code int, r result) {
	t.Helper()
	require.Equal(t, code, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
}

// fixture is a set-up store on a fresh database, seeded through the
// library: three events of order.placed, each with a delivery of
//   - mailer: failed with a Permanent, two-line error: dead,
//   - ledger: completed (and so deleted),
//   - audit: declared only, never run: pending;
//
// and one event of invoice.sent whose "billing" delivery is dead. The
// seeding bus's clock is seedAge in the past, so what it wrote is that
// old (the purge tests need dead letters older than a retention).
type fixture struct {
	dsn   string
	pool  *pgxpool.Pool
	store *postgres.Store
	bus   *relaybus.Bus[pgx.Tx]
	// dead are the IDs of the dead letters, in ID order.
	dead []string
}

// seedAge is how old the fixture's rows are.
const seedAge = 40 * 24 * time.Hour

const mailerError = "smtp: 550 mailbox unavailable\nremote said: user unknown"

func setup(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{dsn: dbtest.TestDatabase(t)}
	cfg, err := pgxpool.ParseConfig(f.dsn)
	require.NoError(t, err)
	cfg.MaxConns = 4
	f.pool, err = pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(f.pool.Close)
	f.store, err = postgres.New(f.pool, nil)
	require.NoError(t, err)
	require.NoError(t, f.store.Setup(t.Context()))
	past := time.Now().Add(-seedAge)
	seed, err := relaybus.New[pgx.Tx](f.store, relaybus.Config{Now: func() time.Time { return past }})
	require.NoError(t, err)
	require.NoError(t, seed.Handle("order.placed", "mailer", func(context.Context, *relaybus.Delivery) error {
		return relaybus.Permanent(errors.New(mailerError))
	}, nil))
	require.NoError(t, seed.Handle("order.placed", "ledger", func(context.Context, *relaybus.Delivery) error { return nil }, nil))
	require.NoError(t, seed.Declare("order.placed", "audit", nil))
	require.NoError(t, seed.Handle("invoice.sent", "billing", func(context.Context, *relaybus.Delivery) error {
		return relaybus.Permanent(errors.New("no such account"))
	}, nil))
	// One call each: the deliveries of one call need not get their IDs
	// in the call's order (a PostgreSQL publish inserts an unkeyed
	// event's before a keyed one's), and the tests name them in order.
	for _, e := range []*relaybus.Event{
		{ID: "evt-1", Type: "order.placed", Key: "customer-1", Payload: []byte(`{"order": 1}`), Headers: map[string]string{"trace": "t-1"}},
		{ID: "evt-2", Type: "order.placed", Key: "customer-2", Payload: []byte(`{"order": 2}`)},
		{ID: "evt-3", Type: "order.placed", Payload: []byte{0xff, 0xfe}},
		{ID: "evt-4", Type: "invoice.sent", Key: "customer-1"},
	} {
		require.NoError(t, seed.Publish(t.Context(), e))
	}
	res, err := seed.Work(t.Context(), &relaybus.WorkParams{Handlers: []string{"mailer", "ledger", "billing"}})
	require.NoError(t, err)
	require.Len(t, res.Worked, 7)
	dead, err := seed.ListDeliveries(t.Context(), &relaybus.DeliveryListParams{Status: relaybus.StatusDead})
	require.NoError(t, err)
	for _, d := range dead.Deliveries {
		f.dead = append(f.dead, d.ID)
	}
	require.Len(t, f.dead, 4)
	// The CLI's own view, on today's clock.
	f.bus, err = relaybus.New[pgx.Tx](f.store, relaybus.Config{})
	require.NoError(t, err)
	return f
}

// dsnFlag is the --dsn flag of f's database.
func (f *fixture) dsnFlag() string { return "--dsn=" + f.dsn }

// statuses are the status of each delivery of handler, by ID.
func (f *fixture) statuses(t *testing.T, handler string) map[string]relaybus.Status {
	t.Helper()
	page, err := f.bus.ListDeliveries(t.Context(), &relaybus.DeliveryListParams{Handler: handler})
	require.NoError(t, err)
	out := map[string]relaybus.Status{}
	for _, d := range page.Deliveries {
		out[d.ID] = d.Status
	}
	return out
}

func (f *fixture) deadCount(t *testing.T) int64 {
	t.Helper()
	st, err := f.bus.Statistics(t.Context())
	require.NoError(t, err)
	return st.Dead
}

func decode[T any](t *testing.T, r result) T {
	t.Helper()
	var v T
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &v), "stdout:\n%s", r.stdout)
	return v
}
