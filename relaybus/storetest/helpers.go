package storetest

// The suite's steps: publishing, claiming and every lease write with
// its checks, listing, and the assertions the tests share.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

// eventOpts are the options of publish. Unset fields take defaults.
type eventOpts struct {
	ID          *string           // default: NewEventID()
	Type        *string           // default: "order.created"
	Key         *string           // default: unkeyed
	Payload     []byte            // default: `{"n":1}`
	Headers     map[string]string // default: none
	CreatedAt   *time.Time        // default: zero (the store stamps Now)
	Handlers    []string          // default: {"h1"}
	MaxAttempts *int              // default: 5
	Now         *time.Time        // default: T0
	DeliverAt   *time.Time        // default: zero (at once)
	// Lane, for an unkeyed event without an ID: the lane its deliveries
	// live in. Default: env.publish gives it a lane of its own; a bare
	// eventOpts.publish any lane.
	Lane *int
}

const defaultMaxAttempts = 5

func (o *eventOpts) publish() *driver.EventPublish {
	if o == nil {
		o = &eventOpts{}
	}
	ev := &relaytype.Event{Type: "order.created", Payload: []byte(`{"n":1}`), Headers: o.Headers}
	switch {
	case o.ID != nil:
		ev.ID = *o.ID
	case o.Lane != nil && o.Key == nil:
		ev.ID = IDInLane(*o.Lane)
	default:
		ev.ID = NewEventID()
	}
	if o.Type != nil {
		ev.Type = *o.Type
	}
	if o.Key != nil {
		ev.Key = *o.Key
	}
	if o.Payload != nil {
		ev.Payload = o.Payload
	}
	if o.CreatedAt != nil {
		ev.CreatedAt = *o.CreatedAt
	}
	if o.DeliverAt != nil {
		ev.DeliverAt = *o.DeliverAt
	}
	handlers := o.Handlers
	if handlers == nil {
		handlers = []string{"h1"}
	}
	maxAttempts := defaultMaxAttempts
	if o.MaxAttempts != nil {
		maxAttempts = *o.MaxAttempts
	}
	ep := &driver.EventPublish{Event: ev}
	for _, h := range handlers {
		ep.Deliveries = append(ep.Deliveries, driver.DeliverySpec{Handler: h, MaxAttempts: maxAttempts})
	}
	return ep
}

func (o *eventOpts) now() time.Time {
	if o != nil && o.Now != nil {
		return *o.Now
	}
	return T0
}

// publish publishes one event in a transaction of its own and commits.
// An unkeyed event without an ID or Lane gets a lane of its own.
func (e *env[TTx]) publish(o *eventOpts) (*relaytype.Event, *driver.EventPublishResult) {
	e.t.Helper()
	if o == nil {
		o = &eventOpts{}
	}
	if o.ID == nil && o.Key == nil && o.Lane == nil {
		c := *o
		c.Lane = Ptr(e.freshLane())
		o = &c
	}
	ep := o.publish()
	e.usedLanes[driver.LaneOf(ep.Event.Key, ep.Event.ID)] = true
	res := e.publishTx(&driver.EventPublishParams{Events: []*driver.EventPublish{ep}, Now: o.now()})
	return ep.Event, res
}

// publishN publishes n events like publish, each its own call.
func (e *env[TTx]) publishN(n int, o *eventOpts) []*relaytype.Event {
	e.t.Helper()
	out := make([]*relaytype.Event, n)
	for i := range n {
		out[i], _ = e.publish(o)
	}
	return out
}

// begin starts a transaction that is rolled back when the test ends, so
// a failing test never leaves one open (a database store could not drop
// its schema). Rolling back a finished transaction is an error that
// cleanup ignores.
func (e *env[TTx]) begin() TTx {
	e.t.Helper()
	tx, err := e.s.TxBegin(e.ctx)
	require.NoError(e.t, err)
	e.t.Cleanup(func() { _ = e.s.TxRollback(context.Background(), tx) })
	return tx
}

