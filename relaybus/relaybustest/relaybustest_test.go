package relaybustest_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/berkcansavur/relaybus/internal/dbenv/dbtest"
	"github.com/berkcansavur/relaybus/relaybus"
	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/memory"
	"github.com/berkcansavur/relaybus/relaybus/relaybustest"
	"github.com/berkcansavur/relaybus/relaybus/storetest"
)

// TestMain stops the shared PostgreSQL server of the database tests, and
// checks that no test left a goroutine behind (Work renews leases on one).
func TestMain(m *testing.M) {
	code := dbtest.Run(m)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

// fakeTB is a testing.TB that records failures instead of failing the
// test: the helpers' own tests check that an assertion fails when it
// should, and what it says. Only what the helpers call is implemented;
// anything else panics on the nil TB.
type fakeTB struct {
	testing.TB
	mu       sync.Mutex
	failures []string
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Errorf(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failures = append(f.failures, fmt.Sprintf(format, args...))
}

// Fatalf records the failure and ends the goroutine, as testing.T's does.
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.Errorf(format, args...)
	runtime.Goexit()
}

func (f *fakeTB) Failed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.failures) > 0
}

// message is the one failure recorded; the test fails unless there is
// exactly one.
func (f *fakeTB) message(t *testing.T) string {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	require.Len(t, f.failures, 1, "failures recorded: %q", f.failures)
	return f.failures[0]
}

// runTB runs body as a test body on a fakeTB, on a goroutine of its own
// (which its Fatalf ends), and returns the fake once body has returned.
func runTB(body func(tb testing.TB)) *fakeTB {
	f := &fakeTB{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		body(f)
	}()
	<-done
	return f
}

// bundle is what setup returns beside the bus.
type bundle struct {
	store *memory.Store
	rec   *relaybustest.Recorder[*memory.Tx]
	clock *clock
}

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// setup returns a bus on a Recorder of a fresh memory store, with a
// clock the test moves and the handlers "mailer" and "ledger" of
// "order.placed" (both succeed).
func setup(t *testing.T) (*relaybus.Bus[*memory.Tx], *bundle) {
	t.Helper()
	b := &bundle{store: memory.New(nil), clock: &clock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}}
	b.rec = relaybustest.NewRecorder[*memory.Tx](b.store)
	bus, err := relaybus.New[*memory.Tx](b.rec, relaybus.Config{Owner: "relaybustest", Now: b.clock.Now, RetryJitter: relaybus.Disabled})
	require.NoError(t, err)
	for _, h := range []string{"mailer", "ledger"} {
		require.NoError(t, bus.Handle("order.placed", h, func(context.Context, *relaybus.Delivery) error { return nil }, nil))
	}
	return bus, b
}

// publishTx publishes events in a transaction of the store's and returns
// it, still open.
func publishTx(t *testing.T, bus *relaybus.Bus[*memory.Tx], b *bundle, events ...*relaybus.Event) *memory.Tx {
	t.Helper()
	tx, err := b.store.TxBegin(t.Context())
	require.NoError(t, err)
	require.NoError(t, bus.PublishTx(t.Context(), tx, events...))
	return tx
}

// TestRecorderConformance: a Recorder hands every call to its store
// unchanged: the store conformance suite passes through it.
func TestRecorderConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) driver.Store[*memory.Tx] {
		return relaybustest.NewRecorder[*memory.Tx](memory.New(nil))
	}, nil)
}

