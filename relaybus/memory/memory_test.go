package memory_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/memory"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
	"github.com/berkcansavur/relaybus/relaybus/storetest"
)

// The store starts no goroutine; the suite does (racing claimers, the
// commit-order publish), and must not leak them either.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestStoreDeletesCompleted(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) driver.Store[*memory.Tx] {
		return memory.New(nil)
	}, nil)
}

func TestStoreRetainsCompleted(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) driver.Store[*memory.Tx] {
		return memory.New(&memory.Options{RetainCompleted: true})
	}, &storetest.Options{KeepsCompleted: true})
}

var t0 = storetest.T0

func publishParams(events ...*relaytype.Event) *driver.EventPublishParams {
	p := &driver.EventPublishParams{Now: t0}
	for _, ev := range events {
		p.Events = append(p.Events, &driver.EventPublish{Event: ev, Deliveries: []driver.DeliverySpec{{Handler: "h1", MaxAttempts: 3}}})
	}
	return p
}

func event(key string) *relaytype.Event {
	return &relaytype.Event{ID: storetest.NewEventID(), Type: "t", Key: key}
}

func publish(t *testing.T, s *memory.Store, events ...*relaytype.Event) *driver.EventPublishResult {
	t.Helper()
	ctx := t.Context()
	tx, err := s.TxBegin(ctx)
	require.NoError(t, err)
	res, err := s.EventPublishTx(ctx, tx, publishParams(events...))
	require.NoError(t, err)
	require.NoError(t, s.TxCommit(ctx, tx))
	return res
}

func claim(t *testing.T, s *memory.Store, owner string, now time.Time, limit int) []*relaytype.Delivery {
	t.Helper()
	ds, err := s.DeliveryClaim(t.Context(), &driver.DeliveryClaimParams{Owner: owner, Handlers: []string{"h1"}, Limit: limit, LeaseDuration: 30 * time.Second, Now: now})
	require.NoError(t, err)
	return ds
}

func TestTxMisuse(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := memory.New(nil)

	tx, err := s.TxBegin(ctx)
	require.NoError(t, err)
	require.NoError(t, s.TxCommit(ctx, tx))
	require.ErrorIs(t, s.TxCommit(ctx, tx), memory.ErrTxDone)
	require.ErrorIs(t, s.TxRollback(ctx, tx), memory.ErrTxDone)
	_, err = s.EventPublishTx(ctx, tx, publishParams(event("")))
	require.ErrorIs(t, err, memory.ErrTxDone)
	_, err = s.DeliveryCompleteTx(ctx, tx, &driver.DeliveryCompleteParams{Lease: relaytype.Lease{DeliveryID: "1", Token: "1:0:0"}, Now: t0})
	require.ErrorIs(t, err, memory.ErrTxDone)

	tx, err = s.TxBegin(ctx)
	require.NoError(t, err)
	require.NoError(t, s.TxRollback(ctx, tx))
	require.ErrorIs(t, s.TxCommit(ctx, tx), memory.ErrTxDone)

	require.Error(t, s.TxCommit(ctx, nil))
	require.Error(t, s.TxRollback(ctx, nil))
	_, err = s.EventPublishTx(ctx, nil, publishParams(event("")))
	require.Error(t, err)

	other := memory.New(nil)
	foreign, err := other.TxBegin(ctx)
	require.NoError(t, err)
	_, err = s.EventPublishTx(ctx, foreign, publishParams(event("")))
	require.Error(t, err, "a transaction of another store")
	require.Error(t, s.TxCommit(ctx, foreign))
	require.NoError(t, other.TxCommit(ctx, foreign), "the foreign tx is untouched")

	// A failed call does not end the transaction.
	tx, err = s.TxBegin(ctx)
	require.NoError(t, err)
	_, err = s.EventPublishTx(ctx, tx, &driver.EventPublishParams{Now: t0})
	require.ErrorIs(t, err, relaytype.ErrInvalid)
	_, err = s.EventPublishTx(ctx, tx, publishParams(event("")))
	require.NoError(t, err)
	require.NoError(t, s.TxCommit(ctx, tx))
	require.Len(t, claim(t, s, "a", t0, 10), 1)
}

