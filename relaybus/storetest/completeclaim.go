package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

// testCompleteClaim checks DeliveryCompleteClaim (driver.CompletingClaimer),
// for a store that offers it: its completions are DeliveryCompleteMany's
// (fenced, one result per lease, a delivery named twice completed once),
// its claim is DeliveryClaim's, and the claim sees what the completions
// did: the next delivery of a key whose delivery the call completed is
// claimed by the same call. A store without it skips the area.
func testCompleteClaim[TTx any](t *testing.T, newEnv func(*testing.T) *env[TTx]) {
	// completeClaim completes ls and claims with o in one call.
	completeClaim := func(e *env[TTx], now time.Time, o *claimOpts, ls ...relaytype.Lease) *driver.DeliveryCompleteClaimResult {
		e.t.Helper()
		p := o.params()
		res, err := e.s.(driver.CompletingClaimer).DeliveryCompleteClaim(e.ctx, &driver.DeliveryCompleteClaimParams{
			Complete: driver.DeliveryCompleteManyParams{Leases: ls, Now: now}, Claim: *p})
		require.NoError(e.t, err)
		require.NotNil(e.t, res)
		require.Len(e.t, res.Completed, len(ls), "complete and claim: one result per lease")
		require.LessOrEqual(e.t, len(res.Claimed), p.Limit, "complete and claim returned more than its limit")
		for _, d := range res.Claimed {
			require.Equal(e.t, relaytype.StatusProcessing, d.Status, "claimed delivery %s", d.ID)
			require.Equal(e.t, p.Owner, d.LeaseOwner, "claimed delivery %s", d.ID)
			require.NotEmpty(e.t, d.LeaseToken, "claimed delivery %s", d.ID)
		}
		return res
	}
	skip := func(t *testing.T, e *env[TTx]) {
		if !driver.ClaimsCompletions(e.s) {
			t.Skip("the store does not complete and claim in one call (driver.CompletingClaimer): nothing to check")
		}
	}

	t.Run("FreesTheKeyForItsOwnClaim", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		skip(t, e)
		e.publishN(3, &eventOpts{Key: Ptr("k")})
		first := e.claimOne(nil)
		require.EqualValues(t, 1, first.Sequence)
		now := At(time.Second)
		res := completeClaim(e, now, &claimOpts{Now: &now, Busy: true}, first.Lease())
		require.Equal(t, []bool{true}, res.Completed)
		e.requireCompleted(first, now)
		require.Len(t, res.Claimed, 1, "the claim did not see the key freed by the completion in the same call")
		require.Equal(t, "k", res.Claimed[0].Key)
		require.EqualValues(t, 2, res.Claimed[0].Sequence, "the key's next delivery")
		// The call's claim holds like any other: the key's third waits.
		e.claimNone(&claimOpts{Now: &now, Busy: true}, "the key's third delivery was handed out while its second runs")
		require.True(t, e.complete(res.Claimed[0].Lease(), now), "the delivery claimed by complete and claim was not held")
	})

	t.Run("FencedAsCompleteMany", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		skip(t, e)
		e.publishN(2, nil)
		ds := e.claim(nil)
		require.Len(t, ds, 2)
		now := At(time.Second)
		res := completeClaim(e, now, &claimOpts{Now: &now, Busy: true},
			staleToken(t, ds[0]), ds[1].Lease(), ds[1].Lease())
		require.Equal(t, []bool{false, true, false}, res.Completed, "a stale lease, a current one, the current one again")
		require.Empty(t, res.Claimed)
		e.requireCompleted(ds[1], now)
		got := e.get(ds[0])
		require.Equal(t, ds[0].LeaseToken, got.LeaseToken, "a stale completion changed the delivery")
		require.True(t, e.complete(ds[0].Lease(), now), "the delivery a stale lease named is still held")
	})

	t.Run("CompletesWhenItClaimsNothing", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		skip(t, e)
		e.publishN(1, nil)
		d := e.claimOne(nil)
		now := At(time.Second)
		res := completeClaim(e, now, &claimOpts{Now: &now}, d.Lease())
		require.Equal(t, []bool{true}, res.Completed)
		require.Empty(t, res.Claimed)
		e.requireCompleted(d, now)
		require.EqualValues(t, e.completedCount(1), e.stats(now).Completed)
	})

	t.Run("InvalidWritesNothing", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		skip(t, e)
		e.publishN(2, nil)
		d := e.claim(&claimOpts{Limit: Ptr(1)})[0]
		now := At(time.Second)
		cc := e.s.(driver.CompletingClaimer)
		good := (&claimOpts{Now: &now}).params()
		bad := *good
		bad.Limit = 0
		for name, p := range map[string]*driver.DeliveryCompleteClaimParams{
			"no leases":          {Complete: driver.DeliveryCompleteManyParams{Now: now}, Claim: *good},
			"a malformed lease":  {Complete: driver.DeliveryCompleteManyParams{Leases: []relaytype.Lease{{DeliveryID: d.ID, Token: "nonsense"}}, Now: now}, Claim: *good},
			"a claim limit of 0": {Complete: driver.DeliveryCompleteManyParams{Leases: []relaytype.Lease{d.Lease()}, Now: now}, Claim: bad},
		} {
			_, err := cc.DeliveryCompleteClaim(e.ctx, p)
			requireInvalid(t, err, "complete and claim with "+name)
		}
		_, err := cc.DeliveryCompleteClaim(e.ctx, nil)
		requireInvalid(t, err, "complete and claim with nil params")
		require.True(t, e.complete(d.Lease(), now), "an invalid call completed the delivery")
		e.claimOne(&claimOpts{Now: &now})
	})
}