// publishTx runs params in a transaction of its own and commits.
func (e *env[TTx]) publishTx(params *driver.EventPublishParams) *driver.EventPublishResult {
	e.t.Helper()
	tx := e.begin()
	res, err := e.s.EventPublishTx(e.ctx, tx, params)
	if err != nil {
		_ = e.s.TxRollback(e.ctx, tx)
		require.NoError(e.t, err)
	}
	require.NoError(e.t, e.s.TxCommit(e.ctx, tx))
	return res
}

// claimOpts are the options of claim. Unset fields take defaults.
type claimOpts struct {
	Owner    *string         // default: "owner-a"
	Handlers []string        // default: {"h1"}
	Limit    *int            // default: 100
	Lease    *time.Duration  // default: 30s
	Now      *time.Time      // default: T0
	Busy     bool            // default: false
	KeyRuns  []driver.KeyRun // default: none
}

const defaultLease = 30 * time.Second

func (o *claimOpts) params() *driver.DeliveryClaimParams {
	if o == nil {
		o = &claimOpts{}
	}
	p := &driver.DeliveryClaimParams{Owner: "owner-a", Handlers: o.Handlers, Limit: 100, LeaseDuration: defaultLease, Now: T0, Busy: o.Busy, KeyRuns: o.KeyRuns}
	if o.Owner != nil {
		p.Owner = *o.Owner
	}
	if p.Handlers == nil {
		p.Handlers = []string{"h1"}
	}
	if o.Limit != nil {
		p.Limit = *o.Limit
	}
	if o.Lease != nil {
		p.LeaseDuration = *o.Lease
	}
	if o.Now != nil {
		p.Now = *o.Now
	}
	return p
}

// claim claims with o and checks what every claim must hold.
func (e *env[TTx]) claim(o *claimOpts) []*relaytype.Delivery {
	e.t.Helper()
	p := o.params()
	ds, err := e.s.DeliveryClaim(e.ctx, p)
	require.NoError(e.t, err)
	require.LessOrEqual(e.t, len(ds), p.Limit, "claim returned more than its limit")
	seen := make(map[string]bool, len(ds))
	for _, d := range ds {
		require.False(e.t, seen[d.ID], "claim returned delivery %s twice", d.ID)
		seen[d.ID] = true
		require.Equal(e.t, relaytype.StatusProcessing, d.Status, "claimed delivery %s", d.ID)
		require.Equal(e.t, p.Owner, d.LeaseOwner, "claimed delivery %s", d.ID)
		require.NotEmpty(e.t, d.LeaseToken, "claimed delivery %s", d.ID)
		requireTime(e.t, p.Now.Add(p.LeaseDuration), d.LeaseExpiresAt, "lease expiry of delivery %s", d.ID)
		require.Contains(e.t, p.Handlers, d.Handler, "claimed delivery %s", d.ID)
		tok, err := driver.ParseLaneToken(d.LeaseToken)
		require.NoError(e.t, err, "the token of delivery %s is not lane:epoch:claims", d.ID)
		require.Equal(e.t, driver.LaneOf(d.Key, d.EventID), tok.Lane, "the token of delivery %s names another lane than LaneOf", d.ID)
		require.Equal(e.t, tok.Epoch, d.FencingToken, "the fencing token of delivery %s is not its lane's epoch", d.ID)
		require.Positive(e.t, d.FencingToken, "the fencing token of claimed delivery %s", d.ID)
	}
	if p.Busy {
		for _, d := range ds {
			require.False(e.t, d.Suspect, "a busy claim returned suspect %s", d.ID)
		}
	}
	if len(ds) > 1 {
		for _, d := range ds {
			require.False(e.t, d.Suspect, "claim returned suspect %s with %d others: a suspect is claimed alone", d.ID, len(ds)-1)
		}
	}
	return ds
}