// TestRecorderPublishedTx: PublishedTx is what one transaction published,
// in order, with IDs and CreatedAt filled in, before and after it ends,
// committed or rolled back; Published is every publish (Publish's too);
// the copies handed out are the caller's; Reset forgets.
func TestRecorderPublishedTx(t *testing.T) {
	t.Parallel()
	bus, b := setup(t)
	tx1 := publishTx(t, bus, b,
		&relaybus.Event{Type: "order.placed", Key: "customer-1", Payload: []byte("one")},
		&relaybus.Event{Type: "order.placed", Key: "customer-1", Payload: []byte("two")})
	tx2 := publishTx(t, bus, b, &relaybus.Event{Type: "order.placed", Payload: []byte("three")})
	require.NoError(t, bus.Publish(t.Context(), &relaybus.Event{Type: "order.placed", Payload: []byte("four")}))

	in1 := b.rec.PublishedTx(tx1)
	require.Len(t, in1, 2)
	require.Equal(t, "one", string(in1[0].Event.Payload))
	require.Equal(t, "two", string(in1[1].Event.Payload))
	require.NotEmpty(t, in1[0].Event.ID)
	require.Equal(t, b.clock.Now(), in1[0].Event.CreatedAt)
	require.Equal(t, []string{"mailer", "ledger"}, in1[0].Handlers)

	require.NoError(t, b.store.TxCommit(t.Context(), tx1))
	require.NoError(t, b.store.TxRollback(t.Context(), tx2))
	require.Len(t, b.rec.PublishedTx(tx1), 2, "after commit")
	require.Len(t, b.rec.PublishedTx(tx2), 1, "after rollback: what the transaction published, whatever became of it")
	other, err := b.store.TxBegin(t.Context())
	require.NoError(t, err)
	require.Nil(t, b.rec.PublishedTx(other))

	all := b.rec.Published()
	var payloads []string
	for _, p := range all {
		payloads = append(payloads, string(p.Event.Payload))
	}
	require.Equal(t, []string{"one", "two", "three", "four"}, payloads)

	all[0].Event.Payload[0] = 'X'
	all[0].Handlers[0] = "changed"
	require.Equal(t, "one", string(b.rec.Published()[0].Event.Payload), "a copy")
	require.Equal(t, "mailer", b.rec.Published()[0].Handlers[0], "a copy")

	b.rec.Reset()
	require.Nil(t, b.rec.Published())
	require.Nil(t, b.rec.PublishedTx(tx1))
}

// TestRecorderRecordsOnlyAcceptedPublishes: a publish the bus or store
// refuses is not recorded.
func TestRecorderRecordsOnlyAcceptedPublishes(t *testing.T) {
	t.Parallel()
	bus, b := setup(t)
	tx, err := b.store.TxBegin(t.Context())
	require.NoError(t, err)
	require.NoError(t, b.store.TxRollback(t.Context(), tx))
	require.Error(t, bus.PublishTx(t.Context(), tx, &relaybus.Event{Type: "order.placed"}), "a transaction already ended")
	require.Error(t, bus.Publish(t.Context(), &relaybus.Event{Type: "no.handler"}))
	require.Nil(t, b.rec.Published())
}

// order is a payload of the tests.
const orderJSON = `{"order": "o-1", "total": 12, "items": ["book"]}`

func orderEvent() *relaybus.Event {
	return &relaybus.Event{Type: "order.placed", Key: "customer-42", Payload: []byte(orderJSON), Headers: map[string]string{"trace": "t-1", "tenant": "acme"}}
}

// TestRequirePublishedMatches: every field of a Want matches an event
// that has it, and RequirePublished returns that event.
func TestRequirePublishedMatches(t *testing.T) {
	t.Parallel()
	bus, b := setup(t)
	ev := orderEvent()
	tx := publishTx(t, bus, b, ev, &relaybus.Event{Type: "order.placed", Payload: []byte("other")})
	published := b.rec.PublishedTx(tx)

	for _, w := range []relaybustest.Want{
		{Type: "order.placed", Key: new("customer-42")},
		{Type: "order.placed", ID: ev.ID},
		{Type: "order.placed", Payload: []byte(orderJSON)},
		{Type: "order.placed", PayloadJSON: map[string]any{"total": 12, "order": "o-1", "items": []string{"book"}}},
		{Type: "order.placed", PayloadJSON: struct {
			Items []string `json:"items"`
			Order string   `json:"order"`
			Total float64  `json:"total"`
		}{[]string{"book"}, "o-1", 12}},
		{Type: "order.placed", Headers: map[string]string{"trace": "t-1"}},
		{Type: "order.placed", Key: new("customer-42"), Handlers: []string{"ledger", "mailer"}},
	} {
		got := relaybustest.RequirePublished(t, published, w)
		require.Equal(t, ev.ID, got.Event.ID, "%+v", w)
	}
	got := relaybustest.RequirePublished(t, published, relaybustest.Want{Type: "order.placed", Key: new("")})
	require.Equal(t, "other", string(got.Event.Payload), "new(\"\") wants the unkeyed one")
}

