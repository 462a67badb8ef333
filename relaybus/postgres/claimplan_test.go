package postgres

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/berkcansavur/relaybus/internal/dbenv"
	"github.com/berkcansavur/relaybus/relaybus"
)

// planNode is the part of an EXPLAIN (FORMAT JSON) node these tests read.
type planNode struct {
	NodeType    string     `json:"Node Type"`
	SubplanName string     `json:"Subplan Name"`
	IndexName   string     `json:"Index Name"`
	Plans       []planNode `json:"Plans"`
}

// find returns the first node (depth first) for which match holds.
func (n *planNode) find(match func(*planNode) bool) *planNode {
	if match(n) {
		return n
	}
	for i := range n.Plans {
		if m := n.Plans[i].find(match); m != nil {
			return m
		}
	}
	return nil
}

// TestKeyedClaimPlanOnAFreshTable fills a table that was never analyzed
// with keyed deliveries, claims, and checks the plan the claim's keyed
// selection gets then: a walk of the due index in claim order that stops
// at the limit, not a sort of every keyed row after the ordering check has
// run for each. 0.1.0 got the sort (1.41s per claim at scale) until
// autovacuum first analyzed the table; the store now analyzes it itself.
// Autovacuum is off for the table, so that only the store can.
func TestKeyedClaimPlanOnAFreshTable(t *testing.T) {
	t.Parallel()
	cfg, err := pgxpool.ParseConfig(dbenv.TestDatabase(t))
	require.NoError(t, err)
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s, err := New(pool, nil)
	require.NoError(t, err)
	require.NoError(t, s.Setup(t.Context()))
	_, err = pool.Exec(t.Context(), `ALTER TABLE relaybus_deliveries SET (autovacuum_enabled = off)`)
	require.NoError(t, err)

	now := time.Date(2031, time.January, 1, 12, 0, 0, 0, time.UTC)
	claim := func(limit int) []*relaybus.Delivery {
		ds, err := s.DeliveryClaim(t.Context(), &relaybus.DeliveryClaimParams{
			Owner: "w", Handlers: []string{"h"}, Limit: limit, LeaseDuration: time.Minute, Now: now})
		require.NoError(t, err)
		return ds
	}
	hasStatistics := func() bool {
		var ok bool
		require.NoError(t, pool.QueryRow(t.Context(),
			`SELECT EXISTS (SELECT 1 FROM pg_stats WHERE tablename = 'relaybus_deliveries')`).Scan(&ok))
		return ok
	}

	// On the empty table there is nothing to analyze; the next claims check
	// again.
	require.Empty(t, claim(10))
	require.False(t, s.statisticsReady.Load())

	// 20,000 keyed deliveries over 4 keys, in publish order.
	const events, keys, perPublish = 20_000, 4, 5_000
	for start := 0; start < events; start += perPublish {
		eps := make([]*relaybus.EventPublish, perPublish)
		for i := range eps {
			n := start + i
			eps[i] = &relaybus.EventPublish{
				Event:      &relaybus.Event{ID: fmt.Sprintf("e%05d", n), Type: "t", Key: fmt.Sprintf("k%d", n%keys)},
				Deliveries: []relaybus.DeliverySpec{{Handler: "h", MaxAttempts: 3}},
			}
		}
		tx, err := s.TxBegin(t.Context())
		require.NoError(t, err)
		_, err = s.EventPublishTx(t.Context(), tx, &relaybus.EventPublishParams{Events: eps, Now: now.Add(-time.Hour)})
		require.NoError(t, err)
		require.NoError(t, s.TxCommit(t.Context(), tx))
	}
	require.False(t, hasStatistics(), "the table was analyzed before the claim")

	ds := claim(10)
	require.Len(t, ds, keys, "the first delivery of each key")

	var out string
	require.NoError(t, pool.QueryRow(t.Context(), "EXPLAIN (FORMAT JSON) "+s.q.claim,
		[]string{"h"}, now, 10, "w", "token", now.Add(time.Minute)).Scan(&out))
	var plans []struct {
		Plan planNode `json:"Plan"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &plans))
	require.Len(t, plans, 1)
	keyed := plans[0].Plan.find(func(n *planNode) bool { return n.SubplanName == "CTE due_keyed" })
	require.NotNil(t, keyed, "no CTE due_keyed in the plan:\n%s", out)
	require.Nil(t, keyed.find(func(n *planNode) bool { return n.NodeType == "Sort" || n.NodeType == "Incremental Sort" }),
		"the keyed selection sorts what it selected instead of walking the due index in order:\n%s", out)
	require.NotNil(t, keyed.find(func(n *planNode) bool { return n.IndexName == "relaybus_deliveries_due_idx" }),
		"the keyed selection does not walk the due index:\n%s", out)
	require.True(t, hasStatistics(), "the claim did not analyze the table")
	require.True(t, s.statisticsReady.Load())
}