// staleToken returns a well-formed lease of d that is not current: the
// same lane and epoch, the claims counter one further. Every write under
// it must report false and change nothing.
func staleToken(t *testing.T, d *relaytype.Delivery) relaytype.Lease {
	t.Helper()
	tok, err := driver.ParseLaneToken(d.LeaseToken)
	require.NoError(t, err)
	tok.Claims++
	return relaytype.Lease{DeliveryID: d.ID, Token: tok.String()}
}

// malformedTokens are tokens no lane-lease store hands out: each is an
// ErrInvalid error, and the call writes nothing.
var malformedTokens = []string{
	"x",
	"0123456789abcdef0123456789abcdef", // a 0.1.0 token
	"1:2",
	"1:2:3:4",
	"256:0:0", // lane out of range
	"-1:0:0",
	"01:0:0",
	" 1:0:0",
	"1:0:99999999999999999999", // overflows int64
}

// claimOne claims and requires exactly one delivery.
func (e *env[TTx]) claimOne(o *claimOpts) *relaytype.Delivery {
	e.t.Helper()
	ds := e.claim(o)
	require.Len(e.t, ds, 1, "claim")
	return ds[0]
}

// claimNone claims and requires nothing.
func (e *env[TTx]) claimNone(o *claimOpts, msgAndArgs ...any) {
	e.t.Helper()
	ds := e.claim(o)
	require.Empty(e.t, ds, msgAndArgs...)
}

func (e *env[TTx]) complete(l relaytype.Lease, now time.Time) bool {
	e.t.Helper()
	ok, err := e.s.DeliveryComplete(e.ctx, &driver.DeliveryCompleteParams{Lease: l, Now: now})
	require.NoError(e.t, err)
	return ok
}

func (e *env[TTx]) completeMany(now time.Time, ls ...relaytype.Lease) []bool {
	e.t.Helper()
	ok, err := e.s.DeliveryCompleteMany(e.ctx, &driver.DeliveryCompleteManyParams{Leases: ls, Now: now})
	require.NoError(e.t, err)
	require.Len(e.t, ok, len(ls), "complete many results")
	return ok
}

func (e *env[TTx]) reschedule(l relaytype.Lease, availableAt, now time.Time, msg string) bool {
	e.t.Helper()
	ok, err := e.s.DeliveryReschedule(e.ctx, &driver.DeliveryRescheduleParams{Lease: l, Error: msg, AvailableAt: availableAt, Now: now})
	require.NoError(e.t, err)
	return ok
}

func (e *env[TTx]) bury(l relaytype.Lease, now time.Time, msg string) bool {
	e.t.Helper()
	ok, err := e.s.DeliveryBury(e.ctx, &driver.DeliveryBuryParams{Lease: l, Error: msg, Now: now})
	require.NoError(e.t, err)
	return ok
}

func (e *env[TTx]) release(l relaytype.Lease, now time.Time) bool {
	e.t.Helper()
	ok, err := e.s.DeliveryRelease(e.ctx, &driver.DeliveryReleaseParams{Lease: l, Now: now})
	require.NoError(e.t, err)
	return ok
}

func (e *env[TTx]) extend(owner string, expiresAt, now time.Time, leases ...relaytype.Lease) []bool {
	e.t.Helper()
	ok, err := e.s.LeaseExtend(e.ctx, &driver.LeaseExtendParams{Owner: owner, Leases: leases, ExpiresAt: expiresAt, Now: now})
	require.NoError(e.t, err)
	require.Len(e.t, ok, len(leases), "extend results")
	return ok
}

// list returns every delivery matching p, following all pages.
func (e *env[TTx]) list(p driver.DeliveryListParams) []*relaytype.Delivery {
	e.t.Helper()
	p.Limit = driver.MaxListLimit
	p.After = ""
	var out []*relaytype.Delivery
	for range 1000 {
		res, err := e.s.DeliveryList(e.ctx, &p)
		require.NoError(e.t, err)
		out = append(out, res.Deliveries...)
		if res.Next == "" {
			return out
		}
		p.After = res.Next
	}
	e.t.Fatal("list: more than 1000 pages")
	return nil
}

