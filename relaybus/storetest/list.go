package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

// mixedStatuses publishes deliveries in every status and returns them by
// name: "a/h1" processing, "a/h2" pending, "b/h1" completed (or gone),
// "c/h2" pending, "d/h1" dead. Event a has key "ka", b "kb", c and d none.
func mixedStatuses[TTx any](e *env[TTx]) map[string]*relaytype.Delivery {
	e.t.Helper()
	a, _ := e.publish(&eventOpts{Key: Ptr("ka"), Handlers: []string{"h1", "h2"}})
	b, _ := e.publish(&eventOpts{Key: Ptr("kb"), Handlers: []string{"h1"}})
	c, _ := e.publish(&eventOpts{Handlers: []string{"h2"}})
	d, _ := e.publish(&eventOpts{Handlers: []string{"h1"}})
	out := map[string]*relaytype.Delivery{
		"a/h2": e.deliveryOf(a.ID, "h2"),
		"c/h2": e.deliveryOf(c.ID, "h2"),
	}
	for _, got := range e.claim(&claimOpts{Handlers: []string{"h1"}}) {
		switch got.EventID {
		case a.ID:
			out["a/h1"] = got
		case b.ID:
			out["b/h1"] = got
			require.True(e.t, e.complete(got.Lease(), At(time.Second)))
		case d.ID:
			out["d/h1"] = got
			require.True(e.t, e.bury(got.Lease(), At(time.Second), "dead"))
		}
	}
	require.Len(e.t, out, 5, "claimed h1 deliveries")
	return out
}

