package postgres_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

// TestScanRowsShareNothing: the rows of one result set are scanned into
// one scratch row, so a NULL column of a row must not show the value the
// row before it had. Events alternate with and without a key and
// headers, and some are claimed (their owner, epoch and expiry set)
// beside others that are not; a claim and a list, each one result set,
// read them.
func TestScanRowsShareNothing(t *testing.T) {
	t.Parallel()
	s, _ := setup(t, nil)
	ctx := t.Context()
	const n = 6
	var eps []*driver.EventPublish
	for i := range n {
		e := &relaytype.Event{ID: fmt.Sprint("e", i), Type: "t"}
		if i%2 == 0 {
			e.Key = fmt.Sprint("k", i)
			e.Headers = map[string]string{"h": fmt.Sprint(i)}
		}
		eps = append(eps, &driver.EventPublish{Event: e, Deliveries: []driver.DeliverySpec{{Handler: "a", MaxAttempts: 3}}})
	}
	_, err := s.EventPublish(ctx, &driver.EventPublishParams{Events: eps, Now: t0})
	require.NoError(t, err)

	check := func(what string, ds []*relaytype.Delivery, claimed map[string]bool) {
		t.Helper()
		for _, d := range ds {
			var i int
			_, err := fmt.Sscanf(d.EventID, "e%d", &i)
			require.NoError(t, err)
			if i%2 == 0 {
				require.Equal(t, fmt.Sprint("k", i), d.Key, "%s: %s", what, d.EventID)
				require.Equal(t, map[string]string{"h": fmt.Sprint(i)}, d.Headers, "%s: %s", what, d.EventID)
			} else {
				require.Empty(t, d.Key, "%s: %s", what, d.EventID)
				require.Nil(t, d.Headers, "%s: %s", what, d.EventID)
			}
			if claimed[d.ID] {
				require.Equal(t, relaytype.StatusProcessing, d.Status, "%s: %s", what, d.EventID)
				require.Equal(t, "o", d.LeaseOwner, "%s: %s", what, d.EventID)
				require.NotEmpty(t, d.LeaseToken, "%s: %s", what, d.EventID)
				require.False(t, d.LeaseExpiresAt.IsZero(), "%s: %s", what, d.EventID)
			} else {
				require.Equal(t, relaytype.StatusPending, d.Status, "%s: %s", what, d.EventID)
				require.Empty(t, d.LeaseOwner, "%s: %s", what, d.EventID)
				require.Empty(t, d.LeaseToken, "%s: %s", what, d.EventID)
				require.True(t, d.LeaseExpiresAt.IsZero(), "%s: %s", what, d.EventID)
				require.Zero(t, d.FencingToken, "%s: %s", what, d.EventID)
			}
		}
	}

	list, err := s.DeliveryList(ctx, &driver.DeliveryListParams{})
	require.NoError(t, err)
	require.Len(t, list.Deliveries, n)
	check("list before the claim", list.Deliveries, nil)

	claimedDs, err := s.DeliveryClaim(ctx, &driver.DeliveryClaimParams{
		Owner: "o", Handlers: []string{"a"}, Limit: 2, LeaseDuration: time.Hour, Now: t0.Add(time.Second)})
	require.NoError(t, err)
	require.NotEmpty(t, claimedDs)
	claimed := map[string]bool{}
	for _, d := range claimedDs {
		claimed[d.ID] = true
	}
	check("claim", claimedDs, claimed)

	// The list then reads rows in flight beside rows that are not.
	list, err = s.DeliveryList(ctx, &driver.DeliveryListParams{})
	require.NoError(t, err)
	require.Len(t, list.Deliveries, n)
	check("list after the claim", list.Deliveries, claimed)
	var inFlight int
	for _, d := range list.Deliveries {
		if d.Status == relaytype.StatusProcessing {
			inFlight++
		}
	}
	require.Equal(t, len(claimed), inFlight)
	require.Less(t, inFlight, n, "rows in flight beside rows that are not")
}
