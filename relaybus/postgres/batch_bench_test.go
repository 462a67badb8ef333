package postgres_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/berkcansavur/relaybus/relaybus"
	"github.com/berkcansavur/relaybus/relaybus/postgres"
)

// BenchmarkHotKeysBatch is the harness's scenario 10 in process: one Bus
// drains a preloaded backlog of b.N*400 deliveries of 4 keys (b.N*20,000
// of 10,000 keys), with a handler of one delivery and with a batch
// handler of up to 20, each call waiting 1 ms (a round trip elsewhere). Beside
// deliveries/s it reports what does not depend on the machine's speed as
// much: handler calls and claims per delivery, and the store's per
// delivery figures (statements, WAL).
//
// carry=off runs the same Bus on a store that says it cannot complete and
// claim in one transaction (noCarry): completions are then written on
// their own, as before claims carried them.
//
// calls is the batch handler's BatchOptions.MaxCalls (0: the default):
// calls=1 claims one call's worth of a key at a time.
func BenchmarkHotKeysBatch(b *testing.B) {
	for _, keys := range []int{4, 10_000} {
		for _, batch := range []int{0, 20} {
			calls := []int{0}
			if batch > 0 {
				calls = []int{1, 0}
			}
			for _, maxCalls := range calls {
				for _, carry := range []bool{true, false} {
					name := fmt.Sprintf("keys=%d/batch=%d/carry=%s", keys, batch, onOff(carry))
					if batch > 0 {
						name = fmt.Sprintf("keys=%d/batch=%d/calls=%d/carry=%s", keys, batch, maxCalls, onOff(carry))
					}
					b.Run(name, func(b *testing.B) { benchKeyedBatch(b, keys, batch, maxCalls, carry) })
				}
			}
		}
	}
}

// noCarry is a store whose claims carry no completions
// (driver.CompletingClaimer says no): the dispatcher writes them on their
// own. Every other call is the store's.
type noCarry struct{ *postgres.Store }

func (noCarry) ClaimsCompletions() bool { return false }

// carrying returns st, or st behind noCarry when carry is false.
func carrying(st *postgres.Store, carry bool) relaybus.Store[pgx.Tx] {
	if carry {
		return st
	}
	return noCarry{st}
}

func onOff(on bool) string {
	if on {
		return "on"
	}
	return "off"
}

// benchKeyedBatch is one case of BenchmarkHotKeysBatch: keys keys, a
// batch handler of up to batch deliveries (0: a handler of one) and
// maxCalls calls a claim (0: the default), claims carrying completions or
// not.
func benchKeyedBatch(b *testing.B, keys, batch, maxCalls int, carry bool) {
	s, pool := benchStore(b)
	total := b.N * 400
	if keys > 4 {
		total = b.N * 20_000
	}
	preload(b, s, pool, total, func(i int) string { return fmt.Sprintf("k-%d", i%keys) })
	var completed, calls atomic.Int64
	var start time.Time
	now := func() time.Time { return t0.Add(time.Minute).Add(time.Since(start)) }
	st, err := postgres.New(pool, nil)
	require.NoError(b, err)
	bus, err := relaybus.New(carrying(st, carry), relaybus.Config{
		Owner: "bus", Concurrency: 64, BatchSize: 400, PollInterval: 50 * time.Millisecond, Now: now,
		AfterFinish: func(_ context.Context, f relaybus.Finish) {
			if f.Outcome == relaybus.FinishCompleted {
				completed.Add(1)
			}
		},
	})
	require.NoError(b, err)
	if batch > 0 {
		require.NoError(b, bus.HandleBatch("t", "h", func(context.Context, string, []*relaybus.Delivery) []error {
			calls.Add(1)
			time.Sleep(time.Millisecond)
			return nil
		}, &relaybus.BatchOptions{MaxSize: batch, MaxCalls: maxCalls}))
	} else {
		require.NoError(b, bus.Handle("t", "h", func(context.Context, *relaybus.Delivery) error {
			calls.Add(1)
			time.Sleep(time.Millisecond)
			return nil
		}, nil))
	}
	m := startMeasure(b, pool)
	b.ResetTimer()
	start = time.Now()
	require.NoError(b, bus.Start(context.Background()))
	for completed.Load() < int64(total) {
		time.Sleep(time.Millisecond)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	require.NoError(b, bus.Stop(context.Background()))
	b.ReportMetric(float64(total)/elapsed.Seconds(), "deliveries/s")
	b.ReportMetric(float64(calls.Load())/float64(total), "calls/delivery")
	b.ReportMetric(float64(bus.DispatcherStats().Claims)/float64(total), "claims/delivery")
	m.report(b, int64(total), "delivery")
}
