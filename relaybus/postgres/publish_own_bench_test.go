package postgres_test

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/berkcansavur/relaybus/relaybus"
	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/postgres"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

// BenchmarkPublishOwn measures EventPublish, the store's own transaction
// in one round trip, on the harness's P=1 batch=1 call (compare
// BenchmarkPublishTx/unkeyed-1, which adds BEGIN and COMMIT).
func BenchmarkPublishOwn(b *testing.B) {
	s, pool := benchStore(b)
	m := startMeasure(b, pool)
	for i := 0; b.Loop(); i++ {
		_, err := s.EventPublish(b.Context(), &driver.EventPublishParams{Now: t0, Events: []*driver.EventPublish{{
			Event:      &relaytype.Event{ID: fmt.Sprintf("e%d", i), Type: "t", Payload: make([]byte, 128)},
			Deliveries: []driver.DeliverySpec{{Handler: "a", MaxAttempts: 3}},
		}}})
		require.NoError(b, err)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
	m.report(b, int64(b.N), "event")
}

// BenchmarkPublishOwnRepublished is BenchmarkPublishOwn with calls that
// republish an event that exists with its handlers: every call (all), or
// one call in a hundred (1%, the others new). A call of unkeyed events of
// which one existed costs more round trips than a new one in the store's
// own transaction (publish.go's run).
func BenchmarkPublishOwnRepublished(b *testing.B) {
	for _, c := range []struct {
		name  string
		every int
	}{{"all", 1}, {"1%", 100}} {
		b.Run(c.name, func(b *testing.B) {
			s, pool := benchStore(b)
			publish := func(id string) {
				_, err := s.EventPublish(b.Context(), &driver.EventPublishParams{Now: t0, Events: []*driver.EventPublish{{
					Event:      &relaytype.Event{ID: id, Type: "t", Payload: make([]byte, 128)},
					Deliveries: []driver.DeliverySpec{{Handler: "a", MaxAttempts: 3}},
				}}})
				require.NoError(b, err)
			}
			publish("old")
			m := startMeasure(b, pool)
			for i := 0; b.Loop(); i++ {
				if i%c.every == 0 {
					publish("old")
				} else {
					publish(fmt.Sprintf("e%d", i))
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
			m.report(b, int64(b.N), "event")
		})
	}
}

// BenchmarkBusPublishParallel measures the harness's publish cells in a
// test: goroutines publishing through one Bus on a pool of 5, with group
// commit (the default) and without: P=32 batch=1, and P=8 batch=10.
func BenchmarkBusPublishParallel(b *testing.B) {
	for _, c := range []struct {
		name         string
		procs, batch int
		wait         time.Duration
	}{
		{"P=32-batch=1-grouped", 32, 1, 0}, {"P=32-batch=1-alone", 32, 1, relaybus.Disabled},
		{"P=8-batch=10-grouped", 8, 10, 0}, {"P=8-batch=10-alone", 8, 10, relaybus.Disabled},
	} {
		b.Run(c.name, func(b *testing.B) {
			s, pool := benchStore(b)
			bus, err := relaybus.New(relaybus.Store[pgx.Tx](s), relaybus.Config{PublishGroupWait: c.wait})
			require.NoError(b, err)
			require.NoError(b, bus.Declare("t", "a", nil))
			m := startMeasure(b, pool)
			var next atomic.Int64
			b.SetParallelism(max(1, c.procs/runtime.GOMAXPROCS(0)))
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					evs := make([]*relaybus.Event, c.batch)
					for i := range evs {
						evs[i] = &relaybus.Event{ID: fmt.Sprint("e", next.Add(1)), Type: "t", Payload: make([]byte, 128)}
					}
					if err := bus.Publish(b.Context(), evs...); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			b.ReportMetric(float64(b.N*c.batch)/b.Elapsed().Seconds(), "events/s")
			m.report(b, int64(b.N*c.batch), "event")
		})
	}
}

// BenchmarkPublishFloor puts EventPublish beside the floor of a durable
// publish on the same server: one row of a one-table queue (a job row with
// two indexes besides its primary key, as a River insert writes) inserted
// in its own transaction. Each is run with synchronous_commit on and off,
// so that a commit's WAL flush and the rest (statements, protocol,
// client) can be told apart; wal-syncs/op and wal-sync-us/op come from
// pg_stat_wal (its sync time only with track_wal_io_timing on), read after
// the benchmark's connections are closed so that their counts are in.
func BenchmarkPublishFloor(b *testing.B) {
	_, pool := benchStore(b)
	ctx := b.Context()
	_, err := pool.Exec(ctx, `CREATE TABLE floor_job (id bigserial PRIMARY KEY, kind text NOT NULL, args jsonb NOT NULL,
		state text NOT NULL DEFAULT 'available', queue text NOT NULL DEFAULT 'default', priority int NOT NULL DEFAULT 1,
		scheduled_at timestamptz NOT NULL DEFAULT now(), created_at timestamptz NOT NULL DEFAULT now());
		CREATE INDEX ON floor_job (state, queue, priority, scheduled_at, id);
		CREATE INDEX ON floor_job (kind)`)
	require.NoError(b, err)
	t0run := time.Now().UnixNano() // IDs new in every run of -count
	insert := func(ctx context.Context, p *pgxpool.Pool, _ *postgres.Store, _ string) error {
		_, err := p.Exec(ctx, `INSERT INTO floor_job (kind, args) VALUES ($1, $2)`, "t", `{"n":1}`)
		return err
	}
	publish := func(ctx context.Context, _ *pgxpool.Pool, s *postgres.Store, id string) error {
		_, err := s.EventPublish(ctx, &driver.EventPublishParams{Now: t0, Events: []*driver.EventPublish{{
			Event:      &relaytype.Event{ID: id, Type: "t", Payload: make([]byte, 128)},
			Deliveries: []driver.DeliverySpec{{Handler: "a", MaxAttempts: 3}},
		}}})
		return err
	}
	for _, c := range []struct {
		name string
		sync string
		op   func(context.Context, *pgxpool.Pool, *postgres.Store, string) error
	}{
		{"one-row-insert/sync", "on", insert}, {"publish/sync", "on", publish},
		{"one-row-insert/async", "off", insert}, {"publish/async", "off", publish},
	} {
		b.Run(c.name, func(b *testing.B) {
			cfg := pool.Config().Copy()
			cfg.ConnConfig.RuntimeParams["synchronous_commit"] = c.sync
			p, err := pgxpool.NewWithConfig(ctx, cfg)
			require.NoError(b, err)
			s, err := postgres.New(p, nil)
			require.NoError(b, err)
			var syncs0, syncTime0 float64
			const q = `SELECT wal_sync, wal_sync_time FROM pg_stat_wal`
			require.NoError(b, pool.QueryRow(ctx, q).Scan(&syncs0, &syncTime0))
			for i := 0; b.Loop(); i++ {
				require.NoError(b, c.op(ctx, p, s, fmt.Sprintf("%s-%d-%d", c.name, t0run, i)))
			}
			b.StopTimer()
			p.Close() // its backends exit, and report their WAL counts
			time.Sleep(200 * time.Millisecond)
			var syncs1, syncTime1 float64
			require.NoError(b, pool.QueryRow(ctx, q).Scan(&syncs1, &syncTime1))
			b.ReportMetric((syncs1-syncs0)/float64(b.N), "wal-syncs/op")
			b.ReportMetric((syncTime1-syncTime0)*1000/float64(b.N), "wal-sync-us/op")
		})
	}
}