// TestRequirePublishedFails: RequirePublished fails when no event
// matches, naming the Want and listing every event published with how it
// differs; when several match, saying how many; and when nothing was
// published.
func TestRequirePublishedFails(t *testing.T) {
	t.Parallel()
	bus, b := setup(t)
	ev := orderEvent()
	tx := publishTx(t, bus, b, ev, &relaybus.Event{Type: "order.placed", Payload: []byte{0xff, 0x00}})
	published := b.rec.PublishedTx(tx)

	f := runTB(func(tb testing.TB) {
		relaybustest.RequirePublished(tb, published, relaybustest.Want{
			Type: "order.placed", Key: new("customer-7"),
			PayloadJSON: map[string]any{"total": 13}, Headers: map[string]string{"trace": "t-2", "region": "eu"},
		})
		tb.Errorf("not reached: RequirePublished must stop the test")
	})
	msg := f.message(t)
	for _, want := range []string{
		`relaybustest: RequirePublished: no published event matches Want{Type: "order.placed", Key: "customer-7", PayloadJSON: {"total":13}, Headers: map[region:eu trace:t-2]}`,
		"2 published:",
		fmt.Sprintf(`[0] order.placed key "customer-42" id %q handlers ["mailer" "ledger"] headers map[tenant:acme trace:t-1] payload %q`, ev.ID, orderJSON),
		`differs: key "customer-42", want "customer-7"; payload JSON {"items":["book"],"order":"o-1","total":12}, want {"total":13}; header "region" missing, want "eu"; header "trace" is "t-1", want "t-2"`,
		`[1] order.placed key "" (unkeyed)`,
		"payload (2 bytes, not text)",
		"is not JSON",
	} {
		require.Contains(t, msg, want)
	}

	f = runTB(func(tb testing.TB) {
		relaybustest.RequirePublished(tb, published, relaybustest.Want{Type: "order.placed"})
	})
	msg = f.message(t)
	require.Contains(t, msg, `2 published events match Want{Type: "order.placed"}, want exactly one`)
	require.Equal(t, 2, strings.Count(msg, "      matches"), msg)

	f = runTB(func(tb testing.TB) {
		relaybustest.RequirePublished(tb, nil, relaybustest.Want{Type: "order.placed", ID: "o-1"})
	})
	require.Contains(t, f.message(t), "nothing was published")

	// A Want that cannot be used says so.
	for _, tc := range []struct {
		want relaybustest.Want
		msg  string
	}{
		{relaybustest.Want{}, "Want.Type is empty"},
		{relaybustest.Want{Type: "e", Payload: []byte("x"), PayloadJSON: "x"}, "both Payload and PayloadJSON"},
		{relaybustest.Want{Type: "e", PayloadJSON: func() {}}, "cannot be encoded as JSON"},
	} {
		f := runTB(func(tb testing.TB) { relaybustest.RequirePublished(tb, published, tc.want) })
		require.Contains(t, f.message(t), tc.msg)
	}
}