func TestCompleteTxLeaseLostBeforeCommit(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := memory.New(nil)
	publish(t, s, event(""))
	d := claim(t, s, "a", t0, 1)[0]

	tx, err := s.TxBegin(ctx)
	require.NoError(t, err)
	follow := event("")
	_, err = s.EventPublishTx(ctx, tx, publishParams(follow))
	require.NoError(t, err)
	ok, err := s.DeliveryCompleteTx(ctx, tx, &driver.DeliveryCompleteParams{Lease: d.Lease(), Now: t0.Add(time.Second)})
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = s.DeliveryCompleteTx(ctx, tx, &driver.DeliveryCompleteParams{Lease: d.Lease(), Now: t0.Add(time.Second)})
	require.NoError(t, err)
	require.False(t, ok, "the same lease completed twice in one transaction")

	// The transaction holds the lane: a takeover after the lease expired
	// skips it (PostgreSQL's FOR KEY SHARE against FOR UPDATE SKIP LOCKED).
	require.Empty(t, claim(t, s, "b", t0.Add(31*time.Second), 10), "a takeover overtook an open transactional completion")

	// The holder's own release is not held back: the commit then finds
	// the lease gone and applies nothing.
	ok, err = s.DeliveryRelease(ctx, &driver.DeliveryReleaseParams{Lease: d.Lease(), Now: t0.Add(2 * time.Second)})
	require.NoError(t, err)
	require.True(t, ok)
	err = s.TxCommit(ctx, tx)
	require.ErrorIs(t, err, memory.ErrLeaseLost)
	require.ErrorIs(t, s.TxRollback(ctx, tx), memory.ErrTxDone, "a failed commit ends the transaction")

	list, err := s.DeliveryList(ctx, &driver.DeliveryListParams{})
	require.NoError(t, err)
	require.Len(t, list.Deliveries, 1, "the follow-up publish of the failed commit was applied")
	require.Equal(t, relaytype.StatusPending, list.Deliveries[0].Status)
	require.Zero(t, list.Deliveries[0].Attempts, "a release spends no attempt")

	// With the transaction over, the lane can be taken over again.
	taken := claim(t, s, "b", t0.Add(31*time.Second), 10)
	require.Len(t, taken, 1)
	require.Equal(t, d.ID, taken[0].ID)
}

func TestPublishResultFilledAtCommit(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := memory.New(nil)
	a, b := event("k"), event("k")

	tx1, err := s.TxBegin(ctx)
	require.NoError(t, err)
	res1, err := s.EventPublishTx(ctx, tx1, publishParams(a))
	require.NoError(t, err)
	require.Equal(t, []int64{0}, res1.Sequences, "a new keyed event has no sequence before commit")

	// A second transaction publishes the same event and another of the
	// key, and commits first.
	tx2, err := s.TxBegin(ctx)
	require.NoError(t, err)
	res2, err := s.EventPublishTx(ctx, tx2, publishParams(b, a))
	require.NoError(t, err)
	require.Equal(t, []bool{true, true}, res2.Inserted)
	require.NoError(t, s.TxCommit(ctx, tx2))
	require.Equal(t, []int64{1, 2}, res2.Sequences)

	require.NoError(t, s.TxCommit(ctx, tx1))
	require.Equal(t, []bool{false}, res1.Inserted, "tx2 committed the event first")
	require.Equal(t, []int64{2}, res1.Sequences, "the stored sequence")
	require.Zero(t, res1.Deliveries)

	// An event that exists reports its sequence before commit.
	tx3, err := s.TxBegin(ctx)
	require.NoError(t, err)
	res3, err := s.EventPublishTx(ctx, tx3, publishParams(a))
	require.NoError(t, err)
	require.Equal(t, []int64{2}, res3.Sequences)
	require.NoError(t, s.TxRollback(ctx, tx3))
}

func TestOptions(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	for _, bad := range []int{-1, driver.MaxPayloadBytesLimit + 1} {
		s := memory.New(&memory.Options{MaxPayloadBytes: bad})
		require.ErrorIs(t, s.Setup(ctx), relaytype.ErrInvalid, "MaxPayloadBytes %d", bad)
		tx, err := s.TxBegin(ctx)
		require.NoError(t, err)
		_, err = s.EventPublishTx(ctx, tx, publishParams(event("")))
		require.ErrorIs(t, err, relaytype.ErrInvalid)
	}

	big := event("")
	big.Payload = make([]byte, driver.DefaultMaxPayloadBytes+1)
	s := memory.New(nil)
	require.NoError(t, s.Setup(ctx))
	tx, err := s.TxBegin(ctx)
	require.NoError(t, err)
	_, err = s.EventPublishTx(ctx, tx, publishParams(big))
	require.ErrorIs(t, err, relaytype.ErrInvalid, "over the default payload limit")

	s = memory.New(&memory.Options{MaxPayloadBytes: 2 * driver.DefaultMaxPayloadBytes})
	publish(t, s, big)
}