// find returns the stored delivery d (by ID), or nil when it is gone.
func (e *env[TTx]) find(d *relaytype.Delivery) *relaytype.Delivery {
	e.t.Helper()
	for _, got := range e.list(driver.DeliveryListParams{EventID: d.EventID, Handler: d.Handler}) {
		if got.ID == d.ID {
			return got
		}
	}
	return nil
}

// get is find that requires the delivery to exist.
func (e *env[TTx]) get(d *relaytype.Delivery) *relaytype.Delivery {
	e.t.Helper()
	got := e.find(d)
	require.NotNil(e.t, got, "delivery %s (event %s, handler %s) is gone", d.ID, d.EventID, d.Handler)
	return got
}

// deliveryOf returns the only delivery of an event for handler.
func (e *env[TTx]) deliveryOf(eventID, handler string) *relaytype.Delivery {
	e.t.Helper()
	ds := e.list(driver.DeliveryListParams{EventID: eventID, Handler: handler})
	require.Len(e.t, ds, 1, "deliveries of event %s for handler %s", eventID, handler)
	return ds[0]
}

// requireCompleted checks that d was completed at now: gone, or status
// completed when the store keeps completed deliveries.
func (e *env[TTx]) requireCompleted(d *relaytype.Delivery, now time.Time) {
	e.t.Helper()
	got := e.find(d)
	if !e.opts.KeepsCompleted {
		require.Nil(e.t, got, "delivery %s should be deleted on completion", d.ID)
		return
	}
	require.NotNil(e.t, got, "completed delivery %s is gone, but Options.KeepsCompleted is set", d.ID)
	require.Equal(e.t, relaytype.StatusCompleted, got.Status, "delivery %s", d.ID)
	requireTime(e.t, now, got.CompletedAt, "CompletedAt of delivery %s", d.ID)
	require.Empty(e.t, got.LeaseToken, "completed delivery %s", d.ID)
}

// completedCount is the Completed count expected after n completions.
func (e *env[TTx]) completedCount(n int64) int64 {
	if !e.opts.KeepsCompleted {
		return 0
	}
	return n
}

func (e *env[TTx]) stats(now time.Time) *relaytype.Statistics {
	e.t.Helper()
	st, err := e.s.Statistics(e.ctx, &driver.StatisticsParams{Now: now})
	require.NoError(e.t, err)
	return st
}

// requireTime compares instants (stores may return another location).
func requireTime(t *testing.T, want, got time.Time, msgAndArgs ...any) {
	t.Helper()
	if !want.Equal(got) {
		require.Fail(t, fmt.Sprintf("time: want %v, got %v", want, got), msgAndArgs...)
	}
}

// requireInvalid checks that err wraps relaytype.ErrInvalid.
func requireInvalid(t *testing.T, err error, what string) {
	t.Helper()
	require.Error(t, err, "%s: want an ErrInvalid error", what)
	require.True(t, errors.Is(err, relaytype.ErrInvalid), "%s: want an ErrInvalid error, got %v", what, err)
}

// ids returns the IDs of ds.
func ids(ds []*relaytype.Delivery) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.ID
	}
	return out
}

// sameIDs requires want and got to hold the same IDs, in any order.
func sameIDs(t *testing.T, want, got []string, msgAndArgs ...any) {
	t.Helper()
	require.ElementsMatch(t, want, got, msgAndArgs...)
}

// leases returns the leases of ds.
func leases(ds []*relaytype.Delivery) []relaytype.Lease {
	out := make([]relaytype.Lease, len(ds))
	for i, d := range ds {
		out[i] = d.Lease()
	}
	return out
}

// eventIDs returns the event IDs of ds, in order.
func eventIDs(ds []*relaytype.Delivery) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.EventID
	}
	return out
}

// samePayload compares payloads, treating nil and empty alike (a store
// may read back either).
func samePayload(want, got []byte) bool { return bytes.Equal(want, got) }

// sameHeaders compares headers, treating nil and empty alike.
func sameHeaders(want, got map[string]string) bool {
	if len(want) != len(got) {
		return false
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			return false
		}
	}
	return true
}