// TestRequirePublishedMany: the whole list in order passes; a wrong
// order, a missing event and an extra one fail, listing each position
// with what was wanted and what was published.
func TestRequirePublishedMany(t *testing.T) {
	t.Parallel()
	bus, b := setup(t)
	tx := publishTx(t, bus, b,
		&relaybus.Event{Type: "order.placed", Key: "a"},
		&relaybus.Event{Type: "order.placed", Key: "b"})
	published := b.rec.PublishedTx(tx)

	got := relaybustest.RequirePublishedMany(t, published, []relaybustest.Want{
		{Type: "order.placed", Key: new("a")}, {Type: "order.placed", Key: new("b")},
	})
	require.Len(t, got, 2)

	f := runTB(func(tb testing.TB) {
		relaybustest.RequirePublishedMany(tb, published, []relaybustest.Want{
			{Type: "order.placed", Key: new("b")}, {Type: "order.placed", Key: new("a")},
		})
	})
	msg := f.message(t)
	require.Contains(t, msg, "RequirePublishedMany: 2 published, 2 wanted, in this order:")
	require.Contains(t, msg, `[0] want Want{Type: "order.placed", Key: "b"}`)
	require.Contains(t, msg, `differs: key "a", want "b"`)

	f = runTB(func(tb testing.TB) {
		relaybustest.RequirePublishedMany(tb, published, []relaybustest.Want{{Type: "order.placed", Key: new("a")}})
	})
	msg = f.message(t)
	require.Contains(t, msg, "2 published, 1 wanted")
	require.Contains(t, msg, "[1] want nothing\n      published order.placed key \"b\"")

	f = runTB(func(tb testing.TB) {
		relaybustest.RequirePublishedMany(tb, published[:1], []relaybustest.Want{{Type: "order.placed"}, {Type: "order.shipped"}})
	})
	require.Contains(t, f.message(t), "[1] want Want{Type: \"order.shipped\"}\n      published nothing")
}

// TestRequireNotPublished passes when nothing matches and fails listing
// what does.
func TestRequireNotPublished(t *testing.T) {
	t.Parallel()
	bus, b := setup(t)
	published := b.rec.PublishedTx(publishTx(t, bus, b, orderEvent()))
	relaybustest.RequireNotPublished(t, published, relaybustest.Want{Type: "order.cancelled"})
	relaybustest.RequireNotPublished(t, published, relaybustest.Want{Type: "order.placed", Key: new("customer-7")})

	f := runTB(func(tb testing.TB) {
		relaybustest.RequireNotPublished(tb, published, relaybustest.Want{Type: "order.placed", Key: new("customer-42")})
	})
	msg := f.message(t)
	require.Contains(t, msg, `RequireNotPublished: 1 published event match Want{Type: "order.placed", Key: "customer-42"}`)
	require.Contains(t, msg, `[0] order.placed key "customer-42"`)
}

// TestStored: what committed, read from the store, with the handlers of
// its deliveries; what did not commit is not there, and what completed
// is gone.
func TestStored(t *testing.T) {
	t.Parallel()
	bus, b := setup(t)
	require.Empty(t, relaybustest.Stored(t.Context(), t, bus))
	committed := publishTx(t, bus, b, orderEvent(), &relaybus.Event{Type: "order.placed", Key: "customer-9"})
	open := publishTx(t, bus, b, &relaybus.Event{Type: "order.placed", Key: "not-committed"})
	require.NoError(t, b.store.TxCommit(t.Context(), committed))

	stored := relaybustest.Stored(t.Context(), t, bus)
	relaybustest.RequirePublishedMany(t, stored, []relaybustest.Want{
		{Type: "order.placed", Key: new("customer-42"), Payload: []byte(orderJSON), Headers: map[string]string{"tenant": "acme"}, Handlers: []string{"mailer", "ledger"}},
		{Type: "order.placed", Key: new("customer-9")},
	})
	require.NoError(t, b.store.TxRollback(t.Context(), open))

	relaybustest.Work(t.Context(), t, bus, nil)
	require.Empty(t, relaybustest.Stored(t.Context(), t, bus), "completed deliveries are deleted")

	f := runTB(func(tb testing.TB) {
		relaybustest.Stored(t.Context(), tb, failingLister{})
	})
	require.Contains(t, f.message(t), "relaybustest: Stored: list deliveries: store down")
}