func TestClaimOrderAndIDs(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := memory.New(nil)
	// Twelve deliveries: IDs "1" to "12", so text order ("10" < "9") and
	// number order differ.
	for range 12 {
		publish(t, s, event(""))
	}
	var got []string
	res := &driver.DeliveryListResult{}
	for {
		var err error
		res, err = s.DeliveryList(ctx, &driver.DeliveryListParams{Limit: 5, After: res.Next})
		require.NoError(t, err)
		got = append(got, ids(res.Deliveries)...)
		if res.Next == "" {
			break
		}
	}
	want := make([]string, 12)
	for i := range want {
		want[i] = strconv.Itoa(i + 1)
	}
	require.Equal(t, want, got, "listed in numeric ID order")

	for _, bad := range []string{"abc", "007", "-1", "0"} {
		_, err := s.DeliveryList(ctx, &driver.DeliveryListParams{After: bad})
		require.ErrorIs(t, err, relaytype.ErrInvalid, "cursor %q", bad)
	}

	// Claims go by AvailableAt, then ID: delivery 12 is rescheduled to be
	// due first.
	ds := claim(t, s, "a", t0, 12)
	require.Equal(t, want, ids(ds), "claimed in ID order")
	var last *relaytype.Delivery
	for _, d := range ds {
		if d.ID == "12" {
			last = d
			continue
		}
		ok, err := s.DeliveryReschedule(ctx, &driver.DeliveryRescheduleParams{Lease: d.Lease(), AvailableAt: t0.Add(2 * time.Second), Now: t0})
		require.NoError(t, err)
		require.True(t, ok)
	}
	ok, err := s.DeliveryReschedule(ctx, &driver.DeliveryRescheduleParams{Lease: last.Lease(), AvailableAt: t0.Add(time.Second), Now: t0})
	require.NoError(t, err)
	require.True(t, ok)
	ds = claim(t, s, "a", t0.Add(5*time.Second), 3)
	require.Equal(t, []string{"12", "1", "2"}, ids(ds))

	_, err = s.DeliveryComplete(ctx, &driver.DeliveryCompleteParams{Lease: relaytype.Lease{DeliveryID: "007", Token: ds[0].LeaseToken}, Now: t0})
	require.ErrorIs(t, err, relaytype.ErrInvalid, "a non-canonical ID is not this store's")
	require.Len(t, claim(t, s, "a", t0.Add(5*time.Second), 12), 9, "the rejected completion changed nothing")
}

func TestTakeoverBuryReason(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := memory.New(nil)
	publish(t, s, event(""))
	now := t0
	for range 3 {
		d := claim(t, s, "a", now, 1)
		require.Len(t, d, 1)
		now = now.Add(time.Minute)
	}
	require.Empty(t, claim(t, s, "a", now, 1))
	res, err := s.DeliveryList(ctx, &driver.DeliveryListParams{Status: relaytype.StatusDead})
	require.NoError(t, err)
	require.Len(t, res.Deliveries, 1)
	require.Equal(t, "lease expired after the final attempt", res.Deliveries[0].LastError)
	require.Equal(t, 3, res.Deliveries[0].Attempts)
}

func TestCancelledContext(t *testing.T) {
	t.Parallel()
	s := memory.New(nil)
	publish(t, s, event(""))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := s.DeliveryClaim(ctx, &driver.DeliveryClaimParams{Owner: "a", Handlers: []string{"h1"}, Limit: 1, LeaseDuration: time.Second, Now: t0})
	require.True(t, errors.Is(err, context.Canceled), "claim: %v", err)
	_, err = s.TxBegin(ctx)
	require.ErrorIs(t, err, context.Canceled)
	require.Len(t, claim(t, s, "a", t0, 1), 1, "the cancelled claim took nothing")
}

func ids(ds []*relaytype.Delivery) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.ID
	}
	return out
}