func testList[TTx any](t *testing.T, newEnv func(*testing.T) *env[TTx]) {
	t.Run("Filters", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		m := mixedStatuses(e)
		idsOf := func(names ...string) []string {
			var out []string
			for _, n := range names {
				if n == "b/h1" && !e.opts.KeepsCompleted {
					continue
				}
				out = append(out, m[n].ID)
			}
			return out
		}
		cases := []struct {
			name string
			p    driver.DeliveryListParams
			want []string
		}{
			{"all", driver.DeliveryListParams{}, idsOf("a/h1", "a/h2", "b/h1", "c/h2", "d/h1")},
			{"pending", driver.DeliveryListParams{Status: relaytype.StatusPending}, idsOf("a/h2", "c/h2")},
			{"processing", driver.DeliveryListParams{Status: relaytype.StatusProcessing}, idsOf("a/h1")},
			{"completed", driver.DeliveryListParams{Status: relaytype.StatusCompleted}, idsOf("b/h1")},
			{"dead", driver.DeliveryListParams{Status: relaytype.StatusDead}, idsOf("d/h1")},
			{"handler", driver.DeliveryListParams{Handler: "h1"}, idsOf("a/h1", "b/h1", "d/h1")},
			{"key", driver.DeliveryListParams{Key: "ka"}, idsOf("a/h1", "a/h2")},
			{"event", driver.DeliveryListParams{EventID: m["c/h2"].EventID}, idsOf("c/h2")},
			{"handler and key", driver.DeliveryListParams{Handler: "h2", Key: "ka"}, idsOf("a/h2")},
			{"status and handler", driver.DeliveryListParams{Status: relaytype.StatusPending, Handler: "h1"}, nil},
			{"unknown handler", driver.DeliveryListParams{Handler: "nobody"}, nil},
		}
		for _, c := range cases {
			got := e.list(c.p)
			require.ElementsMatch(t, c.want, ids(got), c.name)
			for _, d := range got {
				if c.p.Status != "" {
					require.Equal(t, c.p.Status, d.Status, c.name)
				}
			}
		}
		got := e.get(m["d/h1"])
		require.Equal(t, "dead", got.LastError)
	})

	t.Run("Paging", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		var events []*driver.EventPublish
		for range 25 {
			events = append(events, (&eventOpts{Handlers: []string{"h1", "h2"}}).publish())
		}
		e.publishTx(&driver.EventPublishParams{Events: events, Now: T0})
		all := ids(e.list(driver.DeliveryListParams{}))
		require.Len(t, all, 50)
		for _, filter := range []driver.DeliveryListParams{{}, {Handler: "h2"}} {
			want := ids(e.list(filter))
			p := filter
			p.Limit = 7
			var got []string
			var sizes []int
			for page := 0; ; page++ {
				require.Less(t, page, 20, "paging does not end")
				res, err := e.s.DeliveryList(e.ctx, &p)
				require.NoError(t, err)
				got = append(got, ids(res.Deliveries)...)
				sizes = append(sizes, len(res.Deliveries))
				if res.Next == "" {
					break
				}
				p.After = res.Next
			}
			require.Equal(t, want, got, "pages in order cover every delivery exactly once (filter %+v)", filter)
			wantSizes := []int{7, 7, 7, 7, 7, 7, 7, 1}
			if filter.Handler != "" {
				wantSizes = []int{7, 7, 7, 4}
			}
			require.Equal(t, wantSizes, sizes, "page sizes; Next is empty on the last page")
		}
	})

	t.Run("DefaultLimit", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		var events []*driver.EventPublish
		for range driver.DefaultListLimit + 1 {
			events = append(events, (&eventOpts{}).publish())
		}
		e.publishTx(&driver.EventPublishParams{Events: events, Now: T0})
		res, err := e.s.DeliveryList(e.ctx, &driver.DeliveryListParams{})
		require.NoError(t, err)
		require.Len(t, res.Deliveries, driver.DefaultListLimit)
		require.NotEmpty(t, res.Next)
		res, err = e.s.DeliveryList(e.ctx, &driver.DeliveryListParams{After: res.Next})
		require.NoError(t, err)
		require.Len(t, res.Deliveries, 1)
		require.Empty(t, res.Next)
	})

	t.Run("InvalidParams", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		for _, c := range []struct {
			name string
			p    *driver.DeliveryListParams
		}{
			{"nil", nil},
			{"negative limit", &driver.DeliveryListParams{Limit: -1}},
			{"limit over max", &driver.DeliveryListParams{Limit: driver.MaxListLimit + 1}},
			{"unknown status", &driver.DeliveryListParams{Status: "sleeping"}},
			{"a cursor the store never returned", &driver.DeliveryListParams{After: "not-a-cursor\x00"}},
		} {
			_, err := e.s.DeliveryList(e.ctx, c.p)
			requireInvalid(t, err, c.name)
		}
		_, err := e.s.Statistics(e.ctx, &driver.StatisticsParams{})
		requireInvalid(t, err, "statistics without now")
	})

	t.Run("Statistics", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		mixedStatuses(e)
		st := e.stats(At(time.Minute))
		require.Equal(t, relaytype.Counts{Pending: 2, Processing: 1, Completed: e.completedCount(1), Dead: 1, OldestDueAge: time.Minute}, st.Counts,
			"pending since T0")
		want := map[string]relaytype.Counts{
			"h1": {Processing: 1, Completed: e.completedCount(1), Dead: 1},
			"h2": {Pending: 2, OldestDueAge: time.Minute},
		}
		require.Equal(t, want, st.Handlers)
	})

	t.Run("OldestDueAge", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		require.Zero(t, e.stats(T0).OldestDueAge, "empty store")
		e.publish(&eventOpts{Now: Ptr(At(10 * time.Second))})
		e.publish(&eventOpts{Now: Ptr(At(30 * time.Second))})
		e.publish(&eventOpts{Now: Ptr(At(500 * time.Second))}) // not due at 90s
		require.Equal(t, 80*time.Second, e.stats(At(90*time.Second)).OldestDueAge)
		require.Zero(t, e.stats(At(5*time.Second)).OldestDueAge, "nothing is due yet")

		// A claimed delivery is not waiting any more.
		d := e.claimOne(&claimOpts{Limit: Ptr(1), Now: Ptr(At(20 * time.Second))})
		require.Equal(t, 60*time.Second, e.stats(At(90*time.Second)).OldestDueAge)
		// Rescheduled into the future, it is not due.
		require.True(t, e.reschedule(d.Lease(), At(1000*time.Second), At(21*time.Second), "later"))
		require.Equal(t, 60*time.Second, e.stats(At(90*time.Second)).OldestDueAge)
	})

	t.Run("OldestDueAgePerHandler", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.publish(&eventOpts{Now: Ptr(At(10 * time.Second)), Handlers: []string{"h1"}})
		e.publish(&eventOpts{Now: Ptr(At(30 * time.Second)), Handlers: []string{"h1", "h2"}})
		e.publish(&eventOpts{Now: Ptr(At(50 * time.Second)), Handlers: []string{"h3"}})
		e.publish(&eventOpts{Now: Ptr(At(500 * time.Second)), Handlers: []string{"h4"}}) // not due at 90s
		st := e.stats(At(90 * time.Second))
		require.Equal(t, 80*time.Second, st.OldestDueAge, "the oldest of all")
		ages := map[string]time.Duration{}
		for h, c := range st.Handlers {
			ages[h] = c.OldestDueAge
		}
		require.Equal(t, map[string]time.Duration{"h1": 80 * time.Second, "h2": 60 * time.Second, "h3": 40 * time.Second, "h4": 0}, ages)
		// h1's oldest claimed: its next is its oldest waiting; h2's
		// unchanged. The claim is made at 20s, when h1's oldest is its
		// only due delivery: a store need not claim unkeyed deliveries
		// oldest first across its lanes (PostgreSQL takes any of several
		// lanes with due work), so a later claim of one could take h1's
		// second instead.
		d := e.claimOne(&claimOpts{Limit: Ptr(1), Now: Ptr(At(20 * time.Second))})
		requireTime(t, At(10*time.Second), d.EventCreatedAt, "h1's oldest, published at 10s")
		st = e.stats(At(90 * time.Second))
		require.Equal(t, 60*time.Second, st.Handlers["h1"].OldestDueAge)
		require.Equal(t, 60*time.Second, st.Handlers["h2"].OldestDueAge)
		require.Equal(t, 60*time.Second, st.OldestDueAge)
	})

	t.Run("OldestDueAgeKeyed", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		// Two keys; the heads are claimed. A key's delivery behind its
		// running head is due (if blocked), an in-flight one is not
		// waiting, and the oldest of all is in flight.
		e.publish(&eventOpts{Key: Ptr("k1"), Now: Ptr(At(10 * time.Second))})
		e.publish(&eventOpts{Key: Ptr("k1"), Now: Ptr(At(20 * time.Second))})
		e.publish(&eventOpts{Key: Ptr("k2"), Now: Ptr(At(30 * time.Second))})
		e.publish(&eventOpts{Now: Ptr(At(40 * time.Second))})
		require.Equal(t, 80*time.Second, e.stats(At(90*time.Second)).OldestDueAge, "nothing claimed: k1's head")
		heads := e.claim(&claimOpts{Now: Ptr(At(45 * time.Second))})
		require.Len(t, heads, 3, "both heads and the unkeyed one")
		require.Equal(t, 70*time.Second, e.stats(At(90*time.Second)).OldestDueAge, "k1's second, behind its running head")
		st := e.stats(At(90 * time.Second))
		require.Equal(t, relaytype.Counts{Pending: 1, Processing: 3, OldestDueAge: 70 * time.Second}, st.Counts)
		require.Equal(t, 70*time.Second, st.Handlers["h1"].OldestDueAge)
		for _, d := range heads {
			require.True(t, e.complete(d.Lease(), At(50*time.Second)))
		}
		require.Equal(t, 70*time.Second, e.stats(At(90*time.Second)).OldestDueAge, "still pending, now the head")
	})
}