type failingLister struct{}

func (failingLister) ListDeliveries(context.Context, *relaybus.DeliveryListParams) (*relaybus.DeliveryListResult, error) {
	return nil, errors.New("store down")
}

// TestWork: Work runs the handlers and returns what ran; a handler that
// fails fails the test with every delivery listed, unless AllowFailures;
// the retry runs in a later call once the bus's clock has passed it.
func TestWork(t *testing.T) {
	t.Parallel()
	b := &bundle{store: memory.New(nil), clock: &clock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}}
	bus, err := relaybus.New[*memory.Tx](b.store, relaybus.Config{Now: b.clock.Now, RetryBaseDelay: time.Minute, RetryJitter: relaybus.Disabled})
	require.NoError(t, err)
	var sent []string
	fail := true
	require.NoError(t, bus.Handle("order.placed", "mailer", func(_ context.Context, d *relaybus.Delivery) error {
		sent = append(sent, d.Key)
		return nil
	}, nil))
	require.NoError(t, bus.Handle("order.placed", "charge", func(context.Context, *relaybus.Delivery) error {
		if fail {
			return errors.New("card service unavailable")
		}
		return nil
	}, nil))
	require.NoError(t, bus.Publish(t.Context(), &relaybus.Event{Type: "order.placed", Key: "customer-42"}))

	f := runTB(func(tb testing.TB) { relaybustest.Work(t.Context(), tb, bus, nil) })
	msg := f.message(t)
	require.Contains(t, msg, "relaybustest: Work: 1 of 2 deliveries did not complete")
	require.Contains(t, msg, `handler "charge", event order.placed key "customer-42"`)
	require.Contains(t, msg, "attempt 1: rescheduled: card service unavailable")
	require.Contains(t, msg, `handler "mailer", event order.placed key "customer-42"`)
	require.Contains(t, msg, "attempt 1: completed")
	require.Equal(t, []string{"customer-42"}, sent)

	res := relaybustest.Work(t.Context(), t, bus, &relaybustest.WorkOptions{AllowFailures: true})
	require.Empty(t, res.Worked, "the retry is not due yet")
	b.clock.Add(time.Minute)
	fail = false
	res = relaybustest.Work(t.Context(), t, bus, nil)
	require.Len(t, res.Worked, 1)
	require.Equal(t, 2, res.Worked[0].Delivery.Attempts)
}

// TestWorkLimit: the default limit reached fails the test (a handler
// that keeps publishing work for itself); a limit given does not.
func TestWorkLimit(t *testing.T) {
	t.Parallel()
	bus, err := relaybus.New[*memory.Tx](memory.New(nil), relaybus.Config{})
	require.NoError(t, err)
	require.NoError(t, bus.Handle("tick", "again", func(ctx context.Context, _ *relaybus.Delivery) error {
		return bus.Publish(ctx, &relaybus.Event{Type: "tick"})
	}, nil))
	require.NoError(t, bus.Publish(t.Context(), &relaybus.Event{Type: "tick"}))

	res := relaybustest.Work(t.Context(), t, bus, &relaybustest.WorkOptions{Limit: 3})
	require.Len(t, res.Worked, 3)
	require.True(t, res.LimitReached)

	f := runTB(func(tb testing.TB) { relaybustest.Work(t.Context(), tb, bus, nil) })
	msg := f.message(t)
	require.Contains(t, msg, fmt.Sprintf("stopped after relaybus.DefaultWorkLimit (%d) deliveries", relaybus.DefaultWorkLimit))
	require.Contains(t, msg, "and 950 more that completed")

	f = runTB(func(tb testing.TB) {
		relaybustest.Work(t.Context(), tb, bus, &relaybustest.WorkOptions{Handlers: []string{"nobody"}})
	})
	require.Contains(t, f.message(t), `relaybustest: Work: relaybus: work: handler "nobody" is not one this bus runs`)
}
